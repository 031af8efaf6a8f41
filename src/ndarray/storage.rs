//! Storage types, with MXNet's frozen codes, and the chunk that holds an array's memory.

use super::DType;
use crate::engine::OwnedVar;
use crate::error::Result;
use crate::base::CachePadded;
use parking_lot::RwLock;

/// A storage type. The discriminants are MXNet's `NDArrayStorageType` codes (ABI).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageType {
    /// `kDefaultStorage`: dense.
    Default = 0,
    /// `kRowSparseStorage`: a subset of rows, with int64 row indices as aux 0.
    RowSparse = 1,
    /// `kCSRStorage`: compressed sparse rows, aux 0 = indptr, aux 1 = column indices.
    Csr = 2,
}

/// `kUndefinedStorage`: what MXNet reports for an array made by `MXNDArrayCreateNone`.
pub const UNDEFINED_STORAGE: i32 = -1;

impl StorageType {
    /// The storage type with this MXNet code.
    pub fn from_code(code: i32) -> Result<StorageType> {
        Ok(match code {
            0 => StorageType::Default,
            1 => StorageType::RowSparse,
            2 => StorageType::Csr,
            _ => crate::bail!("unknown storage type {code} (expected 0 default, 1 row_sparse, 2 csr)"),
        })
    }

    /// MXNet's name.
    pub fn name(self) -> &'static str {
        match self {
            StorageType::Default => "default",
            StorageType::RowSparse => "row_sparse",
            StorageType::Csr => "csr",
        }
    }

    /// How many aux arrays the type has.
    pub fn num_aux(self) -> usize {
        match self {
            StorageType::Default => 0,
            StorageType::RowSparse => 1,
            StorageType::Csr => 2,
        }
    }
}

/// One aux array of a sparse value (indices, indptr), held where the values are: host
/// memory on host contexts, the GPU's memory on a `gpu(i)` context (as MXNet keeps a GPU
/// row_sparse array's row ids on the GPU).
#[derive(Debug)]
pub struct AuxData {
    /// Element type of the aux array.
    pub dtype: DType,
    /// Its shape (1-D).
    pub shape: Vec<usize>,
    /// Its bytes.
    pub data: super::Memory,
}

/// What a chunk holds: the value bytes and, for sparse arrays, the aux arrays and the shape
/// of the stored values (`storage_shape`), which changes as rows are added.
#[derive(Debug)]
pub struct Payload {
    /// Value bytes (on the host, or a GPU's for GPU arrays of every storage type).
    pub data: super::Memory,
    /// Shape of `data`: equal to the array's shape when dense; `(rows stored, ...)` when sparse.
    pub storage_shape: Vec<usize>,
    /// Aux arrays (empty when dense).
    pub aux: Vec<AuxData>,
}

/// Memory shared by every view of an array, with its engine variable. The engine orders the
/// ops on `var`; the lock makes each op's access memory-safe and is uncontended in practice.
/// Each field sits on its own cache lines: the calling thread registers ops on `var` (and
/// bumps the chunk's refcount) while a worker holds `payload`, and sharing lines between them
/// costs more than the work on a small array.
pub struct Chunk {
    /// The bytes.
    pub payload: CachePadded<RwLock<Payload>>,
    /// The engine variable ordering the ops on this chunk (its arrays keep a copy inline).
    pub var: OwnedVar,
    /// What backends keep with this memory from one op to the next, dropped with it
    /// ([`super::NDArray::kept`]).
    pub kept: parking_lot::Mutex<Vec<Box<dyn std::any::Any + Send>>>,
    /// A dense chunk's device address, read without the lock: a dense chunk's memory is never
    /// replaced (only a sparse array's rows are), and a GPU op over thousands of arrays would
    /// otherwise take each one's lock in turn, a locked instruction on a line another core
    /// last wrote, which no later access can overlap.
    pub dense_device: Option<crate::gpu::DevicePtr>,
}

impl Chunk {
    /// A chunk holding `payload`, the memory of a dense array when `dense`.
    pub fn new(payload: Payload, dense: bool) -> Chunk {
        let dense_device = if dense { payload.data.device_ptr() } else { None };
        Chunk {
            payload: CachePadded::new(RwLock::new(payload)),
            var: OwnedVar::new(),
            kept: parking_lot::Mutex::new(Vec::new()),
            dense_device,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_codes_match_mxnet() {
        assert_eq!(StorageType::Default as i32, 0);
        assert_eq!(StorageType::RowSparse as i32, 1);
        assert_eq!(StorageType::Csr as i32, 2);
        assert_eq!(UNDEFINED_STORAGE, -1);
        assert!(StorageType::from_code(3).is_err());
    }
}
