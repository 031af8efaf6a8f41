//! Contexts: the per-thread stack of current contexts, primary contexts, peer access, the
//! sticky error, and the legacy default stream's implicit synchronisation.

use crate::devices;
use crate::handles::{next_handle, Table};
use crate::memory;
use crate::result::*;
use crate::stream::{Progress, Stream, Wait};
use once_cell::sync::{Lazy, OnceCell};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Weak};

pub struct Context {
    pub handle: u64,
    pub device: i32,
    pub primary: bool,
    /// The first fault (700) of any work of this context; every later call answers it.
    pub sticky: Arc<AtomicI32>,
    destroyed: AtomicBool,
    peers: Mutex<HashSet<i32>>,
    legacy: OnceCell<Arc<Stream>>,
    /// Every stream ever made in this context, for cuCtxSynchronize and the legacy barriers.
    streams: Mutex<Vec<StreamEntry>>,
}

struct StreamEntry {
    stream: Weak<Stream>,
    progress: Arc<Progress>,
    blocking: bool,
    legacy: bool,
}

static CONTEXTS: Table<Context> = Table::new();

thread_local! {
    static STACK: RefCell<Vec<Arc<Context>>> = const { RefCell::new(Vec::new()) };
}

/// A device's primary context (made on first retain, kept for the process so its handle
/// stays the same) and its retain count.
#[derive(Default)]
struct PrimarySlot {
    context: Option<Arc<Context>>,
    retains: u32,
}

static PRIMARY: Lazy<Vec<Mutex<PrimarySlot>>> = Lazy::new(|| (0..devices::count()).map(|_| Mutex::default()).collect());

impl Context {
    fn make(device: i32, primary: bool) -> Arc<Context> {
        let context = Arc::new(Context {
            handle: next_handle(),
            device,
            primary,
            sticky: Arc::new(AtomicI32::new(0)),
            destroyed: AtomicBool::new(false),
            peers: Mutex::new(HashSet::new()),
            legacy: OnceCell::new(),
            streams: Mutex::new(Vec::new()),
        });
        CONTEXTS.insert(context.handle, context.clone());
        context
    }

    /// A new (non-primary) context on `device` (cuCtxCreate).
    pub fn create(device: i32) -> Result<Arc<Context>, CUresult> {
        devices::get(device)?;
        Ok(Context::make(device, false))
    }

    pub fn lookup(handle: u64) -> Result<Arc<Context>, CUresult> {
        let context = CONTEXTS.get(handle).ok_or(INVALID_CONTEXT)?;
        if context.destroyed.load(Ordering::Acquire) {
            return Err(CONTEXT_IS_DESTROYED);
        }
        Ok(context)
    }

    /// The context's sticky error, if it has one.
    pub fn check(&self) -> Result<(), CUresult> {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(CONTEXT_IS_DESTROYED);
        }
        match self.sticky.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(code),
        }
    }

    /// Makes `code` the context's sticky error (the first one stays) and answers it.
    pub fn fail(&self, code: CUresult) -> CUresult {
        let _ = self.sticky.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
        code
    }

    /// The legacy default stream (stream handle 0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
    pub fn legacy(self: &Arc<Self>) -> Arc<Stream> {
        self.legacy.get_or_init(|| Stream::start(self, true, 0)).clone()
    }

    pub fn add_stream(&self, stream: &Arc<Stream>) {
        let mut streams = self.streams.lock();
        streams.retain(|e| e.stream.strong_count() > 0 || !e.progress.tail().is_done());
        streams.push(StreamEntry { stream: Arc::downgrade(stream), progress: stream.progress().clone(), blocking: stream.blocking, legacy: stream.legacy });
    }

    /// The implicit waits of work enqueued on `stream`: work on the legacy stream waits for
    /// all blocking streams, work on a blocking stream waits for the legacy stream.
    pub fn barriers_for(&self, stream: &Stream) -> Vec<Wait> {
        if !stream.blocking {
            return Vec::new();
        }
        let streams = self.streams.lock();
        streams
            .iter()
            .filter(|e| e.blocking && e.legacy != stream.legacy && !Arc::ptr_eq(&e.progress, stream.progress()))
            .map(|e| e.progress.tail())
            .filter(|w| w.seq > 0)
            .collect()
    }

    /// Waits for all work of every stream of the context (cuCtxSynchronize).
    pub fn synchronize(&self) -> Result<(), CUresult> {
        let tails: Vec<Wait> = self.streams.lock().iter().map(|e| e.progress.tail()).collect();
        for tail in tails {
            tail.block();
        }
        self.check()
    }

    pub fn may_access(&self, device: i32) -> bool {
        device == self.device || self.peers.lock().contains(&device)
    }

    pub fn enable_peer(&self, peer: i32) -> Result<(), CUresult> {
        if peer == self.device {
            return Err(INVALID_DEVICE);
        }
        if !self.peers.lock().insert(peer) {
            return Err(PEER_ACCESS_ALREADY_ENABLED);
        }
        Ok(())
    }

    pub fn disable_peer(&self, peer: i32) -> Result<(), CUresult> {
        if self.peers.lock().remove(&peer) {
            Ok(())
        } else {
            Err(PEER_ACCESS_NOT_ENABLED)
        }
    }

    /// Waits for the context's work, frees its memory and clears its state, as destroying a
    /// context (or the last release of a primary one) does.
    fn reset(&self) {
        let _ = self.synchronize();
        memory::free_context(self.handle);
        self.peers.lock().clear();
        self.sticky.store(0, Ordering::Release);
    }

    /// cuCtxDestroy: the handle answers CUDA_ERROR_CONTEXT_IS_DESTROYED from now on.
    pub fn destroy(self: &Arc<Self>) -> Result<(), CUresult> {
        if self.primary {
            return Err(INVALID_CONTEXT);
        }
        self.reset();
        self.destroyed.store(true, Ordering::Release);
        STACK.with(|s| s.borrow_mut().retain(|c| !Arc::ptr_eq(c, self)));
        Ok(())
    }
}

/// The calling thread's current context, or CUDA_ERROR_INVALID_CONTEXT; a destroyed or
/// faulted one answers its error.
pub fn current() -> Result<Arc<Context>, CUresult> {
    let context = current_if_any().ok_or(INVALID_CONTEXT)?;
    context.check()?;
    Ok(context)
}

pub fn current_if_any() -> Option<Arc<Context>> {
    STACK.with(|s| s.borrow().last().cloned())
}

pub fn push(context: Arc<Context>) {
    STACK.with(|s| s.borrow_mut().push(context));
}

pub fn pop() -> Option<Arc<Context>> {
    STACK.with(|s| s.borrow_mut().pop())
}

/// cuCtxSetCurrent: replaces the top of the stack (a null context pops it).
pub fn set_current(context: Option<Arc<Context>>) {
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        stack.pop();
        stack.extend(context);
    });
}

/// Waits for the work of every context (what freeing pinned host memory implies).
pub fn synchronize_all() {
    for context in CONTEXTS.filter(|_| true) {
        let _ = context.synchronize();
    }
}

pub fn primary_retain(device: i32) -> Result<Arc<Context>, CUresult> {
    devices::get(device)?;
    let mut slot = PRIMARY[device as usize].lock();
    let context = slot.context.get_or_insert_with(|| Context::make(device, true)).clone();
    slot.retains += 1;
    Ok(context)
}

pub fn primary_release(device: i32) -> Result<(), CUresult> {
    devices::get(device)?;
    let mut slot = PRIMARY[device as usize].lock();
    if slot.retains == 0 {
        return Err(INVALID_CONTEXT);
    }
    slot.retains -= 1;
    if slot.retains == 0 {
        if let Some(context) = &slot.context {
            context.reset();
        }
    }
    Ok(())
}

pub fn primary_reset(device: i32) -> Result<(), CUresult> {
    devices::get(device)?;
    let mut slot = PRIMARY[device as usize].lock();
    if let Some(context) = &slot.context {
        context.reset();
    }
    slot.retains = 0;
    Ok(())
}

/// `(retained, flags)` as cuDevicePrimaryCtxGetState answers (active = retained at least once).
pub fn primary_state(device: i32) -> Result<bool, CUresult> {
    devices::get(device)?;
    Ok(PRIMARY[device as usize].lock().retains > 0)
}
