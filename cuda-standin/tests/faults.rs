//! Faults on demand (CUDA_STANDIN_FAIL) and the trace (CUDA_STANDIN_TRACE).

#[macro_use]
mod common;
use common::{setup, Api, Ptr};
use std::ptr::null_mut;

isolated_test!(the_nth_allocation_runs_out_of_memory, ["CUDA_STANDIN_FAIL" = "cuMemAlloc_v2:3"], {
    let api = Api::load();
    setup(&api, 0);
    let mut d = 0u64;
    let codes: Vec<i32> = (0..4).map(|_| cu!(api.cuMemAlloc_v2(&mut d, 16))).collect();
    assert_eq!(codes, [0, 0, 2, 0]);
    ok!(api.cuCtxSynchronize());
});

isolated_test!(a_failed_async_copy_is_reported_by_the_next_synchronisation, ["CUDA_STANDIN_FAIL" = "cuMemcpyHtoDAsync_v2:2"], {
    let api = Api::load();
    setup(&api, 0);
    let mut s: Ptr = null_mut();
    ok!(api.cuStreamCreate(&mut s, 0));
    let mut d = 0u64;
    ok!(api.cuMemAlloc_v2(&mut d, 16));
    let src = [0u8; 16];
    ok!(api.cuMemcpyHtoDAsync_v2(d, src.as_ptr().cast(), 16, s));
    ok!(api.cuStreamSynchronize(s));
    ok!(api.cuMemcpyHtoDAsync_v2(d, src.as_ptr().cast(), 16, s));
    assert_eq!(cu!(api.cuStreamSynchronize(s)), 700);
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut d, 16)), 700, "sticky");
});

isolated_test!(an_event_synchronisation_fails_as_a_device_fault, ["CUDA_STANDIN_FAIL" = "cuEventSynchronize:1"], {
    let api = Api::load();
    setup(&api, 0);
    let mut e: Ptr = null_mut();
    ok!(api.cuEventCreate(&mut e, 0));
    ok!(api.cuEventRecord(e, null_mut()));
    assert_eq!(cu!(api.cuEventSynchronize(e)), 700);
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
});

isolated_test!(the_trace_has_one_line_per_call, ["CUDA_STANDIN_TRACE" = common::trace_path("the_trace_has_one_line_per_call")], {
    let path = common::trace_path("the_trace_has_one_line_per_call");
    let _ = std::fs::remove_file(&path);
    let api = Api::load();
    setup(&api, 1);
    let mut d = 0u64;
    ok!(api.cuMemAlloc_v2(&mut d, 4096));
    let mut p: Ptr = null_mut();
    ok!(api.cuMemHostAlloc(&mut p, 256, 0));
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut d, 1 << 40)), 2);
    ok!(api.cuCtxSynchronize());
    let text = std::fs::read_to_string(&path).unwrap();
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    let lines: Vec<&str> = text.lines().collect();
    let calls: Vec<&str> = lines.iter().map(|l| l.split(' ').find_map(|f| f.strip_prefix("call=")).unwrap()).collect();
    assert_eq!(calls, ["cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemHostAlloc", "cuMemAlloc_v2", "cuCtxSynchronize"]);
    for line in &lines {
        assert!(line.starts_with(&format!("standin pid={} tid={tid} call=", std::process::id())), "{line}");
    }
    assert!(lines[3].contains(" dev=1 stream=- bytes=4096 result=0 ptr=0x4"), "{}", lines[3]);
    assert!(lines[5].contains(&format!(" bytes={} result=2", 1u64 << 40)), "{}", lines[5]);
    assert_eq!(lines.iter().filter(|l| l.contains("call=cuMemHostAlloc ")).count(), 1);
});
