//! Copies and memsets, synchronous (on the legacy default stream, waited for) and
//! asynchronous. As with the real driver, an asynchronous copy from pageable host memory
//! reads its source before returning, and one into pageable host memory has completed when
//! it returns; only pinned or registered host memory is copied truly asynchronously.

use super::{handle, stream_of};
use crate::call::{run, Call, Needs};
use crate::context::{self, Context};
use crate::copy::{self, Source};
use crate::host_memory;
use crate::memory::{self, Span};
use crate::result::*;
use crate::stream::{Stream, Work};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

/// A device range for work of `context`; a bad one is CUDA_ERROR_ILLEGAL_ADDRESS, sticky.
fn device(context: &Context, address: u64, len: usize) -> Result<Span, CUresult> {
    memory::span(context, address, len).map_err(|code| context.fail(code))
}

/// Runs `work` on the context's legacy default stream and waits for it.
fn synchronous(context: &Arc<Context>, call: &Call, work: Work) -> Result<(), CUresult> {
    context.legacy().enqueue(context, Vec::new(), call.deferred_fault, work).block();
    context.check()
}

fn pinned(pointer: *const c_void, len: usize) -> bool {
    host_memory::contains(pointer as usize, len.max(1))
}

/// The source of a host-to-device copy: pinned memory is read when the copy runs, pageable
/// memory now.
fn host_source(src: *const c_void, len: usize, call: &mut Call) -> Source {
    if pinned(src, len) {
        call.fields.add("host", "pinned");
        Source::Memory(Span::host(src.cast()))
    } else {
        call.fields.add("host", "pageable");
        // SAFETY: the caller's contract: `src` is valid for `len` bytes.
        Source::Staged(unsafe { std::slice::from_raw_parts(src.cast::<u8>(), len) }.to_vec())
    }
}

fn start(call: &mut Call, len: usize, stream: Option<*mut c_void>) {
    call.fields.bytes = Some(len as u64);
    call.fields.stream = stream.map(handle);
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, len: usize) -> c_int {
    run("cuMemcpyHtoD_v2", Needs::Init, |call| {
        start(call, len, None);
        let ctx = context::current()?;
        let to = device(&ctx, dst, len)?;
        synchronous(&ctx, call, copy::copy(to, Source::Memory(Span::host(src.cast())), len))
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, len: usize) -> c_int {
    run("cuMemcpyDtoH_v2", Needs::Init, |call| {
        start(call, len, None);
        let ctx = context::current()?;
        let from = device(&ctx, src, len)?;
        synchronous(&ctx, call, copy::copy(Span::host(dst.cast()), Source::Memory(from), len))
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, len: usize) -> c_int {
    run("cuMemcpyDtoD_v2", Needs::Init, |call| {
        start(call, len, None);
        let ctx = context::current()?;
        let (to, from) = (device(&ctx, dst, len)?, device(&ctx, src, len)?);
        synchronous(&ctx, call, copy::copy(to, Source::Memory(from), len))
    })
}

fn enqueue(stream: &Stream, ctx: &Context, call: &Call, work: Work) -> crate::stream::Wait {
    stream.enqueue(ctx, Vec::new(), call.deferred_fault, work)
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, len: usize, stream: *mut c_void) -> c_int {
    run("cuMemcpyHtoDAsync_v2", Needs::Init, |call| {
        start(call, len, Some(stream));
        let (queue, ctx) = stream_of(stream)?;
        let to = device(&ctx, dst, len)?;
        let from = host_source(src, len, call);
        enqueue(&queue, &ctx, call, copy::copy(to, from, len));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, len: usize, stream: *mut c_void) -> c_int {
    run("cuMemcpyDtoHAsync_v2", Needs::Init, |call| {
        start(call, len, Some(stream));
        let (queue, ctx) = stream_of(stream)?;
        let from = device(&ctx, src, len)?;
        let is_pinned = pinned(dst, len);
        call.fields.add("host", if is_pinned { "pinned" } else { "pageable" });
        let done = enqueue(&queue, &ctx, call, copy::copy(Span::host(dst.cast()), Source::Memory(from), len));
        if !is_pinned {
            done.block();
            return queue.error();
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, stream: *mut c_void) -> c_int {
    run("cuMemcpyDtoDAsync_v2", Needs::Init, |call| {
        start(call, len, Some(stream));
        let (queue, ctx) = stream_of(stream)?;
        let (to, from) = (device(&ctx, dst, len)?, device(&ctx, src, len)?);
        enqueue(&queue, &ctx, call, copy::copy(to, Source::Memory(from), len));
        Ok(())
    })
}

/// The two sides of a peer copy, each checked against its own context.
fn peer_spans(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, len: usize, call: &mut Call) -> Result<(Span, Span), CUresult> {
    let (to_ctx, from_ctx) = (Context::lookup(handle(dst_ctx))?, Context::lookup(handle(src_ctx))?);
    to_ctx.check()?;
    from_ctx.check()?;
    call.fields.device = Some(to_ctx.device);
    call.fields.add("src_dev", from_ctx.device);
    Ok((device(&to_ctx, dst, len)?, device(&from_ctx, src, len)?))
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeer(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, len: usize) -> c_int {
    run("cuMemcpyPeer", Needs::Init, |call| {
        start(call, len, None);
        let (to, from) = peer_spans(dst, dst_ctx, src, src_ctx, len, call)?;
        let ctx = Context::lookup(handle(dst_ctx))?;
        synchronous(&ctx, call, copy::copy(to, Source::Memory(from), len))
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeerAsync(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, len: usize, stream: *mut c_void) -> c_int {
    run("cuMemcpyPeerAsync", Needs::Init, |call| {
        start(call, len, Some(stream));
        let (queue, ctx) = stream_of(stream)?;
        let (to, from) = peer_spans(dst, dst_ctx, src, src_ctx, len, call)?;
        enqueue(&queue, &ctx, call, copy::copy(to, Source::Memory(from), len));
        Ok(())
    })
}

/// A memset's checked destination: `count` elements of `width` bytes, aligned to `width`.
fn fill_target(ctx: &Context, dst: u64, width: usize, count: usize) -> Result<Span, CUresult> {
    if !dst.is_multiple_of(width as u64) {
        return Err(INVALID_VALUE);
    }
    device(ctx, dst, count.checked_mul(width).ok_or(INVALID_VALUE)?)
}

fn memset(call: &mut Call, dst: u64, value: u32, width: usize, count: usize, stream: Option<*mut c_void>) -> Result<(), CUresult> {
    start(call, count * width, stream);
    match stream {
        None => {
            let ctx = context::current()?;
            let target = fill_target(&ctx, dst, width, count)?;
            synchronous(&ctx, call, copy::fill(target, value, width, count))
        }
        Some(stream) => {
            let (queue, ctx) = stream_of(stream)?;
            let target = fill_target(&ctx, dst, width, count)?;
            enqueue(&queue, &ctx, call, copy::fill(target, value, width, count));
            Ok(())
        }
    }
}

#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dst: u64, value: u8, count: usize) -> c_int {
    run("cuMemsetD8_v2", Needs::Init, |call| memset(call, dst, value as u32, 1, count, None))
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: *mut c_void) -> c_int {
    run("cuMemsetD8Async", Needs::Init, |call| memset(call, dst, value as u32, 1, count, Some(stream)))
}

#[no_mangle]
pub extern "C" fn cuMemsetD32_v2(dst: u64, value: c_uint, count: usize) -> c_int {
    run("cuMemsetD32_v2", Needs::Init, |call| memset(call, dst, value, 4, count, None))
}

#[no_mangle]
pub extern "C" fn cuMemsetD32Async(dst: u64, value: c_uint, count: usize, stream: *mut c_void) -> c_int {
    run("cuMemsetD32Async", Needs::Init, |call| memset(call, dst, value, 4, count, Some(stream)))
}
