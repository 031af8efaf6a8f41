//! Streams, events, host functions.

use super::{as_pointer, handle, out, stream_of};
use crate::call::{run, Needs};
use crate::context;
use crate::event::Event;
use crate::result::*;
use crate::stream::{Stream, NON_BLOCKING};
use std::ffi::{c_float, c_int, c_uint, c_void};

fn create_stream(pstream: *mut *mut c_void, flags: c_uint, call: &mut crate::call::Call) -> Result<(), CUresult> {
    call.fields.add("flags", flags);
    if flags & !NON_BLOCKING != 0 || pstream.is_null() {
        return Err(INVALID_VALUE);
    }
    let ctx = context::current()?;
    let stream = Stream::start(&ctx, false, flags);
    call.fields.stream = Some(stream.handle);
    out(pstream, as_pointer(stream.handle))
}

#[no_mangle]
pub extern "C" fn cuStreamCreate(pstream: *mut *mut c_void, flags: c_uint) -> c_int {
    run("cuStreamCreate", Needs::Init, |call| create_stream(pstream, flags, call))
}

#[no_mangle]
pub extern "C" fn cuStreamCreateWithPriority(pstream: *mut *mut c_void, flags: c_uint, priority: c_int) -> c_int {
    run("cuStreamCreateWithPriority", Needs::Init, |call| {
        call.fields.add("priority", priority); // priorities do not change the order of one stream
        create_stream(pstream, flags, call)
    })
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(stream: *mut c_void) -> c_int {
    run("cuStreamDestroy_v2", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        Stream::destroy(handle(stream)).map(|_| ()).ok_or(INVALID_HANDLE)
    })
}

/// A synchronising call (see the trace).
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(stream: *mut c_void) -> c_int {
    run("cuStreamSynchronize", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        let (queue, _) = stream_of(stream)?;
        queue.synchronize()
    })
}

#[no_mangle]
pub extern "C" fn cuStreamQuery(stream: *mut c_void) -> c_int {
    run("cuStreamQuery", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        let (queue, _) = stream_of(stream)?;
        queue.query()
    })
}

/// Later work of `stream` waits for the event's recorded point (in any stream, any device).
#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(stream: *mut c_void, event: *mut c_void, flags: c_uint) -> c_int {
    run("cuStreamWaitEvent", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        call.fields.add("event", format_args!("{:#x}", handle(event)));
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        let (queue, ctx) = stream_of(stream)?;
        let waits = Event::lookup(handle(event))?.point().into_iter().collect();
        queue.enqueue(&ctx, waits, false, Box::new(|| Ok(())));
        Ok(())
    })
}

/// A C callback and its argument, moved to the stream's thread.
struct HostCall<F>(F, usize);
// SAFETY: the driver API hands `user_data` to the callback on another thread by contract.
unsafe impl<F> Send for HostCall<F> {}

#[no_mangle]
pub extern "C" fn cuLaunchHostFunc(stream: *mut c_void, func: Option<unsafe extern "C" fn(*mut c_void)>, user_data: *mut c_void) -> c_int {
    run("cuLaunchHostFunc", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        let (queue, ctx) = stream_of(stream)?;
        let host = HostCall(func.ok_or(INVALID_VALUE)?, user_data as usize);
        queue.enqueue(
            &ctx,
            Vec::new(),
            call.deferred_fault,
            Box::new(move || {
                let HostCall(f, data) = host;
                // SAFETY: the caller's function and argument, called once as cuLaunchHostFunc promises.
                unsafe { f(data as *mut c_void) };
                Ok(())
            }),
        );
        Ok(())
    })
}

type StreamCallback = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void);

#[no_mangle]
pub extern "C" fn cuStreamAddCallback(stream: *mut c_void, callback: Option<StreamCallback>, user_data: *mut c_void, flags: c_uint) -> c_int {
    run("cuStreamAddCallback", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let (queue, ctx) = stream_of(stream)?;
        let host = HostCall(callback.ok_or(INVALID_VALUE)?, user_data as usize);
        let (stream_handle, sticky) = (stream as usize, ctx.sticky.clone());
        queue.enqueue(
            &ctx,
            Vec::new(),
            false,
            Box::new(move || {
                let HostCall(f, data) = host;
                let status = sticky.load(std::sync::atomic::Ordering::Acquire);
                // SAFETY: the caller's callback and argument, called once with the stream's status.
                unsafe { f(stream_handle as *mut c_void, status, data as *mut c_void) };
                Ok(())
            }),
        );
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventCreate(pevent: *mut *mut c_void, flags: c_uint) -> c_int {
    run("cuEventCreate", Needs::Init, |call| {
        call.fields.add("flags", flags);
        if flags & !0x7 != 0 || pevent.is_null() {
            return Err(INVALID_VALUE);
        }
        context::current()?;
        out(pevent, as_pointer(Event::create(flags).handle))
    })
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: *mut c_void) -> c_int {
    run("cuEventDestroy_v2", Needs::Init, |_| Event::destroy(handle(event)))
}

#[no_mangle]
pub extern "C" fn cuEventRecord(event: *mut c_void, stream: *mut c_void) -> c_int {
    run("cuEventRecord", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        call.fields.add("event", format_args!("{:#x}", handle(event)));
        let recorded = Event::lookup(handle(event))?;
        let (queue, ctx) = stream_of(stream)?;
        recorded.record(&queue, &ctx);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventQuery(event: *mut c_void) -> c_int {
    run("cuEventQuery", Needs::Init, |call| {
        call.fields.add("event", format_args!("{:#x}", handle(event)));
        Event::lookup(handle(event))?.query()
    })
}

/// A synchronising call (see the trace).
#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: *mut c_void) -> c_int {
    run("cuEventSynchronize", Needs::Init, |call| {
        call.fields.add("event", format_args!("{:#x}", handle(event)));
        Event::lookup(handle(event))?.synchronize()
    })
}

#[no_mangle]
pub extern "C" fn cuEventElapsedTime(ms: *mut c_float, start: *mut c_void, end: *mut c_void) -> c_int {
    run("cuEventElapsedTime", Needs::Init, |_| {
        let (a, b) = (Event::lookup(handle(start))?, Event::lookup(handle(end))?);
        out(ms, Event::elapsed_ms(&a, &b)?)
    })
}
