//! The MPI transport plugin (`libkvstore_mpi.so`), loaded at the first distributed store so
//! that programs without one never load or initialise MPI. This module is the FFI boundary to
//! the plugin: the only `unsafe` of the distributed store. MPI is initialised once per
//! process, so its node and message handler are process globals (`NODE`, `HANDLER`).

use super::{panic_text, Body, Handler, Node, Placement, Transport};
use crate::store::dist::role::Role;
use crate::error::Result;
use crate::ndarray::{Memory, NDArray, StorageType};
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// The plugin ABI version this library speaks.
const ABI_VERSION: c_int = 6;
/// The tag of every store message.
pub const DATA_TAG: c_int = 1;
/// Added by the plugin to the tag of a message whose body was received in place.
const PLACED_TAG_OFFSET: c_int = 16384;

type ReceiveFn = extern "C" fn(*mut c_void, c_int, c_int, *const u8, usize);
type ReleaseFn = extern "C" fn(*mut c_void);
type PlaceFn = extern "C" fn(*mut c_void, c_int, c_int, *const u8, usize, usize) -> *mut u8;

/// The plugin's functions.
struct Plugin {
    // Kept loaded for the life of the process: its progress and dispatch threads run its code.
    _lib: libloading::Library,
    init: unsafe extern "C" fn(c_int, *mut c_int, *mut c_int) -> c_int,
    allgather_int: unsafe extern "C" fn(c_int, *mut c_int, usize) -> c_int,
    post: unsafe extern "C" fn(c_int, c_int, *const u8, usize, c_int, ReleaseFn, *mut c_void) -> c_int,
    post_parts: unsafe extern "C" fn(c_int, c_int, *const u8, usize, *const u8, usize, c_int, ReleaseFn, *mut c_void) -> c_int,
    start_receiver: unsafe extern "C" fn(ReceiveFn, Option<PlaceFn>, *mut c_void) -> c_int,
    set_bulk_lead: unsafe extern "C" fn(u64),
    barrier: unsafe extern "C" fn(c_int) -> c_int,
    processor_names: unsafe extern "C" fn(*mut u8, usize, usize) -> c_int,
    start_heartbeat: unsafe extern "C" fn(u64) -> c_int,
    silence_ms: unsafe extern "C" fn(c_int) -> i64,
    abort: unsafe extern "C" fn(c_int),
    abort_isolated: unsafe extern "C" fn(c_int),
    finalize: unsafe extern "C" fn() -> c_int,
}

/// Where the plugin is: `KVSTORE_MPI_PLUGIN`, else beside the library holding this code
/// (or one directory up, for test binaries in `target/*/deps`).
fn plugin_candidates() -> Vec<std::path::PathBuf> {
    if let Ok(p) = std::env::var("KVSTORE_MPI_PLUGIN") {
        return vec![p.into()];
    }
    let mut out = Vec::new();
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let here = plugin_candidates as *const c_void;
    // SAFETY: dladdr only reads the loader's tables and writes `info`; `dli_fname`, when set,
    // is a NUL-terminated path owned by the loader, read at once.
    let found = unsafe { libc::dladdr(here, &mut info) } != 0 && !info.dli_fname.is_null();
    if found {
        // SAFETY: checked non-null above; the loader keeps the string alive.
        let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
        if let Some(dir) = std::path::Path::new(&path).parent() {
            out.push(dir.join("libkvstore_mpi.so"));
            if let Some(up) = dir.parent() {
                out.push(up.join("libkvstore_mpi.so"));
            }
        }
    }
    out.push("libkvstore_mpi.so".into());
    out
}

fn load_plugin() -> Result<Plugin> {
    // Open MPI loads its components with dlopen and they expect libmpi's symbols global; a
    // host program (Python) may have loaded us RTLD_LOCAL, so make libmpi global first.
    for name in ["libmpi.so.40", "libmpi.so"] {
        // SAFETY: loading Open MPI's library runs only its constructors, which are safe.
        if let Ok(lib) = unsafe { libloading::os::unix::Library::open(Some(name), libc::RTLD_NOW | libc::RTLD_GLOBAL) } {
            std::mem::forget(lib);
            break;
        }
    }
    let mut errors = Vec::new();
    for path in plugin_candidates() {
        // SAFETY: the plugin is libkvstore's own library; its initialisers only set statics.
        match unsafe { libloading::Library::new(&path) } {
            Ok(lib) => return bind(lib),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    crate::bail!(
        "distributed stores need the MPI transport plugin libkvstore_mpi.so (a workspace member that `cargo build --release` skips: build it beside libkvstore.so with `cargo build --release --workspace`, or set KVSTORE_MPI_PLUGIN to its path) and Open MPI: {}",
        errors.join("; ")
    )
}

fn bind(lib: libloading::Library) -> Result<Plugin> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol is declared with this exact signature in mpi-transport/src/lib.rs,
            // whose ABI version is checked below before any other function is called.
            *unsafe { lib.get($name) }.map_err(|e| crate::Error::new(format!("MPI plugin: {e}")))?
        };
    }
    let version: unsafe extern "C" fn() -> c_int = sym!(b"kvmpi_abi_version\0");
    // SAFETY: a plain function without arguments.
    let v = unsafe { version() };
    crate::ensure!(v == ABI_VERSION, "MPI plugin has ABI version {v}, libkvstore needs {ABI_VERSION}");
    Ok(Plugin {
        init: sym!(b"kvmpi_init\0"),
        allgather_int: sym!(b"kvmpi_allgather_int\0"),
        post: sym!(b"kvmpi_post\0"),
        post_parts: sym!(b"kvmpi_post_parts\0"),
        start_receiver: sym!(b"kvmpi_start_receiver\0"),
        set_bulk_lead: sym!(b"kvmpi_set_bulk_lead\0"),
        barrier: sym!(b"kvmpi_barrier\0"),
        processor_names: sym!(b"kvmpi_processor_names\0"),
        start_heartbeat: sym!(b"kvmpi_start_heartbeat\0"),
        silence_ms: sym!(b"kvmpi_silence_ms\0"),
        abort: sym!(b"kvmpi_abort\0"),
        abort_isolated: sym!(b"kvmpi_abort_isolated\0"),
        finalize: sym!(b"kvmpi_finalize\0"),
        _lib: lib,
    })
}

static HANDLER: Lazy<RwLock<Option<Handler>>> = Lazy::new(|| RwLock::new(None));
static PLACEMENT: Lazy<RwLock<Option<Arc<dyn Placement>>>> = Lazy::new(|| RwLock::new(None));

/// `len` bytes at `data` from the plugin, valid for the call at hand.
fn plugin_bytes<'a>(data: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || data.is_null() {
        &[]
    } else {
        // SAFETY: the plugin passes `len` bytes at `data`, valid for the callback's call.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

/// Runs a callback's work; a panic must not unwind into the plugin's thread, and its sender
/// must not wait forever for a reply that will never come: the job fails fast, as for a dead
/// rank.
fn or_abort<R>(source: c_int, work: impl FnOnce() -> R) -> Option<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(r) => Some(r),
        Err(payload) => {
            let what = panic_text(payload.as_ref());
            eprintln!("libkvstore: internal error handling a message from rank {source}: {what}; aborting the MPI job");
            abort_if_running(1);
            None
        }
    }
}

extern "C" fn on_message(_ctx: *mut c_void, source: c_int, tag: c_int, data: *const u8, len: usize) {
    let bytes = plugin_bytes(data, len);
    let from = source.max(0) as usize;
    if tag >= PLACED_TAG_OFFSET {
        let placement = PLACEMENT.read().clone();
        if let Some(p) = placement {
            or_abort(source, || p.placed(from, bytes));
        }
        return;
    }
    let handler = HANDLER.read().clone();
    if let Some(h) = handler {
        or_abort(source, || h(from, bytes));
    }
}

/// Where the body after `head` goes (see [`Placement`]); NULL: the plugin's buffer.
extern "C" fn on_place(_ctx: *mut c_void, source: c_int, _tag: c_int, head: *const u8, head_len: usize, body_len: usize) -> *mut u8 {
    let head = plugin_bytes(head, head_len);
    let placement = PLACEMENT.read().clone();
    placement
        .and_then(|p| or_abort(source, || p.place(source.max(0) as usize, head, body_len)).flatten())
        .map_or(std::ptr::null_mut(), |at| at.0)
}

/// A dense host array held for writing by message bodies received into it (see
/// [`Placement`]): write-locked from [`Landing::hold`] until dropped, so nothing else reads or
/// writes its bytes meanwhile.
pub struct Landing {
    array: NDArray,
    base: *mut u8,
    len: usize,
}

// SAFETY: a landing is a held write lock and the address of the bytes it guards; the lock is
// not tied to a thread (parking_lot's), and the bytes are only written through the addresses
// handed out, by the plugin, while the lock is held.
unsafe impl Send for Landing {}
// SAFETY: as above; `at` only computes addresses.
unsafe impl Sync for Landing {}

/// Where a body is received: an address inside a [`Landing`], or a buffer of the placement's
/// own ([`PlacedAt::in_buffer`]).
pub struct PlacedAt(*mut u8);

impl PlacedAt {
    /// The start of `buffer`, for a body of at most its length: the placement that names it
    /// keeps the buffer's bytes where they are, and reads or writes none of them, until the
    /// message's [`Placement::placed`] (a `Vec` it holds, moved but never resized meanwhile).
    pub fn in_buffer(buffer: &mut [u8]) -> PlacedAt {
        PlacedAt(buffer.as_mut_ptr())
    }
}

impl Landing {
    /// Holds dense host `array` for writing, if nothing holds its memory now (never waits:
    /// the plugin's progress thread asks, and a sender's read lock is released there).
    pub fn hold(array: &NDArray) -> Option<Landing> {
        if array.stype() != StorageType::Default {
            return None;
        }
        let (lock, range) = array.lock_and_range();
        let mut payload = lock.try_write()?;
        if matches!(payload.data, Memory::Device(_)) {
            return None;
        }
        let bytes = payload.data.bytes_mut().get_mut(range)?;
        let (base, len) = (bytes.as_mut_ptr(), bytes.len());
        // Unlocked when the landing is dropped.
        std::mem::forget(payload);
        Some(Landing { array: array.clone(), base, len })
    }

    /// Where `len` bytes at byte `offset` of the array are received, if they lie within it.
    pub fn at(&self, offset: usize, len: usize) -> Option<PlacedAt> {
        (offset.checked_add(len)? <= self.len).then(|| PlacedAt(self.base.wrapping_add(offset)))
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        let (lock, _) = self.array.lock_and_range();
        // SAFETY: `hold` write-locked this lock and forgot its guard; this is that lock's one
        // release, after the last body received into it was delivered.
        unsafe { lock.force_unlock_write() };
    }
}

/// This process's connection to the MPI job.
struct MpiTransport {
    plugin: Plugin,
    /// World rank.
    rank: usize,
    /// The role of every world rank.
    roles: Vec<Role>,
    /// The host (MPI processor name) of every world rank.
    hosts: Vec<String>,
    /// Heartbeats run (some process of the job has a dist timeout).
    beating: bool,
}

/// Frees a message [`MpiTransport::send_owned`] posted, once the plugin has sent it.
extern "C" fn release_owned(ctx: *mut c_void) {
    // SAFETY: `ctx` is the `Box<Vec<u8>>` leaked by `send_owned`, released exactly once.
    drop(unsafe { Box::from_raw(ctx as *mut Vec<u8>) });
}

/// A worker's pushes to different servers stay within this many bytes of each other, in the
/// order it queued them: a sync round waits for every worker's part, so a worker far ahead on
/// one server and behind on another leaves the second server's answers late and the first's
/// link busy with parts that are early (the plugin's `kvmpi_set_bulk_lead`).
const WORKER_BULK_LEAD: u64 = 4 << 20;

/// Smaller bodies are copied into their message: one MPI message costs less than two
/// (the head and the body) up to about this size.
const IN_PLACE_MIN: usize = 64 << 10;

/// A two-part message [`MpiTransport::send_parts`] posted: its head, and the array its body
/// lies in, read-locked until the plugin has sent it.
struct InPlace {
    head: Vec<u8>,
    body: Body,
}

extern "C" fn release_in_place(ctx: *mut c_void) {
    // SAFETY: `ctx` is the `Box<InPlace>` leaked by `send_parts`, released exactly once.
    let sent = unsafe { Box::from_raw(ctx as *mut InPlace) };
    let (lock, _) = sent.body.lock_and_range();
    // SAFETY: `send_parts` read-locked this lock and forgot its guard for this message; this
    // is that lock's one release, after the plugin's last read of the bytes.
    unsafe { lock.force_unlock_read() };
}

/// Wakes a [`MpiTransport::send`] waiting for its message to be sent.
struct Sent {
    done: Mutex<bool>,
    wake: parking_lot::Condvar,
}

extern "C" fn release_sent(ctx: *mut c_void) {
    // SAFETY: `ctx` is the `Arc<Sent>` reference leaked by `send` for this call, released
    // exactly once.
    let sent = unsafe { Arc::from_raw(ctx as *const Sent) };
    *sent.done.lock() = true;
    sent.wake.notify_all();
}

impl MpiTransport {
    /// Posts `len` bytes at `data` to the plugin's progress thread; a refusal aborts the job.
    fn post(&self, dest: usize, data: *const u8, len: usize, express: bool, release: ReleaseFn, ctx: *mut c_void) -> bool {
        // SAFETY: the callers keep `len` bytes at `data` valid until `release(ctx)`.
        let rc = unsafe { (self.plugin.post)(dest as c_int, DATA_TAG, data, len, express as c_int, release, ctx) };
        if rc != 0 {
            eprintln!("libkvstore: MPI send of {len} bytes to rank {dest} failed (code {rc}); aborting the job");
        }
        rc == 0
    }
}

enum State {
    NotStarted,
    Running(Arc<Node>),
    Finalized,
}

static NODE: Lazy<Mutex<State>> = Lazy::new(|| Mutex::new(State::NotStarted));

/// Starts MPI for this process (first call) and returns the node. `role` must be the same on
/// every call.
pub fn start(role: Role) -> Result<Arc<Node>> {
    let mut state = NODE.lock();
    match &*state {
        State::Running(n) => return Ok(Arc::clone(n)),
        State::Finalized => crate::bail!("MPI has been finalized in this process: a distributed store can be created once per process"),
        State::NotStarted => {}
    }
    // Read before MPI starts: a bad value fails this process alone, before any collective.
    let timeout = crate::store::dist::liveness::timeout()?;
    let plugin = load_plugin()?;
    let (mut rank, mut size) = (0, 0);
    // SAFETY: valid out-pointers.
    let rc = unsafe { (plugin.init)(role.code(), &mut rank, &mut size) };
    crate::ensure!(rc == 0, "MPI could not be initialised with MPI_THREAD_MULTIPLE (code {rc}): start the program with mpirun");
    let mut codes = vec![0 as c_int; size.max(0) as usize];
    // SAFETY: `codes` holds world-size ints.
    let rc = unsafe { (plugin.allgather_int)(role.code(), codes.as_mut_ptr(), codes.len()) };
    crate::ensure!(rc == 0, "MPI all-gather of the roles failed (code {rc})");
    let roles = codes.iter().map(|&c| Role::from_code(c).unwrap_or(Role::Worker)).collect();
    const NAME: usize = 256;
    let mut names = vec![0u8; NAME * codes.len()];
    // SAFETY: `names` holds world-size entries of NAME bytes.
    let rc = unsafe { (plugin.processor_names)(names.as_mut_ptr(), NAME, codes.len()) };
    crate::ensure!(rc == 0, "MPI all-gather of the host names failed (code {rc})");
    let hosts = names
        .chunks(NAME)
        .map(|c| String::from_utf8_lossy(&c[..c.iter().position(|&b| b == 0).unwrap_or(c.len())]).into_owned())
        .collect();
    // Every process beats as often as the shortest timeout of the job needs, so that a
    // process with a longer (or no) timeout never looks silent to one with a short one.
    let mine = timeout.map_or(0, |t| t.as_millis().min(i32::MAX as u128) as c_int);
    // SAFETY: `codes` holds world-size ints.
    let rc = unsafe { (plugin.allgather_int)(mine, codes.as_mut_ptr(), codes.len()) };
    crate::ensure!(rc == 0, "MPI all-gather of the dist timeouts failed (code {rc})");
    let shortest = codes.iter().filter(|&&ms| ms > 0).min().copied();
    let beating = match shortest {
        Some(ms) => {
            let interval = crate::store::dist::liveness::heartbeat_interval(std::time::Duration::from_millis(ms as u64));
            // SAFETY: a plain call.
            let rc = unsafe { (plugin.start_heartbeat)(interval.as_millis() as u64) };
            crate::ensure!(rc == 0, "the MPI heartbeat thread could not start (code {rc})");
            true
        }
        None => false,
    };
    if role == Role::Worker {
        // SAFETY: a plain call, before the progress thread starts.
        unsafe { (plugin.set_bulk_lead)(WORKER_BULK_LEAD) };
    }
    // SAFETY: `on_message` and `on_place` have the callback signatures; the context is unused.
    let rc = unsafe { (plugin.start_receiver)(on_message, Some(on_place), std::ptr::null_mut()) };
    crate::ensure!(rc == 0, "the MPI receiver thread could not start (code {rc})");
    let transport = MpiTransport { plugin, rank: rank.max(0) as usize, roles, hosts, beating };
    let node = Arc::new(Node::new(Box::new(transport)));
    node.watch.set_label(format!("{} {}", role.name(), node.ranks_of(role).iter().position(|&r| r == node.rank).unwrap_or(0)));
    node.start_monitor(timeout);
    *state = State::Running(Arc::clone(&node));
    Ok(node)
}

impl Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn roles(&self) -> Vec<Role> {
        self.roles.clone()
    }

    fn set_bulk_lead(&self, bytes: u64) {
        // SAFETY: a plain call; the plugin stores the setting for the sends started after it.
        unsafe { (self.plugin.set_bulk_lead)(bytes) }
    }

    fn set_handler(&self, handler: Handler) {
        *HANDLER.write() = Some(handler);
    }

    fn set_placement(&self, placement: Arc<dyn Placement>) {
        *PLACEMENT.write() = Some(placement);
    }

    fn host(&self, rank: usize) -> String {
        self.hosts.get(rank).cloned().unwrap_or_else(|| "?".to_string())
    }

    fn silence(&self, rank: usize) -> Option<std::time::Duration> {
        if !self.beating || rank == self.rank {
            return None;
        }
        // SAFETY: a plain call.
        let ms = unsafe { (self.plugin.silence_ms)(rank as c_int) };
        (ms >= 0).then(|| std::time::Duration::from_millis(ms as u64))
    }

    /// Returns once the bytes have been sent (no copy). A failure aborts the job (a lost
    /// message would hang it instead).
    fn send(&self, dest: usize, bytes: &[u8]) {
        let sent = Arc::new(Sent { done: Mutex::new(false), wake: parking_lot::Condvar::new() });
        let ctx = Arc::into_raw(Arc::clone(&sent)) as *mut c_void;
        if !self.post(dest, bytes.as_ptr(), bytes.len(), false, release_sent, ctx) {
            release_sent(ctx);
            self.abort(1);
        }
        let mut done = sent.done.lock();
        while !*done {
            sent.wake.wait(&mut done);
        }
    }

    /// Returns at once; the plugin frees the bytes once sent. A failure aborts the job.
    fn send_owned(&self, dest: usize, bytes: Vec<u8>, express: bool) {
        let (data, len) = (bytes.as_ptr(), bytes.len());
        let ctx = Box::into_raw(Box::new(bytes)) as *mut c_void;
        if !self.post(dest, data, len, express, release_owned, ctx) {
            release_owned(ctx);
            self.abort(1);
        }
    }

    /// Returns at once; a body of `IN_PLACE_MIN` bytes or more is sent from the array's
    /// memory, which stays read-locked (its writers wait) until the plugin has sent it. A
    /// failure aborts the job.
    fn send_parts(&self, dest: usize, head: Vec<u8>, body: Body, express: bool) {
        let message = Box::new(InPlace { head, body });
        let in_place = (message.body.len() >= IN_PLACE_MIN).then(|| {
            let (lock, range) = message.body.lock_and_range();
            let payload = lock.read_recursive();
            let host = !matches!(payload.data, crate::ndarray::Memory::Device(_));
            match host.then(|| payload.data.bytes().get(range)).flatten() {
                Some(bytes) => {
                    let at = (bytes.as_ptr(), bytes.len());
                    // Unlocked by `release_in_place` once the plugin has sent the bytes.
                    std::mem::forget(payload);
                    Some(at)
                }
                None => None,
            }
        })
        .flatten();
        let Some((body, body_len)) = in_place else {
            let InPlace { head, body } = *message;
            return self.send_owned(dest, body.copied_after(head), express);
        };
        let (head, head_len) = (message.head.as_ptr(), message.head.len());
        let ctx = Box::into_raw(message) as *mut c_void;
        // SAFETY: the head's bytes live in the leaked box and the body's in an array kept
        // alive and read-locked by it (no writer can touch them), until `release_in_place`.
        let rc = unsafe { (self.plugin.post_parts)(dest as c_int, DATA_TAG, head, head_len, body, body_len, express as c_int, release_in_place, ctx) };
        if rc != 0 {
            eprintln!("libkvstore: MPI send of {} bytes to rank {dest} failed (code {rc}); aborting the job", head_len + body_len);
            release_in_place(ctx);
            self.abort(1);
        }
    }

    fn barrier_all(&self) {
        // SAFETY: a plain call.
        unsafe { (self.plugin.barrier)(0) };
    }

    fn abort(&self, code: i32) -> ! {
        // SAFETY: a plain call; it does not return.
        unsafe { (self.plugin.abort)(code) };
        std::process::exit(code)
    }

    fn abort_isolated(&self, code: i32) -> ! {
        // SAFETY: a plain call; it does not return.
        unsafe { (self.plugin.abort_isolated)(code) };
        std::process::exit(code)
    }

    /// Stops the receiver and finalises MPI; later distributed stores of this process are
    /// refused.
    fn finalize(&self) {
        let mut state = NODE.lock();
        if let State::Running(_) = &*state {
            *HANDLER.write() = None;
            *PLACEMENT.write() = None;
            // SAFETY: a plain call; every send and barrier of this process has returned.
            unsafe { (self.plugin.finalize)() };
            *state = State::Finalized;
        }
    }
}

/// Aborts the MPI job if this process runs one (for failures outside any store's node, as
/// the hosted server's); a no-op otherwise, so it never ends a process that only has
/// loopback nodes.
pub fn abort_if_running(code: i32) {
    let node = match &*NODE.lock() {
        State::Running(n) => Some(Arc::clone(n)),
        _ => None,
    };
    if let Some(n) = node {
        n.abort(code);
    }
}
