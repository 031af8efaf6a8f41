//! Store-owned memory as host arrays: a [`Buffer`] handed to the host once with
//! `MXNDArrayFromDLPackEx`. The host array owns the buffer (its DLPack deleter frees it when
//! the last host handle goes), so shallow copies handed to updaters keep it alive.

use super::host::Host;
use crate::ffi::NDArrayHandle;
use crate::base::buffer::Buffer;
use crate::{DType, Result};
use std::os::raw::{c_int, c_void};

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device_type: c_int,
    device_id: c_int,
    ndim: c_int,
    code: u8,
    bits: u8,
    lanes: u16,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// The memory a host array over store-owned memory points into.
enum Memory {
    /// A buffer only the host array uses.
    Buffer(Buffer),
    /// A native array's memory, shared with libkvstore's own stores (the distributed store's
    /// staging arrays): the clone keeps it alive while the host holds the array.
    Native(crate::NDArray),
}

/// What the DLPack tensor points into; freed by [`release`].
struct Owned {
    managed: DLManagedTensor,
    shape: Vec<i64>,
    memory: Memory,
}

unsafe extern "C" fn release(managed: *mut DLManagedTensor) {
    // SAFETY: `manager_ctx` is the `Box<Owned>` leaked in `HostArray::new`; the host calls
    // the deleter once, when its array goes.
    unsafe { drop(Box::from_raw((*managed).manager_ctx as *mut Owned)) }
}

/// DLPack's (code, bits) for the dtypes hosted mode stores.
pub(super) fn dl_type(dtype: DType) -> Result<(u8, u8)> {
    const INT: u8 = 0;
    const UINT: u8 = 1;
    const FLOAT: u8 = 2;
    Ok(match dtype {
        DType::Float32 => (FLOAT, 32),
        DType::Float64 => (FLOAT, 64),
        DType::Float16 => (FLOAT, 16),
        DType::Uint8 => (UINT, 8),
        DType::Int8 => (INT, 8),
        DType::Int32 => (INT, 32),
        DType::Int64 => (INT, 64),
        other => crate::bail!(
            "dtype {} is not supported by the hosted store yet",
            other.name()
        ),
    })
}

/// A dense host array (cpu(0)) over store-owned memory. `ptr` stays valid while `handle` is
/// not freed; kernels touch it only inside host engine ops that declare `handle`.
pub(super) struct HostArray {
    pub handle: NDArrayHandle,
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: the handle and pointer are addresses the host and its engine order; the store
// serialises its own use of them.
unsafe impl Send for HostArray {}

impl HostArray {
    pub fn new(host: &Host, dtype: DType, shape: &[i64]) -> Result<HostArray> {
        let elements: i64 = shape.iter().product();
        let len = usize::try_from(elements).map_err(|_| crate::Error::new("negative shape"))?
            * dtype.size();
        Self::wrap(host, dtype, shape, Memory::Buffer(Buffer::zeroed(len.max(1))?), len)
    }

    /// A host array over a dense native cpu array's memory. Nothing orders the host's ops on
    /// it against libkvstore's engine: the caller waits on one side before the other touches it.
    pub fn over_native(host: &Host, native: &crate::NDArray) -> Result<HostArray> {
        let shape: Vec<i64> = native.shape().iter().map(|&d| d as i64).collect();
        let len = native.data_byte_len();
        Self::wrap(host, native.dtype(), &shape, Memory::Native(native.clone()), len)
    }

    fn wrap(host: &Host, dtype: DType, shape: &[i64], memory: Memory, len: usize) -> Result<HostArray> {
        let (code, bits) = dl_type(dtype)?;
        let mut owned = Box::new(Owned {
            managed: DLManagedTensor {
                dl_tensor: DLTensor {
                    data: std::ptr::null_mut(),
                    device_type: 1, // kDLCPU
                    device_id: 0,
                    ndim: shape.len() as c_int,
                    code,
                    bits,
                    lanes: 1,
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(release),
            },
            shape: shape.to_vec(),
            memory,
        });
        let ptr = match &mut owned.memory {
            Memory::Buffer(b) => b.as_mut_ptr(),
            Memory::Native(a) => a.data_ptr(),
        };
        owned.managed.dl_tensor.data = ptr as *mut c_void;
        owned.managed.dl_tensor.shape = owned.shape.as_mut_ptr();
        let raw = Box::into_raw(owned);
        // SAFETY: `raw` is live; the context points back at it for `release`.
        let managed = unsafe {
            (*raw).managed.manager_ctx = raw as *mut c_void;
            std::ptr::addr_of_mut!((*raw).managed)
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: a complete DLManagedTensor; on success the host owns it (and calls release).
        let rc = unsafe { (host.api.from_dlpack_ex)(managed as *mut c_void, false, &mut handle) };
        if rc != 0 {
            // SAFETY: the host refused it, so it is still ours.
            unsafe { drop(Box::from_raw(raw)) };
            host.check(rc, "MXNDArrayFromDLPackEx")?;
        }
        Ok(HostArray { handle, ptr, len })
    }

    /// Drops this handle without waiting: for arrays whose pending host ops hold their own
    /// references (operators called through `MXImperativeInvoke`).
    pub fn forget(self, host: &Host) {
        if super::shut_down() {
            return;
        }
        // SAFETY: a live handle this store owns; nothing of the store uses it afterwards.
        unsafe {
            (host.api.free)(self.handle);
        }
    }

    /// Waits for the host's pending ops on it, then drops this handle.
    pub fn free(self, host: &Host) {
        if super::shut_down() {
            return;
        }
        // SAFETY: a live handle this store owns; nothing uses it afterwards.
        unsafe {
            (host.api.wait_to_write)(self.handle);
            (host.api.free)(self.handle);
        }
    }
}
