//! Where an array's bytes live: host memory, pinned host memory (`cpu_pinned` with a usable
//! driver) or a GPU's memory. Host code reads bytes only through [`Memory::bytes`] and
//! [`Memory::bytes_mut`], which refuse device memory: a host read of GPU memory is a bug in
//! libkvstore, reported as an internal error, never a silent read of garbage.

use super::{Context, DeviceType};
use crate::base::buffer::Buffer;
use crate::error::Result;
use crate::gpu::{DeviceMemory, DevicePtr, PinnedMemory};

/// An array's bytes.
#[derive(Debug)]
pub enum Memory {
    /// Pageable host memory.
    Host(Buffer),
    /// Page-locked host memory.
    Pinned(PinnedMemory),
    /// Memory of one GPU.
    Device(DeviceMemory),
    /// Host memory another library owns (a host array's, in hosted mode), lent while this lives.
    Foreign(Box<dyn ForeignBytes>),
}

/// Host memory owned outside libkvstore, lent to an array: the lender keeps it alive and in
/// place until dropped. Whoever lends it also orders every use of it (the array's engine
/// variable stands for the owner's dependency), so the bytes are never touched concurrently
/// with the owner's own writes.
pub trait ForeignBytes: Send + Sync + std::fmt::Debug {
    /// The lent bytes.
    fn bytes(&self) -> &[u8];
    /// The lent bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Memory {
    /// `len` zero bytes where `ctx` keeps values.
    pub fn zeroed(ctx: Context, len: usize) -> Result<Memory> {
        Ok(match ctx.dev_type {
            DeviceType::Gpu => Memory::Device(DeviceMemory::zeroed(ctx.dev_id, len).map_err(crate::Error::new)?),
            DeviceType::CpuPinned if crate::gpu::pinned_memory_available() => {
                Memory::Pinned(PinnedMemory::exact(len).map_err(crate::Error::new)?)
            }
            _ => Memory::Host(Buffer::zeroed(len)?),
        })
    }

    /// `len` zero bytes for a sparse array's values or aux array on `ctx`: a GPU's memory on a
    /// GPU context, otherwise pageable host memory (sparse arrays on host contexts stay
    /// ordinary host buffers).
    pub fn zeroed_sparse(ctx: Context, len: usize) -> Result<Memory> {
        match ctx.dev_type {
            DeviceType::Gpu => Memory::zeroed(ctx, len),
            _ => Ok(Memory::Host(Buffer::zeroed(len)?)),
        }
    }

    /// `bytes` held where a sparse array on `ctx` keeps them: the buffer itself on a host
    /// context; uploaded into new device memory (and waited for) on a GPU context.
    pub fn holding_sparse(ctx: Context, bytes: Buffer) -> Result<Memory> {
        if ctx.dev_type != DeviceType::Gpu {
            return Ok(Memory::Host(bytes));
        }
        let device = DeviceMemory::zeroed(ctx.dev_id, bytes.len()).map_err(crate::Error::new)?;
        crate::gpu::transfer::upload(device.ptr(), bytes.bytes()).map_err(crate::Error::new)?;
        Ok(Memory::Device(device))
    }

    /// A host copy of the bytes (downloaded, and waited for, from device memory).
    pub fn to_host(&self) -> Result<Buffer> {
        let mut out = Buffer::zeroed(self.len())?;
        match self {
            Memory::Device(d) => crate::gpu::transfer::download(out.bytes_mut(), d.ptr()).map_err(crate::Error::new)?,
            _ => out.bytes_mut().copy_from_slice(self.bytes()),
        }
        Ok(out)
    }

    /// `len` zero bytes of pinned staging memory from the pool (host memory without a driver):
    /// the host side of a GPU array's copy.
    pub fn staging(len: usize) -> Result<Memory> {
        if !crate::gpu::pinned_memory_available() {
            return Ok(Memory::Host(Buffer::zeroed(len)?));
        }
        let mut m = PinnedMemory::staging(len).map_err(crate::Error::new)?;
        m.bytes_mut().fill(0);
        Ok(Memory::Pinned(m))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Memory::Host(b) => b.len(),
            Memory::Pinned(p) => p.len(),
            Memory::Device(d) => d.len(),
            Memory::Foreign(f) => f.bytes().len(),
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn device_read(d: &DeviceMemory) -> ! {
        panic!("internal error: host code touched the memory of gpu({}) directly", d.ptr().ordinal)
    }

    /// The bytes of host memory (pinned or not). Panics on device memory (see the module doc).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Memory::Host(b) => b.bytes(),
            Memory::Pinned(p) => p.bytes(),
            Memory::Device(d) => Self::device_read(d),
            Memory::Foreign(f) => f.bytes(),
        }
    }

    /// The bytes of host memory, writable; see [`Memory::bytes`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Memory::Host(b) => b.bytes_mut(),
            Memory::Pinned(p) => p.bytes_mut(),
            Memory::Device(d) => Self::device_read(d),
            Memory::Foreign(f) => f.bytes_mut(),
        }
    }

    /// Start of the bytes for `MXNDArrayGetData`: a host pointer, or the device address.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Memory::Host(b) => b.as_mut_ptr(),
            Memory::Pinned(p) => p.bytes_mut().as_mut_ptr(),
            Memory::Device(d) => d.ptr().addr as usize as *mut u8,
            Memory::Foreign(f) => f.bytes_mut().as_mut_ptr(),
        }
    }

    /// The device address, for device memory.
    pub fn device_ptr(&self) -> Option<DevicePtr> {
        match self {
            Memory::Device(d) => Some(d.ptr()),
            _ => None,
        }
    }

    /// The pinned memory, for pinned host memory.
    pub fn pinned(&self) -> Option<&PinnedMemory> {
        match self {
            Memory::Pinned(p) => Some(p),
            _ => None,
        }
    }
}

impl From<Buffer> for Memory {
    fn from(b: Buffer) -> Memory {
        Memory::Host(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_contexts_get_host_memory_and_read_it() {
        // Without a driver (CI's default) cpu_pinned is ordinary host memory, as in MXNet
        // built without CUDA; with one it is pinned. Either way host code reads it.
        for ctx in [Context::cpu(0), Context::cpu_pinned(0)] {
            let mut m = Memory::zeroed(ctx, 10).unwrap();
            assert_eq!(m.len(), 10);
            assert!(m.device_ptr().is_none());
            m.bytes_mut()[9] = 7;
            assert_eq!(m.bytes()[9], 7);
        }
        if !crate::gpu::pinned_memory_available() {
            assert!(matches!(Memory::zeroed(Context::cpu_pinned(0), 4).unwrap(), Memory::Host(_)));
            assert!(Memory::zeroed(Context { dev_type: DeviceType::Gpu, dev_id: 0 }, 4).is_err());
        }
    }
}
