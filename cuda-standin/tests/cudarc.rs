//! cudarc 0.19 (as libkvstore uses it) runs on the stand-in: loaded as libcuda.so from
//! LD_LIBRARY_PATH by a child process.

mod common;

#[test]
fn cudarc_allocates_and_copies_on_the_standin() {
    const NAME: &str = "cudarc_allocates_and_copies_on_the_standin";
    if common::is_child(NAME) {
        use cudarc::driver::CudaContext;
        assert_eq!(CudaContext::device_count().unwrap(), 3);
        let ctx = CudaContext::new(2).unwrap();
        assert_eq!(ctx.ordinal(), 2);
        let stream = ctx.default_stream();
        let data: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let device = stream.clone_htod(&data).unwrap();
        let mut copy = stream.alloc_zeros::<f32>(1000).unwrap();
        stream.memcpy_dtod(&device, &mut copy).unwrap();
        let back = stream.clone_dtoh(&copy).unwrap();
        assert_eq!(back, data);
        let other = ctx.new_stream().unwrap();
        let again = other.clone_dtoh(&device).unwrap();
        assert_eq!(again, data);
        println!("cudarc on the stand-in: ok");
        return;
    }
    let dir = common::library_dir();
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", dir.display()),
        _ => dir.display().to_string(),
    };
    let out = common::run_child(NAME, &[("LD_LIBRARY_PATH", &path), ("CUDA_STANDIN_DEVICES", "3")]);
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && log.contains("cudarc on the stand-in: ok"), "{log}");
}
