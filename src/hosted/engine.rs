//! The host's engine running libkvstore's ops (`crate::engine::Scheduler`): in hosted mode
//! each op of the store is one asynchronous op in the host's engine, on tokens standing for
//! the store's arrays (host arrays of one element, never allocated), so the host orders the
//! store's work with its own ops as MXNet's own store's ops are ordered, and no hosted call
//! crosses between two engines. Set as the host loads, before any op exists; after
//! `MXNotifyShutdown` (the host's engine stopped) libkvstore's own engine runs what is left.

use super::async_op::{push_async, Property};
use super::host::Host;
use super::lent::{handle_of, unplain, LENT_TOKEN};
use crate::engine::{HostStart, Scheduler};
use crate::ffi::NDArrayHandle;
use crate::Result;
use std::cell::Cell;
use std::ffi::CStr;

thread_local! {
    /// The name of the store call this thread is in: the host's profiler shows the ops the
    /// call queues under it (`KVStorePush`, ...), as MXNet's shows its store's ops.
    static CALL_NAME: Cell<&'static CStr> = const { Cell::new(c"KVStoreOp") };
}

/// Runs `call` (a call of the store) with the ops it queues named `name`.
pub(super) fn named<R>(name: &'static CStr, call: impl FnOnce() -> R) -> R {
    let outer = CALL_NAME.with(|n| n.replace(name));
    struct Restore(&'static CStr);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALL_NAME.with(|n| n.set(self.0));
        }
    }
    let _restore = Restore(outer);
    call()
}

pub(super) struct HostEngine(pub &'static Host);

impl Scheduler for HostEngine {
    fn active(&self) -> bool {
        !super::shut_down()
    }

    fn new_token(&self) -> Result<usize> {
        let shape = [1u32];
        let mut out: NDArrayHandle = std::ptr::null_mut();
        // SAFETY: MXNDArrayCreateEx with a live one-dimension shape and out-pointer: a float32
        // cpu(0) array of one element whose memory is never allocated (delay_alloc), as no op
        // reads or writes it.
        let rc = unsafe { (self.0.api.create_ex)(shape.as_ptr(), 1, 1, 0, 1, 0, &mut out) };
        self.0.check(rc, "MXNDArrayCreateEx")?;
        Ok(out as usize)
    }

    fn release_token(&self, token: usize) {
        if super::shut_down() {
            return;
        }
        // SAFETY: a token made by `new_token` (or bound: a lent array's or a staging array's),
        // released once by its variable; the host keeps what its pending ops need of it.
        unsafe { (self.0.api.free)(handle_of(token)) };
    }

    fn push(&self, reads: &[usize], writes: &[usize], priority: i32, start: HostStart) -> Result<()> {
        self.push_as(reads, writes, priority, start, Property::Normal)
    }

    fn push_prompt(&self, reads: &[usize], writes: &[usize], priority: i32, start: HostStart) -> Result<()> {
        self.push_as(reads, writes, priority, start, Property::Prompt)
    }

    fn wait(&self, token: usize, write: bool) -> Result<()> {
        let handle = handle_of(token);
        // SAFETY: a live token (its variable, which the caller holds, owns it).
        let rc = unsafe {
            if write {
                (self.0.api.wait_to_write)(handle)
            } else {
                (self.0.api.wait_to_read)(handle)
            }
        };
        self.0.check(rc, if write { "MXNDArrayWaitToWrite" } else { "MXNDArrayWaitToRead" })
    }
}

impl HostEngine {
    fn push_as(&self, reads: &[usize], writes: &[usize], priority: i32, start: HostStart, property: Property) -> Result<()> {
        // Lent arrays are checked again when the op starts (`lent::unplain`).
        let lent: Vec<usize> = reads.iter().chain(writes).filter(|&&t| t & LENT_TOKEN != 0).map(|&t| handle_of(t) as usize).collect();
        let reads: Vec<NDArrayHandle> = reads.iter().map(|&t| handle_of(t)).collect();
        let writes: Vec<NDArrayHandle> = writes.iter().map(|&t| handle_of(t)).collect();
        let name = CALL_NAME.with(Cell::get);
        let host = self.0;
        push_async(host, &reads, &writes, priority, (name, property), move |done| {
            let handles: Vec<NDArrayHandle> = lent.iter().map(|&h| h as NDArrayHandle).collect();
            let refusal = unplain(host, &handles);
            start(
                Box::new(move |failure: Option<String>| match failure {
                    None => done.finish(),
                    Some(why) => done.fail(&why),
                }),
                refusal,
            )
        })
    }
}
