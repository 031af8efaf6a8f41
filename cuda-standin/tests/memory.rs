//! Devices, contexts, allocation accounting, copies, the sticky illegal address, pinned host
//! memory, peer access, and what a host read of device memory and a fork do.

#[macro_use]
mod common;
use common::{setup, Api, Ptr};
use std::ffi::{c_int, c_void, CStr};
use std::ptr::null_mut;

isolated_test!(devices_have_h100_attributes, ["CUDA_STANDIN_DEVICES" = 3], {
    let api = Api::load();
    let mut version = 0;
    ok!(api.cuDriverGetVersion(&mut version));
    assert_eq!(version, 12080);
    ok!(api.cuInit(0));
    let mut count = 0;
    ok!(api.cuDeviceGetCount(&mut count));
    assert_eq!(count, 3);
    let attribute = |a: c_int, d: c_int| {
        let mut v = -1;
        ok!(api.cuDeviceGetAttribute(&mut v, a, d));
        v
    };
    for (attr, want) in [(75, 9), (76, 0), (16, 132), (1, 1024), (2, 1024), (4, 64), (5, i32::MAX), (6, 65535), (10, 32), (8, 48 * 1024), (97, 227 * 1024), (41, 1)] {
        assert_eq!(attribute(attr, 2), want, "attribute {attr}");
    }
    assert_eq!(cu!(api.cuDeviceGetAttribute(&mut 0, 75, 3)), 101);
    let mut name = [0 as std::ffi::c_char; 100];
    ok!(api.cuDeviceGetName(name.as_mut_ptr(), 100, 0));
    // SAFETY: the stand-in NUL-terminates the name inside the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_str().unwrap().to_string();
    assert!(name.contains("H100") && name.contains("stand-in"), "{name}");
    let mut can = -1;
    ok!(api.cuDeviceCanAccessPeer(&mut can, 0, 1));
    assert_eq!(can, 1);
    ok!(api.cuDeviceCanAccessPeer(&mut can, 1, 1));
    assert_eq!(can, 0);
});

isolated_test!(no_device_is_cuda_error_no_device, ["CUDA_STANDIN_DEVICES" = 0], {
    let api = Api::load();
    assert_eq!(cu!(api.cuInit(0)), 100);
    assert_eq!(cu!(api.cuDeviceGetCount(&mut 0)), 3, "calls after a failed cuInit are not initialised");
});

isolated_test!(driver_version_is_configurable, ["CUDA_STANDIN_DRIVER_VERSION" = 11040], {
    let api = Api::load();
    let mut version = 0;
    ok!(api.cuDriverGetVersion(&mut version));
    assert_eq!(version, 11040);
});

isolated_test!(calls_before_cuinit_are_refused, [], {
    let api = Api::load();
    assert_eq!(cu!(api.cuDeviceGetCount(&mut 0)), 3);
    assert_eq!(cu!(api.cuInit(1)), 1);
});

fn mem_info(api: &Api) -> (usize, usize) {
    let (mut free, mut total) = (0, 0);
    ok!(api.cuMemGetInfo_v2(&mut free, &mut total));
    (free, total)
}

isolated_test!(allocations_are_accounted_and_run_out, ["CUDA_STANDIN_MEMORY" = 1 << 20], {
    let api = Api::load();
    setup(&api, 0);
    assert_eq!(mem_info(&api), (1 << 20, 1 << 20));
    let (mut a, mut b) = (0u64, 0u64);
    ok!(api.cuMemAlloc_v2(&mut a, 600 << 10));
    assert_eq!(mem_info(&api).0, (1 << 20) - (600 << 10));
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut b, 600 << 10)), 2, "beyond the device's memory");
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut b, 0)), 1);
    ok!(api.cuMemFree_v2(a));
    assert_eq!(mem_info(&api).0, 1 << 20);
    assert_eq!(cu!(api.cuMemFree_v2(a)), 1, "double free");
    ok!(api.cuMemAlloc_v2(&mut b, 600 << 10));
    assert_eq!(cu!(api.cuMemFree_v2(b + 8)), 1, "not the start of an allocation");
    assert_eq!(b % 256, 0);
    // Memory of another device is accounted there.
    let mut ctx1: Ptr = null_mut();
    ok!(api.cuCtxCreate_v2(&mut ctx1, 0, 1));
    assert_eq!(mem_info(&api).0, 1 << 20);
    ok!(api.cuCtxDestroy_v2(ctx1));
    ok!(api.cuMemFree_v2(b));
});

isolated_test!(copies_and_memsets_round_trip, [], {
    let api = Api::load();
    setup(&api, 0);
    let (mut a, mut b) = (0u64, 0u64);
    ok!(api.cuMemAlloc_v2(&mut a, 64));
    ok!(api.cuMemAlloc_v2(&mut b, 64));
    let src: Vec<u8> = (0..64).collect();
    ok!(api.cuMemcpyHtoD_v2(a, src.as_ptr().cast(), 64));
    ok!(api.cuMemcpyDtoD_v2(b, a, 64));
    ok!(api.cuMemsetD8_v2(b, 0xab, 4));
    ok!(api.cuMemsetD32_v2(b + 4, 0x01020304, 2));
    assert_eq!(cu!(api.cuMemsetD32_v2(b + 2, 0, 1)), 1, "misaligned 32-bit memset");
    let mut back = vec![0u8; 64];
    ok!(api.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), b, 64));
    let mut want = src.clone();
    want[..4].fill(0xab);
    want[4..12].copy_from_slice(&[4, 3, 2, 1, 4, 3, 2, 1]);
    assert_eq!(back, want);
    ok!(api.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), a + 60, 4));
    assert_eq!(&back[..4], &src[60..]);
});

isolated_test!(an_out_of_bounds_copy_is_a_sticky_illegal_address, [], {
    let api = Api::load();
    setup(&api, 0);
    let mut a = 0u64;
    ok!(api.cuMemAlloc_v2(&mut a, 16));
    let src = [0u8; 32];
    assert_eq!(cu!(api.cuMemcpyHtoD_v2(a, src.as_ptr().cast(), 32)), 700);
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut a, 16)), 700, "the error is sticky");
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
    // Another context is unaffected.
    let mut other: Ptr = null_mut();
    ok!(api.cuCtxCreate_v2(&mut other, 0, 1));
    ok!(api.cuMemAlloc_v2(&mut a, 16));
    // A host pointer that is not pinned is no device address either.
    assert_eq!(cu!(api.cuMemcpyHtoD_v2(src.as_ptr() as u64, src.as_ptr().cast(), 4)), 700);
});

isolated_test!(peer_access_governs_cross_device_copies, ["CUDA_STANDIN_DEVICES" = 3], {
    let api = Api::load();
    ok!(api.cuInit(0));
    let mut ctx: [Ptr; 3] = [null_mut(); 3];
    let mut buf = [0u64; 3];
    for d in 0..3 {
        ok!(api.cuDevicePrimaryCtxRetain(&mut ctx[d], d as c_int));
        ok!(api.cuCtxSetCurrent(ctx[d]));
        ok!(api.cuMemAlloc_v2(&mut buf[d], 8));
        ok!(api.cuMemsetD8_v2(buf[d], d as u8 + 1, 8));
    }
    // A peer copy names both contexts: no peer access needed.
    ok!(api.cuCtxSetCurrent(ctx[0]));
    ok!(api.cuMemcpyPeer(buf[0], ctx[0], buf[1], ctx[1], 8));
    let mut back = [0u8; 8];
    ok!(api.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), buf[0], 8));
    assert_eq!(back, [2; 8]);
    // A plain copy from device 1's memory needs peer access.
    ok!(api.cuCtxEnablePeerAccess(ctx[1], 0));
    assert_eq!(cu!(api.cuCtxEnablePeerAccess(ctx[1], 0)), 704);
    ok!(api.cuMemsetD8_v2(buf[1], 7, 8));
    ok!(api.cuMemcpyDtoD_v2(buf[0], buf[1], 8));
    ok!(api.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), buf[0], 8));
    assert_eq!(back, [7; 8]);
    // Device 2 was never enabled: illegal address, sticky for context 0.
    assert_eq!(cu!(api.cuMemcpyDtoD_v2(buf[0], buf[2], 8)), 700);
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
});

isolated_test!(pinned_host_memory_is_counted_and_checked, [], {
    let api = Api::load();
    setup(&api, 0);
    let mut pinned: Ptr = null_mut();
    ok!(api.cuMemHostAlloc(&mut pinned, 4096, 0x1 | 0x2));
    let mut kind = 0u32;
    ok!(api.cuPointerGetAttribute((&mut kind as *mut u32).cast(), 2, pinned as u64));
    assert_eq!(kind, 1, "CU_MEMORYTYPE_HOST");
    let mut dev = 0u64;
    ok!(api.cuMemAlloc_v2(&mut dev, 64));
    ok!(api.cuPointerGetAttribute((&mut kind as *mut u32).cast(), 2, dev + 8));
    assert_eq!(kind, 2, "CU_MEMORYTYPE_DEVICE");
    let mut pageable = vec![0u8; 4096];
    assert_eq!(cu!(api.cuMemFreeHost(pageable.as_mut_ptr().cast())), 1, "not pinned");
    assert_eq!(cu!(api.cuPointerGetAttribute((&mut kind as *mut u32).cast(), 2, pageable.as_ptr() as u64)), 1);
    ok!(api.cuMemHostRegister_v2(pageable.as_mut_ptr().cast(), 4096, 0));
    assert_eq!(cu!(api.cuMemHostRegister_v2(pageable.as_mut_ptr().cast(), 16, 0)), 712);
    assert_eq!(cu!(api.cuMemFreeHost(pageable.as_mut_ptr().cast())), 1, "registered, not allocated");
    ok!(api.cuMemHostUnregister(pageable.as_mut_ptr().cast()));
    assert_eq!(cu!(api.cuMemHostUnregister(pageable.as_mut_ptr().cast())), 713);
    ok!(api.cuMemFreeHost(pinned));
    assert_eq!(cu!(api.cuMemFreeHost(pinned)), 1, "double free");
});

/// A child that reads a device pointer on the host must die by a signal, as on a GPU.
#[test]
fn a_host_read_of_a_device_pointer_kills_the_reader() {
    const NAME: &str = "a_host_read_of_a_device_pointer_kills_the_reader";
    if common::is_child(NAME) {
        let api = Api::load();
        setup(&api, 0);
        let mut dev = 0u64;
        ok!(api.cuMemAlloc_v2(&mut dev, 64));
        println!("reading {dev:#x}");
        // SAFETY: deliberately not: the read must fault and kill this child process.
        let value = unsafe { std::ptr::read_volatile(dev as *const u8) };
        println!("read {value} without faulting");
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let out = common::run_child(NAME, &[]);
    let signal = out.status.signal();
    assert!(matches!(signal, Some(libc::SIGSEGV) | Some(libc::SIGBUS)), "child status {:?}, output {}", out.status, String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("reading 0x4"), "the child reached the read");
}

isolated_test!(a_process_forked_after_cuinit_gets_errors, [], {
    let api = Api::load();
    setup(&api, 0);
    let mut dev = 0u64;
    ok!(api.cuMemAlloc_v2(&mut dev, 64));
    // SAFETY: the child only calls the stand-in (which refuses at once) and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut again = 0u64;
        let codes = [cu!(api.cuMemAlloc_v2(&mut again, 64)), cu!(api.cuCtxSynchronize()), cu!(api.cuInit(0)), cu!(api.cuMemFree_v2(dev))];
        // SAFETY: ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(if codes == [3, 3, 3, 3] { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the forked child's calls did not all answer 3");
    ok!(api.cuMemFree_v2(dev));
    let _ = std::ptr::null::<c_void>();
});

isolated_test!(releasing_or_destroying_a_context_frees_its_memory, ["CUDA_STANDIN_MEMORY" = 1 << 20], {
    let api = Api::load();
    let primary = setup(&api, 0);
    let mut d = 0u64;
    ok!(api.cuMemAlloc_v2(&mut d, 1 << 19));
    assert_eq!(mem_info(&api).0, 1 << 19);
    ok!(api.cuDevicePrimaryCtxRelease_v2(0));
    assert_eq!(cu!(api.cuDevicePrimaryCtxRelease_v2(0)), 201, "not retained");
    let mut again: Ptr = null_mut();
    ok!(api.cuDevicePrimaryCtxRetain(&mut again, 0));
    assert_eq!(again, primary, "the primary context keeps its handle");
    assert_eq!(mem_info(&api).0, 1 << 20, "the last release freed the context's memory");
    assert_eq!(cu!(api.cuMemFree_v2(d)), 1);
    let mut created: Ptr = null_mut();
    ok!(api.cuCtxCreate_v2(&mut created, 0, 0));
    ok!(api.cuMemAlloc_v2(&mut d, 1 << 19));
    ok!(api.cuCtxDestroy_v2(created));
    ok!(api.cuCtxSetCurrent(primary));
    assert_eq!(mem_info(&api).0, 1 << 20, "destroying a context frees its memory");
    assert_eq!(cu!(api.cuCtxSetCurrent(created)), 709, "destroyed");
    assert_eq!(cu!(api.cuCtxDestroy_v2(primary)), 201, "a primary context is released, not destroyed");
});
