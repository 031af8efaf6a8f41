//! Module images (NVRTC's CUBIN and PTX accepted, anything else refused), function
//! resolution to the host build, and launches through the whole path: NVRTC output →
//! cuModuleLoadData → cuModuleGetFunction → cuLaunchKernel → the host build on a stream.

#[macro_use]
mod common;
use common::nvrtc::{self, FILES};
use common::{setup, Api, Ptr};
use std::ffi::{c_void, CString};
use std::ptr::null_mut;

fn load_module(api: &Api, image: &[u8]) -> Result<Ptr, i32> {
    let mut module: Ptr = null_mut();
    match cu!(api.cuModuleLoadData(&mut module, image.as_ptr().cast())) {
        0 => Ok(module),
        code => Err(code),
    }
}

fn function(api: &Api, module: Ptr, name: &str) -> Result<Ptr, i32> {
    let name = CString::new(name).unwrap();
    let mut f: Ptr = null_mut();
    match cu!(api.cuModuleGetFunction(&mut f, module, name.as_ptr())) {
        0 => Ok(f),
        code => Err(code),
    }
}

isolated_test!(images_other_than_ptx_and_cubin_are_refused, [], {
    let api = Api::load();
    setup(&api, 0);
    assert_eq!(load_module(&api, b"int main() { return 0; }\0"), Err(200));
    assert_eq!(load_module(&api, b"\x7fELF\x01\x01\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"), Err(200), "32-bit ELF");
    let ptx = b".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry not_in_the_host_build(\n.param .u64 p0\n)\n{ ret; }\n\0";
    let module = load_module(&api, ptx).unwrap();
    assert_eq!(function(&api, module, "not_in_the_host_build"), Err(500), "defined by the image, absent from the host build");
    assert_eq!(function(&api, module, "copy_bytes"), Err(500), "absent from the image");
    ok!(api.cuModuleUnload(module));
    assert_eq!(function(&api, module, "not_in_the_host_build"), Err(400), "unloaded");
});

isolated_test!(nvrtc_images_of_every_kernel_file_load, [], {
    let Some(nvrtc) = nvrtc::load() else { return };
    let api = Api::load();
    setup(&api, 0);
    let host = cuda_standin::host_kernels::names();
    let mut resolved = 0;
    for file in FILES {
        for arch in ["sm_90", "compute_90"] {
            let mut image = nvrtc.compile(file, arch);
            if arch.starts_with("compute") && image.last() != Some(&0) {
                image.push(0);
            }
            let module = load_module(&api, &image).unwrap_or_else(|e| panic!("{file} {arch}: {e}"));
            for name in &host {
                match function(&api, module, name) {
                    Ok(_) => resolved += 1,
                    Err(500) => {}
                    Err(e) => panic!("{name}: {e}"),
                }
            }
        }
    }
    assert_eq!(resolved, host.len() * 2, "every host kernel is defined by exactly one file, in both forms");
    println!("{} host kernels resolved from NVRTC's CUBIN and PTX", host.len());
});

/// The CUBIN's parameter records (.nv.info) and the PTX's .param lists agree on every kernel.
#[test]
fn cubin_and_ptx_give_the_same_parameter_sizes() {
    let Some(nvrtc) = nvrtc::load() else { return };
    for file in FILES {
        let cubin = cuda_standin::image::cubin_kernels(&nvrtc.compile(file, "sm_90")).unwrap();
        let ptx_bytes = nvrtc.compile(file, "compute_90");
        let ptx_text = std::str::from_utf8(&ptx_bytes).unwrap().trim_end_matches('\0');
        let mut ptx = cuda_standin::image::ptx_kernels(ptx_text).unwrap();
        let mut cubin = cubin;
        cubin.sort_by(|a, b| a.name.cmp(&b.name));
        ptx.sort_by(|a, b| a.name.cmp(&b.name));
        assert!(!cubin.is_empty(), "{file} defines kernels");
        assert_eq!(cubin, ptx, "{file}");
        if file == "copy.cu" {
            let copy = cubin.iter().find(|k| k.name == "copy_bytes").unwrap();
            assert_eq!(copy.params, [8, 8, 8]);
        }
    }
}

/// copy_bytes from NVRTC's CUBIN of kernels/copy.cu, or None (reason printed) while the host
/// build has no copy_bytes or NVRTC is absent.
fn copy_bytes(api: &Api) -> Option<Ptr> {
    if cuda_standin::host_kernels::find("copy_bytes").is_none() {
        println!("skipped: the host build has no copy_bytes yet");
        return None;
    }
    let image = nvrtc::load()?.compile("copy.cu", "sm_90");
    Some(function(api, load_module(api, &image).unwrap(), "copy_bytes").unwrap())
}

/// Launches copy_bytes(dst, src, n) on `stream`.
#[allow(clippy::too_many_arguments)] // cuLaunchKernel's own shape
fn launch_copy(api: &Api, f: Ptr, grid: [u32; 3], block: [u32; 3], shared: u32, stream: Ptr, dst: u64, src: u64, n: u64) -> i32 {
    let (mut d, mut s, mut n) = (dst, src, n);
    let mut params: [*mut c_void; 3] = [(&mut d as *mut u64).cast(), (&mut s as *mut u64).cast(), (&mut n as *mut u64).cast()];
    cu!(api.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream, params.as_mut_ptr(), null_mut()))
}

isolated_test!(a_kernel_runs_through_the_whole_path, ["CUDA_STANDIN_DELAY_US" = 5000, "CUDA_STANDIN_TRACE" = common::trace_path("a_kernel_runs_through_the_whole_path")], {
    let trace = common::trace_path("a_kernel_runs_through_the_whole_path");
    let _ = std::fs::remove_file(&trace);
    let api = Api::load();
    setup(&api, 0);
    let Some(f) = copy_bytes(&api) else { return };
    let (mut src, mut dst) = (0u64, 0u64);
    ok!(api.cuMemAlloc_v2(&mut src, 1000));
    ok!(api.cuMemAlloc_v2(&mut dst, 1000));
    let data: Vec<u8> = (0..1000).map(|i| (i * 7 % 251) as u8).collect();
    ok!(api.cuMemcpyHtoD_v2(src, data.as_ptr().cast(), 1000));
    let mut s: Ptr = null_mut();
    ok!(api.cuStreamCreate(&mut s, 0));
    assert_eq!(launch_copy(&api, f, [3, 1, 1], [128, 1, 1], 0, s, dst, src, 1000), 0);
    assert_eq!(cu!(api.cuStreamQuery(s)), 600, "the launch runs on the stream, later");
    ok!(api.cuStreamSynchronize(s));
    let mut back = vec![0u8; 1000];
    ok!(api.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dst, 1000));
    assert_eq!(back, data);
    let launches: Vec<String> = std::fs::read_to_string(&trace).unwrap().lines().filter(|l| l.contains(" call=cuLaunchKernel ")).map(str::to_string).collect();
    assert_eq!(launches.len(), 1, "{launches:?}");
    assert!(launches[0].contains(" dev=0 ") && launches[0].ends_with(" result=0 kernel=copy_bytes grid=3x1x1 block=128x1x1 shared=0"), "{}", launches[0]);
});

isolated_test!(launches_beyond_the_devices_limits_are_refused, [], {
    let api = Api::load();
    setup(&api, 0);
    let Some(f) = copy_bytes(&api) else { return };
    let mut buf = 0u64;
    ok!(api.cuMemAlloc_v2(&mut buf, 64));
    let launch = |grid: [u32; 3], block: [u32; 3], shared: u32| launch_copy(&api, f, grid, block, shared, null_mut(), buf, buf, 0);
    assert_eq!(launch([1, 1, 1], [1024, 1, 1], 0), 0);
    assert_eq!(launch([1, 1, 1], [1025, 1, 1], 0), 1, "more than 1024 in x");
    assert_eq!(launch([1, 1, 1], [32, 32, 2], 0), 1, "more than 1024 threads");
    assert_eq!(launch([1, 1, 1], [1, 1, 65], 0), 1, "more than 64 in z");
    assert_eq!(launch([1, 65536, 1], [1, 1, 1], 0), 1, "grid y beyond 65535");
    assert_eq!(launch([0, 1, 1], [1, 1, 1], 0), 1, "an empty grid");
    assert_eq!(launch([1 << 31, 1, 1], [1, 1, 1], 0), 1, "grid x beyond 2^31-1");
    assert_eq!(launch([1, 1, 1], [1, 1, 1], 48 * 1024 + 1), 1, "more dynamic shared memory than 48 KiB without opting in");
    // Opting in is accepted up to 227 KiB (the host build runs no kernel with shared memory,
    // so no launch uses it here).
    ok!(api.cuFuncSetAttribute(f, 8, 227 * 1024));
    assert_eq!(cu!(api.cuFuncSetAttribute(f, 8, 227 * 1024 + 1)), 1, "beyond the opt-in limit");
    ok!(api.cuCtxSynchronize());
});

isolated_test!(a_kernel_given_a_freed_pointer_faults_at_the_next_synchronisation, [], {
    let api = Api::load();
    setup(&api, 0);
    let Some(f) = copy_bytes(&api) else { return };
    let (mut a, mut b) = (0u64, 0u64);
    ok!(api.cuMemAlloc_v2(&mut a, 64));
    ok!(api.cuMemAlloc_v2(&mut b, 64));
    ok!(api.cuMemFree_v2(b));
    assert_eq!(launch_copy(&api, f, [1, 1, 1], [64, 1, 1], 0, null_mut(), a, b, 64), 0, "a launch is not checked before it runs");
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut b, 64)), 700, "sticky");
});

isolated_test!(an_injected_kernel_fault_is_sticky, ["CUDA_STANDIN_FAIL" = "cuLaunchKernel:2"], {
    let api = Api::load();
    setup(&api, 0);
    let Some(f) = copy_bytes(&api) else { return };
    let mut a = 0u64;
    ok!(api.cuMemAlloc_v2(&mut a, 64));
    assert_eq!(launch_copy(&api, f, [1, 1, 1], [64, 1, 1], 0, null_mut(), a, a, 64), 0);
    ok!(api.cuCtxSynchronize());
    assert_eq!(launch_copy(&api, f, [1, 1, 1], [64, 1, 1], 0, null_mut(), a, a, 64), 0);
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
    assert_eq!(launch_copy(&api, f, [1, 1, 1], [64, 1, 1], 0, null_mut(), a, a, 64), 700, "sticky");
});
