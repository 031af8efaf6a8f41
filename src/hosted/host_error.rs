//! Failing an op in the host's engine. MXNet 1.9's engine takes an op's failure as a
//! `const dmlc::Error*` handed to the op's completion callback, keeps a copy on the arrays the
//! op writes, and rethrows it at the next wait on them (and on arrays computed from them) —
//! the way a failure of MXNet's own KVStore ops reaches the frontend. The C API has no way to
//! build that object, so it is built here: `dmlc::Error` is a `std::runtime_error` (16 bytes:
//! the vtable pointer and libstdc++'s reference-counted message) whose vtable the host exports.
//! `std::runtime_error`'s constructor and destructor are libstdc++'s, loaded with the host.
//! Without these symbols failures are only recorded for the next call (as before).

use libc::{c_char, c_void};
use std::ffi::CString;

/// The symbols building a `dmlc::Error` in the host's process.
#[derive(Clone, Copy)]
pub(crate) struct ErrorApi {
    /// `vtable for dmlc::Error` (the object's vtable pointer is 16 bytes past it: the offset
    /// to top and the type info come first, as the Itanium C++ ABI lays vtables out).
    vtable: usize,
    /// `std::runtime_error::runtime_error(const char*)` (base-object constructor).
    construct: unsafe extern "C" fn(*mut c_void, *const c_char),
    /// `std::runtime_error::~runtime_error()` (base-object destructor).
    destroy: unsafe extern "C" fn(*mut c_void),
}

/// `dlsym(handle, name)`, or `None`.
fn lookup(handle: *mut c_void, name: &std::ffi::CStr) -> Option<usize> {
    // SAFETY: dlsym only reads the loader's tables; `name` is NUL-terminated.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!address.is_null()).then_some(address as usize)
}

impl ErrorApi {
    /// The symbols, when the host library (`vtable`: its `_ZTVN4dmlc5ErrorE`, looked up by
    /// the caller) and libstdc++ provide them.
    pub fn resolve(vtable: Option<usize>) -> Option<ErrorApi> {
        let vtable = vtable?;
        let construct = lookup(libc::RTLD_DEFAULT, c"_ZNSt13runtime_errorC2EPKc")?;
        let destroy = lookup(libc::RTLD_DEFAULT, c"_ZNSt13runtime_errorD2Ev")?;
        // SAFETY: libstdc++'s constructor and destructor of std::runtime_error, whose C++
        // signatures (`this` first, then the message) are these C ones on x86-64 and aarch64.
        let (construct, destroy) = unsafe {
            (
                std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *const c_char)>(construct),
                std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(destroy),
            )
        };
        Some(ErrorApi { vtable, construct, destroy })
    }

    /// Calls `with` with a live `dmlc::Error` saying `message`, destroyed after it returns.
    pub fn with_error<R>(&self, message: &str, with: impl FnOnce(*const c_void) -> R) -> R {
        let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // Two words, aligned as the C++ object.
        let mut object = [0usize; 2];
        let this = object.as_mut_ptr() as *mut c_void;
        // SAFETY: `object` has the size and alignment of a std::runtime_error (a vtable
        // pointer and a string pointer); the constructor initialises both.
        unsafe { (self.construct)(this, text.as_ptr()) };
        // Make it a dmlc::Error, as dmlc::Error's own (inline) constructor does after the base.
        // SAFETY: the object's first word, its vtable pointer, written through the pointer
        // the constructor was given.
        unsafe { *(this as *mut usize) = self.vtable + 2 * std::mem::size_of::<usize>() };
        let out = with(this as *const c_void);
        // SAFETY: constructed above; the engine copied what it keeps (make_exception_ptr).
        unsafe { (self.destroy)(this) };
        out
    }
}
