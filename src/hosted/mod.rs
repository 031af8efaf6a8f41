//! Hosted mode: when `KVSTORE_HOST_LIBRARY` names a real MXNet 1.9.x `libmxnet.so`, every
//! exported C function libkvstore does not own jumps to that library's (the trampolines of
//! `ffi::exports`), and every `MXKVStore*` call is served by libkvstore's store on the host's
//! own NDArray handles, each data operation one op in the host's engine.
//!
//! `host` loads the library and checks its version, `routing` fills the slot table,
//! `engine` runs libkvstore's engine ops in the host's engine, `dlpack` wraps libkvstore's
//! memory as host arrays, `store` carries the host's arrays into libkvstore's one store
//! (`lent` lends plain host arrays to it in place, `sparse` crosses row_sparse arrays,
//! `server_views` serves a dist server's updater), `ffi`
//! its exports.

mod async_op;
mod dlpack;
mod engine;
mod ffi;
mod host;
mod host_error;
mod key;
mod lent;
mod routing;
mod server_views;
mod sparse;
mod store;

use std::sync::OnceLock;

/// The environment variable naming the host library.
pub const HOST_LIBRARY_VAR: &str = "KVSTORE_HOST_LIBRARY";

static HOST: OnceLock<host::Host> = OnceLock::new();

/// Set once `MXNotifyShutdown` has stopped the host's engine: after that nothing may wait on
/// the host (a store freed during interpreter teardown would wait forever), so store memory
/// is left to the exiting process.
static SHUT_DOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn shut_down() -> bool {
    SHUT_DOWN.load(std::sync::atomic::Ordering::Acquire)
}

/// The loaded host library, in hosted mode.
pub(crate) fn host() -> Option<&'static host::Host> {
    HOST.get()
}

/// Runs when libkvstore.so is loaded, before any exported function can be called: the slots
/// must be filled before the first call, and the process is still single-threaded here.
extern "C" fn load_host_from_environment() {
    let Some(path) = std::env::var_os(HOST_LIBRARY_VAR) else {
        return;
    };
    // No panic may unwind out of a loader constructor.
    let outcome = std::panic::catch_unwind(|| host::Host::load(&path.to_string_lossy()));
    match outcome {
        Ok(Ok(host)) => {
            let host = HOST.get_or_init(|| host);
            static HOST_ENGINE: OnceLock<engine::HostEngine> = OnceLock::new();
            crate::engine::run_ops_on(HOST_ENGINE.get_or_init(|| engine::HostEngine(host)));
            crate::ffi::served::serve_with(store::HostedStore::create);
            crate::ffi::mirror_last_error(|text| {
                if let Some(host) = HOST.get() {
                    host.set_last_error(text);
                }
            });
            routing::route_to_host(host);
        }
        Ok(Err(e)) => routing::refuse(e.message()),
        Err(_) => routing::refuse("internal error (panic) while loading the host library"),
    }
}

#[used]
#[link_section = ".init_array"]
static LOAD_HOST: extern "C" fn() = load_host_from_environment;
