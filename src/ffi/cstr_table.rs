//! Static tables of C strings and of opaque tokens handed out as `void*` arrays: MXNet's
//! listing calls return arrays the library owns for the life of the process.

use std::ffi::CString;
use std::os::raw::{c_char, c_void};

/// NUL-terminated copies of some strings and an array of pointers to them.
pub(crate) struct CStrTable {
    _owned: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

// SAFETY: the table is never mutated after construction; the pointers point into the heap
// buffers of `_owned`, which live (unmoved) as long as the table. Sharing read-only pointers
// between threads is sound.
unsafe impl Sync for CStrTable {}
// SAFETY: as above; nothing in the table is tied to the thread that built it.
unsafe impl Send for CStrTable {}

impl CStrTable {
    /// The strings, with interior NULs (never present in op metadata) replaced by spaces.
    pub(crate) fn new<'a>(strings: impl IntoIterator<Item = &'a str>) -> CStrTable {
        let owned: Vec<CString> = strings
            .into_iter()
            .map(|s| CString::new(s.replace('\0', " ")).unwrap_or_default())
            .collect();
        let ptrs = owned.iter().map(|s| s.as_ptr()).collect();
        CStrTable { _owned: owned, ptrs }
    }

    /// Number of strings.
    pub(crate) fn len(&self) -> usize {
        self.ptrs.len()
    }

    /// The pointer array, as MXNet's `const char**` out-parameters want it.
    pub(crate) fn as_ptr(&self) -> *mut *const c_char {
        self.ptrs.as_ptr() as *mut *const c_char
    }

    /// The `i`-th string.
    pub(crate) fn get(&self, i: usize) -> *const c_char {
        self.ptrs.get(i).copied().unwrap_or(c"".as_ptr())
    }
}

/// Opaque tokens (op and iterator handles) as an array of `void*`.
pub(crate) struct TokenTable {
    tokens: Vec<usize>,
}

impl TokenTable {
    pub(crate) fn new(tokens: Vec<usize>) -> TokenTable {
        TokenTable { tokens }
    }

    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The array as `void**`: a `usize` has the size and alignment of a pointer.
    pub(crate) fn as_ptr(&self) -> *mut *mut c_void {
        const _: () = assert!(std::mem::size_of::<usize>() == std::mem::size_of::<*mut c_void>());
        self.tokens.as_ptr() as *mut *mut c_void
    }
}
