//! cudarc 0.19 (as libkvstore uses it) runs on the stand-in: loaded as libcuda.so from
//! LD_LIBRARY_PATH by a child process.

#[macro_use]
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
        // A launch through cudarc's builder: NVRTC's CUBIN of kernels/copy.cu, copy_bytes.
        if let Ok(path) = std::env::var("CUDARC_TEST_CUBIN") {
            use cudarc::driver::{LaunchConfig, PushKernelArg};
            let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(std::fs::read(path).unwrap())).unwrap();
            let copy_bytes = module.load_function("copy_bytes").unwrap();
            let src = stream.clone_htod(&(0..=255u8).cycle().take(5000).collect::<Vec<u8>>()).unwrap();
            let mut dst = stream.alloc_zeros::<u8>(5000).unwrap();
            let n = 5000u64;
            let config = LaunchConfig { grid_dim: (4, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: copy_bytes(u8* dst, const u8* src, u64 n) with n bytes in both buffers.
            unsafe { stream.launch_builder(&copy_bytes).arg(&mut dst).arg(&src).arg(&n).launch(config) }.unwrap();
            assert_eq!(stream.clone_dtoh(&dst).unwrap(), stream.clone_dtoh(&src).unwrap());
            println!("cudarc launch on the stand-in: ok");
        }
        println!("cudarc on the stand-in: ok");
        return;
    }
    let dir = common::library_dir();
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", dir.display()),
        _ => dir.display().to_string(),
    };
    let mut env = vec![("LD_LIBRARY_PATH", path), ("CUDA_STANDIN_DEVICES", "3".to_string())];
    let launches = cuda_standin::host_kernels::find("copy_bytes").is_some() && common::nvrtc::load().is_some_and(|nvrtc| {
        let cubin = dir.join("copy.cubin");
        std::fs::write(&cubin, nvrtc.compile("copy.cu", "sm_90")).unwrap();
        env.push(("CUDARC_TEST_CUBIN", cubin.display().to_string()));
        true
    });
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = common::run_child(NAME, &env);
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && log.contains("cudarc on the stand-in: ok"), "{log}");
    assert!(!launches || log.contains("cudarc launch on the stand-in: ok"), "{log}");
}
