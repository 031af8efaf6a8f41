//! What the stand-in's tests share: the built library loaded by path with typed entry points,
//! and running one test in a child process with its own environment (the stand-in reads its
//! configuration once per process).
// Each test uses part of this module; the entry points keep cuda.h's names; `cu!` is the one
// place tests call into the stand-in, its arguments being the test's own expressions.
#![allow(dead_code, unused_macros, non_snake_case)]

pub mod nvrtc;

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::process::{Command, Output};

/// target/<profile>/ of this test binary (target/<profile>/deps/<test>).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The stand-in built with this test binary: target/<profile>/deps/, beside it (`cargo test`
/// rebuilds that copy but does not refresh target/<profile>/libcuda_standin.so).
pub fn library_path() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().join("libcuda_standin.so")
}

/// A directory holding the stand-in as libcuda.so and libcuda.so.1 (what
/// scripts/cuda-standin.sh makes), for LD_LIBRARY_PATH.
pub fn library_dir() -> PathBuf {
    let dir = profile_dir().join("cuda-standin-test");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libcuda.so", "libcuda.so.1"] {
        let tmp = dir.join(format!("{name}.{}", std::process::id()));
        std::fs::copy(library_path(), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    dir
}

pub type Ptr = *mut c_void;

macro_rules! api {
    ($($name:ident ( $($arg:ty),* );)*) => {
        /// The stand-in's entry points, typed as cuda.h declares them.
        pub struct Api {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> c_int,)*
            _lib: libloading::Library,
        }

        impl Api {
            pub fn load() -> Api {
                // SAFETY: loading the stand-in runs no initialiser with preconditions.
                let lib = unsafe { libloading::Library::new(library_path()) }.expect("load the built stand-in");
                // SAFETY: each symbol has the type cuda.h gives it (the list below).
                unsafe { Api { $($name: *lib.get(concat!(stringify!($name), "\0").as_bytes()).expect(stringify!($name)),)* _lib: lib } }
            }
        }
    };
}

api! {
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuDeviceGetCount(*mut c_int);
    cuDeviceGet(*mut c_int, c_int);
    cuDeviceGetAttribute(*mut c_int, c_int, c_int);
    cuDeviceGetName(*mut c_char, c_int, c_int);
    cuDeviceCanAccessPeer(*mut c_int, c_int, c_int);
    cuDevicePrimaryCtxRetain(*mut Ptr, c_int);
    cuDevicePrimaryCtxRelease_v2(c_int);
    cuCtxCreate_v2(*mut Ptr, c_uint, c_int);
    cuCtxDestroy_v2(Ptr);
    cuCtxSetCurrent(Ptr);
    cuCtxGetCurrent(*mut Ptr);
    cuCtxPushCurrent_v2(Ptr);
    cuCtxPopCurrent_v2(*mut Ptr);
    cuCtxSynchronize();
    cuCtxEnablePeerAccess(Ptr, c_uint);
    cuMemGetInfo_v2(*mut usize, *mut usize);
    cuMemAlloc_v2(*mut u64, usize);
    cuMemFree_v2(u64);
    cuMemAllocAsync(*mut u64, usize, Ptr);
    cuMemFreeAsync(u64, Ptr);
    cuMemHostAlloc(*mut Ptr, usize, c_uint);
    cuMemFreeHost(Ptr);
    cuMemHostRegister_v2(Ptr, usize, c_uint);
    cuMemHostUnregister(Ptr);
    cuPointerGetAttribute(Ptr, c_int, u64);
    cuMemcpyHtoD_v2(u64, *const c_void, usize);
    cuMemcpyDtoH_v2(Ptr, u64, usize);
    cuMemcpyDtoD_v2(u64, u64, usize);
    cuMemcpyHtoDAsync_v2(u64, *const c_void, usize, Ptr);
    cuMemcpyDtoHAsync_v2(Ptr, u64, usize, Ptr);
    cuMemcpyDtoDAsync_v2(u64, u64, usize, Ptr);
    cuMemcpyPeer(u64, Ptr, u64, Ptr, usize);
    cuMemcpyPeerAsync(u64, Ptr, u64, Ptr, usize, Ptr);
    cuMemsetD8_v2(u64, u8, usize);
    cuMemsetD32_v2(u64, c_uint, usize);
    cuMemsetD32Async(u64, c_uint, usize, Ptr);
    cuStreamCreate(*mut Ptr, c_uint);
    cuStreamDestroy_v2(Ptr);
    cuStreamSynchronize(Ptr);
    cuStreamQuery(Ptr);
    cuStreamWaitEvent(Ptr, Ptr, c_uint);
    cuLaunchHostFunc(Ptr, Option<unsafe extern "C" fn(Ptr)>, Ptr);
    cuEventCreate(*mut Ptr, c_uint);
    cuEventDestroy_v2(Ptr);
    cuEventRecord(Ptr, Ptr);
    cuEventQuery(Ptr);
    cuEventSynchronize(Ptr);
    cuEventElapsedTime(*mut c_float, Ptr, Ptr);
    cuModuleLoadData(*mut Ptr, *const c_void);
    cuModuleUnload(Ptr);
    cuModuleGetFunction(*mut Ptr, Ptr, *const c_char);
    cuFuncSetAttribute(Ptr, c_int, c_int);
    cuLaunchKernel(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr);
    cuGetErrorName(c_int, *mut *const c_char);
    cuGetExportTable(*mut *const c_void, *const c_void);
}

/// Calls an entry point: `cu!(api.cuInit(0))` answers its CUresult.
macro_rules! cu {
    ($api:ident . $name:ident ( $($arg:expr),* $(,)? )) => {
        // SAFETY: the test passes arguments valid for the entry point, as cuda.h documents.
        unsafe { ($api.$name)($($arg),*) }
    };
}

/// Asserts an entry point succeeded.
macro_rules! ok {
    ($api:ident . $name:ident ( $($arg:expr),* $(,)? )) => {
        assert_eq!(cu!($api.$name($($arg),*)), 0, "{} failed", stringify!($name))
    };
}

/// cuInit, then device `ordinal`'s primary context made current; returns the context.
pub fn setup(api: &Api, ordinal: c_int) -> Ptr {
    ok!(api.cuInit(0));
    let mut ctx: Ptr = std::ptr::null_mut();
    ok!(api.cuDevicePrimaryCtxRetain(&mut ctx, ordinal));
    ok!(api.cuCtxSetCurrent(ctx));
    ctx
}

/// Where test `test` has the stand-in write its trace (CUDA_STANDIN_TRACE).
pub fn trace_path(test: &str) -> String {
    profile_dir().join(format!("{test}.trace")).display().to_string()
}

/// The environment variable naming the test a child process must run.
const CHILD: &str = "CUDA_STANDIN_TEST_CHILD";

/// Whether this process is the child that runs `test`'s body.
pub fn is_child(test: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|t| t == test)
}

/// How long a child may run: a stand-in bug that deadlocks fails the test instead of hanging it.
const CHILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs test `test` of this binary in a child process with `env` added (killed, and reported
/// as failed, after CHILD_LIMIT).
pub fn run_child(test: &str, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([test, "--exact", "--nocapture", "--test-threads=1"]).env(CHILD, test);
    for var in ["CUDA_STANDIN_DEVICES", "CUDA_STANDIN_MEMORY", "CUDA_STANDIN_DELAY_US", "CUDA_STANDIN_FAIL", "CUDA_STANDIN_TRACE", "CUDA_STANDIN_DRIVER_VERSION"] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let logs = profile_dir().join("cuda-standin-test");
    std::fs::create_dir_all(&logs).unwrap();
    let (out_path, err_path) = (logs.join(format!("{test}.{}.out", std::process::id())), logs.join(format!("{test}.{}.err", std::process::id())));
    command.stdout(std::fs::File::create(&out_path).unwrap()).stderr(std::fs::File::create(&err_path).unwrap());
    let mut child = command.spawn().unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            panic!("{test} ran longer than {CHILD_LIMIT:?} (a deadlock?); its output is in {}", out_path.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = Output { status, stdout: std::fs::read(&out_path).unwrap(), stderr: std::fs::read(&err_path).unwrap() };
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    output
}

/// Defines a test whose body runs in a child process with the given stand-in environment,
/// and passes only if the child's body passed.
macro_rules! isolated_test {
    ($name:ident, [$($key:literal = $value:expr),* $(,)?], $body:block) => {
        #[test]
        fn $name() {
            if $crate::common::is_child(stringify!($name)) {
                $body
                return;
            }
            let out = $crate::common::run_child(stringify!($name), &[$(($key, &$value.to_string())),*]);
            let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && log.contains("1 passed"), "child run of {} failed:\n{log}", stringify!($name));
            for line in log.lines().filter(|l| l.contains("skipped:")) {
                println!("{}: {line}", stringify!($name));
            }
        }
    };
}

/// A host function that holds a stream until the test opens it: makes "not yet" assertions
/// deterministic instead of a race against a delay.
pub struct Gate(&'static std::sync::atomic::AtomicBool);

unsafe extern "C" fn wait_at_gate(gate: *mut c_void) {
    // SAFETY: `gate` is the leaked AtomicBool of a Gate.
    let open = unsafe { &*(gate as *const std::sync::atomic::AtomicBool) };
    while !open.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

impl Gate {
    /// Enqueues a closed gate on `stream`.
    pub fn close(api: &Api, stream: Ptr) -> Gate {
        let open: &'static _ = Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
        ok!(api.cuLaunchHostFunc(stream, Some(wait_at_gate), open as *const _ as Ptr));
        Gate(open)
    }

    pub fn open(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Opens the gate from another thread after `ms` milliseconds, while this thread is
    /// blocked in a call that must wait for it.
    pub fn open_after(&self, ms: u64) {
        let open = self.0;
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            open.store(true, std::sync::atomic::Ordering::Release);
        });
    }
}
