//! What the frontends query at import besides ops: the library's features, the random seed,
//! and the data-iterator registry (names only: libkvstore has no data iterators).

#![allow(non_snake_case)]

use super::args::Out;
use super::cstr_table::{CStrTable, TokenTable};
use super::handle::TokenKind;
use super::types::LibFeature;
use crate::error::Result;
use once_cell::sync::Lazy;
use std::os::raw::{c_char, c_int, c_void};

/// MXNet 1.9's feature names, in its order. The Python frontend refuses to import unless it
/// knows every one (TVM_OP included); Perl switches to the int64 API if INT64_TENSOR_SIZE
/// is enabled, so it must not be.
const FEATURE_NAMES: [&str; 32] = [
    "CUDA", "CUDNN", "NCCL", "CUDA_RTC", "TENSORRT", "CPU_SSE", "CPU_SSE2", "CPU_SSE3", "CPU_SSE4_1", "CPU_SSE4_2",
    "CPU_SSE4A", "CPU_AVX", "CPU_AVX2", "OPENMP", "SSE", "F16C", "JEMALLOC", "BLAS_OPEN", "BLAS_ATLAS", "BLAS_MKL",
    "BLAS_APPLE", "LAPACK", "MKLDNN", "OPENCV", "CAFFE", "PROFILER", "DIST_KVSTORE", "CXX14", "INT64_TENSOR_SIZE",
    "SIGNAL_HANDLER", "DEBUG", "TVM_OP",
];

/// Whether libkvstore has the feature: CUDA, and NCCL (the `nccl` store, which sums on the
/// GPUs without libnccl), when a device is usable; nothing else applies.
fn enabled(name: &str) -> bool {
    matches!(name, "CUDA" | "NCCL") && crate::gpu::device_count().unwrap_or(0) > 0
}

struct Features {
    _names: CStrTable,
    list: Vec<LibFeature>,
}

// SAFETY: built once and never mutated; the name pointers point into `_names`, which lives
// as long as the list. Read-only sharing across threads is sound.
unsafe impl Sync for Features {}
// SAFETY: as above.
unsafe impl Send for Features {}

static FEATURES: Lazy<Features> = Lazy::new(|| {
    let names = CStrTable::new(FEATURE_NAMES);
    let list = FEATURE_NAMES.iter().enumerate().map(|(i, n)| LibFeature { name: names.get(i), enabled: enabled(n) }).collect();
    Features { _names: names, list }
});

/// The library's features (MXNet's 32 names; all disabled but CUDA and NCCL when a GPU is usable).
///
/// Ownership: the array belongs to the library and lives for the process.
pub extern "C" fn MXLibInfoFeatures(libFeature: *mut *const LibFeature, size: *mut usize) -> c_int {
    ffi_boundary!({
        let (list, n) = (Out::new(libFeature, "libFeature")?, Out::new(size, "size")?);
        list.write(FEATURES.list.as_ptr());
        n.write(FEATURES.list.len());
        Ok(())
    })
}

/// Seeds the random ops (`_random_normal`): after the same seed the same ops draw the same
/// values. They are libkvstore's own samples, not MXNet's bits.
///
/// Ownership: none.
pub extern "C" fn MXRandomSeed(seed: c_int) -> c_int {
    ffi_boundary!({
        crate::ops::seed_random(seed);
        Ok(())
    })
}

/// The data iterators MXNet 1.9 registers and the Python frontend imports by name.
const ITERATOR_NAMES: [&str; 9] = [
    "CSVIter",
    "ImageDetRecordIter",
    "ImageRecordInt8Iter",
    "ImageRecordIter",
    "ImageRecordIter_v1",
    "ImageRecordUInt8Iter",
    "ImageRecordUInt8Iter_v1",
    "LibSVMIter",
    "MNISTIter",
];
static ITERATORS: Lazy<TokenTable> =
    Lazy::new(|| TokenTable::new((0..ITERATOR_NAMES.len()).map(|i| super::handle::token(TokenKind::DataIter, i)).collect()));
static ITERATOR_STRINGS: Lazy<CStrTable> = Lazy::new(|| CStrTable::new(ITERATOR_NAMES));
static ITERATOR_DESCRIPTION: Lazy<CStrTable> =
    Lazy::new(|| CStrTable::new(["Registered by name only: libkvstore has no data iterators (creating one fails)."]));

fn iterator_index(creator: *mut c_void) -> Result<usize> {
    let index = super::handle::token_index(TokenKind::DataIter, creator, ITERATOR_NAMES.len());
    index.ok_or_else(|| crate::Error::new(format!("creator ({creator:p}) is not a data-iterator handle of libkvstore")))
}

/// The registered data iterators (names only; see `MXDataIterGetIterInfo`).
///
/// Ownership: the array belongs to the library and lives for the process.
pub extern "C" fn MXListDataIters(out_size: *mut u32, out_array: *mut *mut *mut c_void) -> c_int {
    ffi_boundary!({
        let (size, array) = (Out::new(out_size, "out_size")?, Out::new(out_array, "out_array")?);
        size.write(ITERATORS.len() as u32);
        array.write(ITERATORS.as_ptr());
        Ok(())
    })
}

/// A data iterator's name and description; it declares no arguments.
///
/// Ownership: every string and array belongs to the library and lives for the process.
pub extern "C" fn MXDataIterGetIterInfo(
    creator: *mut c_void,
    name: *mut *const c_char,
    description: *mut *const c_char,
    num_args: *mut u32,
    arg_names: *mut *mut *const c_char,
    arg_type_infos: *mut *mut *const c_char,
    arg_descriptions: *mut *mut *const c_char,
) -> c_int {
    ffi_boundary!({
        let (name, description) = (Out::new(name, "name")?, Out::new(description, "description")?);
        let num_args = Out::new(num_args, "num_args")?;
        let (names, types) = (Out::new(arg_names, "arg_names")?, Out::new(arg_type_infos, "arg_type_infos")?);
        let descriptions = Out::new(arg_descriptions, "arg_descriptions")?;
        let i = iterator_index(creator)?;
        name.write(ITERATOR_STRINGS.get(i));
        description.write(ITERATOR_DESCRIPTION.get(0));
        num_args.write(0);
        // No arguments: empty arrays (any valid pointer; nothing is read through them).
        names.write(ITERATOR_STRINGS.as_ptr());
        types.write(ITERATOR_STRINGS.as_ptr());
        descriptions.write(ITERATOR_STRINGS.as_ptr());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_list_all_32_names_with_int64_sizes_disabled() {
        let (mut list, mut n) = (std::ptr::null(), 0usize);
        assert_eq!(MXLibInfoFeatures(&mut list, &mut n), 0);
        assert_eq!(n, 32);
        let names: Vec<&str> = FEATURES.list.iter().map(|f| {
            // SAFETY: test-only read of the NUL-terminated static names built above.
            unsafe { std::ffi::CStr::from_ptr(f.name) }.to_str().unwrap()
        }).collect();
        assert!(names.contains(&"TVM_OP") && names.contains(&"INT64_TENSOR_SIZE"));
        assert!(!FEATURES.list[28].enabled);
        assert!(iterator_index(std::ptr::null_mut()).is_err());
    }
}
