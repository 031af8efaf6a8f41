//! Streams and events: asynchronous order inside and across streams and devices (with an
//! injected delay so an ordering bug shows), the legacy default stream, pageable versus
//! pinned copies, host functions, events.

#[macro_use]
mod common;
use common::{setup, Api, Gate, Ptr};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Delay of every stream operation in these tests: far longer than a call takes.
const DELAY_US: u32 = 20_000;

fn stream(api: &Api, flags: u32) -> Ptr {
    let mut s: Ptr = null_mut();
    ok!(api.cuStreamCreate(&mut s, flags));
    s
}

fn event(api: &Api, flags: u32) -> Ptr {
    let mut e: Ptr = null_mut();
    ok!(api.cuEventCreate(&mut e, flags));
    e
}

/// A pinned buffer of `n` u32s.
fn pinned(api: &Api, n: usize) -> &'static mut [u32] {
    let mut p: Ptr = null_mut();
    ok!(api.cuMemHostAlloc(&mut p, n * 4, 0));
    // SAFETY: fresh pinned memory of n u32s, never freed in these short-lived processes.
    unsafe { std::slice::from_raw_parts_mut(p.cast::<u32>(), n) }
}

fn device(api: &Api, bytes: usize) -> u64 {
    let mut d = 0u64;
    ok!(api.cuMemAlloc_v2(&mut d, bytes));
    d
}

isolated_test!(work_runs_asynchronously_and_in_order, ["CUDA_STANDIN_DELAY_US" = DELAY_US], {
    let api = Api::load();
    setup(&api, 0);
    let (a, b) = (stream(&api, 0), stream(&api, 0));
    let buf = device(&api, 4);
    let host = pinned(&api, 2);
    host[0] = 42;
    let gate = Gate::close(&api, a);
    ok!(api.cuMemsetD32Async(buf, 1, 1, a));
    ok!(api.cuMemsetD32Async(buf, 2, 1, a));
    ok!(api.cuMemcpyHtoDAsync_v2(buf, host.as_ptr().cast(), 4, a));
    assert_eq!(cu!(api.cuStreamQuery(a)), 600, "held at the gate");
    let written = event(&api, 0);
    ok!(api.cuEventRecord(written, a));
    assert_eq!(cu!(api.cuEventQuery(written)), 600);
    // Without a wait, stream b reads before a's copy lands (the control showing the wait matters).
    ok!(api.cuMemcpyDtoHAsync_v2(host[1..].as_mut_ptr().cast(), buf, 4, b));
    ok!(api.cuStreamSynchronize(b));
    assert_ne!(host[1], 42, "b's read must not see a's later copy without a wait");
    gate.open();
    ok!(api.cuStreamWaitEvent(b, written, 0));
    ok!(api.cuMemcpyDtoHAsync_v2(host[1..].as_mut_ptr().cast(), buf, 4, b));
    ok!(api.cuStreamSynchronize(b));
    assert_eq!(host[1], 42, "after waiting for the event, b sees a's copy");
    ok!(api.cuEventQuery(written));
    ok!(api.cuStreamQuery(a));
});

isolated_test!(streams_wait_for_events_of_other_devices, ["CUDA_STANDIN_DELAY_US" = DELAY_US], {
    let api = Api::load();
    ok!(api.cuInit(0));
    let (mut c0, mut c1): (Ptr, Ptr) = (null_mut(), null_mut());
    ok!(api.cuDevicePrimaryCtxRetain(&mut c0, 0));
    ok!(api.cuDevicePrimaryCtxRetain(&mut c1, 1));
    ok!(api.cuCtxSetCurrent(c0));
    let s0 = stream(&api, 0x1);
    let b0 = device(&api, 4);
    let host = pinned(&api, 2);
    host[0] = 7;
    ok!(api.cuMemsetD32Async(b0, 0, 1, s0));
    ok!(api.cuMemcpyHtoDAsync_v2(b0, host.as_ptr().cast(), 4, s0));
    let done = event(&api, 0x2);
    ok!(api.cuEventRecord(done, s0));
    ok!(api.cuCtxSetCurrent(c1));
    let s1 = stream(&api, 0x1);
    let b1 = device(&api, 4);
    ok!(api.cuStreamWaitEvent(s1, done, 0));
    ok!(api.cuMemcpyPeerAsync(b1, c1, b0, c0, 4, s1));
    ok!(api.cuMemcpyDtoHAsync_v2(host[1..].as_mut_ptr().cast(), b1, 4, s1));
    ok!(api.cuStreamSynchronize(s1));
    assert_eq!(host[1], 7);
});

isolated_test!(events_time_and_survive_destruction_while_awaited, ["CUDA_STANDIN_DELAY_US" = DELAY_US], {
    let api = Api::load();
    setup(&api, 0);
    let (a, b) = (stream(&api, 0), stream(&api, 0));
    let (start, end, untimed) = (event(&api, 0), event(&api, 0), event(&api, 0x2));
    let buf = device(&api, 4);
    ok!(api.cuEventRecord(start, a));
    ok!(api.cuMemsetD32Async(buf, 5, 1, a));
    ok!(api.cuEventRecord(end, a));
    ok!(api.cuEventRecord(untimed, a));
    let mut ms = -1.0f32;
    assert_eq!(cu!(api.cuEventElapsedTime(&mut ms, start, end)), 600, "not reached yet");
    // b waits for `end`, which is destroyed at once: the wait must still hold.
    ok!(api.cuStreamWaitEvent(b, end, 0));
    let host = pinned(&api, 1);
    ok!(api.cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), buf, 4, b));
    ok!(api.cuEventDestroy_v2(end));
    ok!(api.cuStreamSynchronize(b));
    assert_eq!(host[0], 5);
    assert_eq!(cu!(api.cuEventQuery(end)), 400, "destroyed");
    ok!(api.cuEventSynchronize(untimed));
    let end2 = event(&api, 0);
    ok!(api.cuEventRecord(end2, a));
    ok!(api.cuEventSynchronize(end2));
    ok!(api.cuEventElapsedTime(&mut ms, start, end2));
    assert!(ms >= 2.0 * DELAY_US as f32 / 1000.0, "three delayed operations apart, got {ms} ms");
    assert_eq!(cu!(api.cuEventElapsedTime(&mut ms, start, untimed)), 400, "CU_EVENT_DISABLE_TIMING");
    let never = event(&api, 0);
    assert_eq!(cu!(api.cuEventElapsedTime(&mut ms, start, never)), 400, "never recorded");
    ok!(api.cuEventQuery(never));
    ok!(api.cuEventSynchronize(never));
});

isolated_test!(the_legacy_stream_waits_for_blocking_streams_only, [], {
    let api = Api::load();
    setup(&api, 0);
    let (blocking, non_blocking) = (stream(&api, 0), stream(&api, 0x1));
    let (b1, b2) = (device(&api, 4), device(&api, 4));
    ok!(api.cuMemsetD32_v2(b1, 0, 1));
    ok!(api.cuMemsetD32_v2(b2, 0, 1));
    let held_blocking = Gate::close(&api, blocking);
    ok!(api.cuMemsetD32Async(b1, 11, 1, blocking));
    let held_non_blocking = Gate::close(&api, non_blocking);
    ok!(api.cuMemsetD32Async(b2, 22, 1, non_blocking));
    let mut back = [0u32; 2];
    // A synchronous copy (legacy stream) waits for the blocking stream, held for 50 ms …
    held_blocking.open_after(50);
    ok!(api.cuMemcpyDtoH_v2(back[1..].as_mut_ptr().cast(), b2, 4));
    assert_eq!(back[1], 0, "… but not for the non-blocking one, held until opened below");
    ok!(api.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), b1, 4));
    assert_eq!(back[0], 11, "a synchronous copy waits for the blocking stream");
    held_non_blocking.open();
    ok!(api.cuCtxSynchronize());
    ok!(api.cuMemcpyDtoH_v2(back[1..].as_mut_ptr().cast(), b2, 4));
    assert_eq!(back[1], 22, "cuCtxSynchronize waits for every stream");
    // Work on a blocking stream waits for the legacy stream's earlier work.
    let held_legacy = Gate::close(&api, null_mut());
    ok!(api.cuMemsetD32Async(b1, 33, 1, null_mut()));
    let host = pinned(&api, 1);
    ok!(api.cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), b1, 4, blocking));
    held_legacy.open_after(50);
    ok!(api.cuStreamSynchronize(blocking));
    assert_eq!(host[0], 33);
});

isolated_test!(pageable_async_copies_behave_as_the_driver, ["CUDA_STANDIN_DELAY_US" = DELAY_US], {
    let api = Api::load();
    setup(&api, 0);
    let s = stream(&api, 0);
    let buf = device(&api, 4);
    let mut pageable = [1u32];
    ok!(api.cuMemcpyHtoDAsync_v2(buf, pageable.as_ptr().cast(), 4, s));
    std::hint::black_box(&mut pageable)[0] = 2; // reusable at once: the source was read when the call returned
    let mut out = vec![0u32];
    ok!(api.cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), buf, 4, s));
    assert_eq!(out[0], 1, "into pageable memory the copy has completed when the call returns");
    let host = pinned(&api, 1);
    host[0] = 3;
    ok!(api.cuMemcpyHtoDAsync_v2(buf, host.as_ptr().cast(), 4, s));
    host[0] = 4; // pinned: read when the copy runs
    ok!(api.cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), buf, 4, s));
    assert_eq!(cu!(api.cuStreamQuery(s)), 600, "into pinned memory the copy is still pending");
    ok!(api.cuStreamSynchronize(s));
    assert_eq!(host[0], 4);
});

static CALLS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_call(data: *mut c_void) {
    CALLS.fetch_add(data as usize, Ordering::SeqCst);
}

isolated_test!(host_functions_and_stream_ordered_allocation, ["CUDA_STANDIN_DELAY_US" = 2000], {
    let api = Api::load();
    setup(&api, 0);
    let s = stream(&api, 0);
    let mut buf = 0u64;
    ok!(api.cuMemAllocAsync(&mut buf, 64, s));
    ok!(api.cuMemsetD32Async(buf, 9, 16, s));
    ok!(api.cuLaunchHostFunc(s, Some(count_call), 5 as Ptr));
    ok!(api.cuMemFreeAsync(buf, s));
    assert_eq!(CALLS.load(Ordering::SeqCst), 0, "the host function runs in stream order, later");
    ok!(api.cuStreamSynchronize(s));
    assert_eq!(CALLS.load(Ordering::SeqCst), 5);
    assert_eq!(cu!(api.cuMemFree_v2(buf)), 1, "freed by the stream");
    ok!(api.cuStreamDestroy_v2(s));
    assert_eq!(cu!(api.cuStreamSynchronize(s)), 400);
});

isolated_test!(threads_on_several_devices_keep_their_own_order, ["CUDA_STANDIN_DEVICES" = 2, "CUDA_STANDIN_DELAY_US" = 200], {
    let api = std::sync::Arc::new(Api::load());
    ok!(api.cuInit(0));
    let workers: Vec<_> = (0..4u32)
        .map(|t| {
            let api = api.clone();
            std::thread::spawn(move || {
                let mut ctx: Ptr = null_mut();
                ok!(api.cuDevicePrimaryCtxRetain(&mut ctx, (t % 2) as i32));
                ok!(api.cuCtxSetCurrent(ctx));
                let s = stream(&api, 0x1);
                let buf = device(&api, 64 * 4);
                let host = pinned(&api, 64);
                for round in 0..20u32 {
                    let value = t * 1000 + round;
                    ok!(api.cuMemsetD32Async(buf, value, 64, s));
                    ok!(api.cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), buf, 64 * 4, s));
                    ok!(api.cuStreamSynchronize(s));
                    assert!(host.iter().all(|&v| v == value), "thread {t} round {round}");
                }
                ok!(api.cuStreamDestroy_v2(s));
                ok!(api.cuMemFree_v2(buf));
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
});
