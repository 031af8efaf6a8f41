//! NDArrays: views (shape, dtype, context, storage type, offset) over shared, engine-ordered
//! chunks of host, pinned or GPU memory. A view is cheap to clone; clones share memory, as MXNet's do.


mod context;
mod copy;
mod memory;
mod row_ids;
pub(crate) use row_ids::check_row_ids;
mod row_sparse;
mod shape;
mod sparse;
mod storage;

pub use crate::base::{Context, DeviceType};
pub use crate::base::{DType, ALL_DTYPES};
pub use memory::{ForeignBytes, Memory};
pub use row_sparse::{DeviceRows, Rows};
pub(crate) use row_ids::ids_of as row_ids_of;
pub use storage::{AuxData, Chunk, Payload, StorageType, UNDEFINED_STORAGE};

use crate::engine::{engine, Var};
use crate::error::Result;
use std::ops::Range;
use std::sync::Arc;

/// Largest element count of one array, as in MXNet 1.9 without int64 tensor sizes.
pub const MAX_SIZE: usize = i32::MAX as usize - 1;

/// A view of an array.
#[derive(Clone)]
pub struct NDArray {
    chunk: Arc<Chunk>,
    /// The chunk's variable, inline: registering a call's arrays then reads only their vector.
    var: Var,
    shape: shape::Shape,
    dtype: DType,
    ctx: Context,
    stype: StorageType,
    /// First element of the view in the chunk (dense views only).
    offset: usize,
}

impl std::fmt::Debug for NDArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NDArray({:?} {} {} {})", self.shape, self.dtype.name(), self.ctx, self.stype.name())
    }
}

/// Formats a shape as MXNet does: `(2,3)`.
pub fn shape_string(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("({})", dims.join(","))
}

/// Number of elements of `shape`, refusing overflow and MXNet's size limit.
pub fn checked_size(shape: &[usize]) -> Result<usize> {
    let size = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match size {
        Some(s) if s <= MAX_SIZE => Ok(s),
        _ => crate::bail!("shape {} has more than {MAX_SIZE} elements", shape_string(shape)),
    }
}

/// The bytes of a view, read-locked while this lives.
pub struct ReadView<'a> {
    guard: parking_lot::RwLockReadGuard<'a, Payload>,
    range: Option<Range<usize>>,
}

impl ReadView<'_> {
    /// The view's bytes (dense: its range; sparse: the stored values).
    pub fn bytes(&self) -> &[u8] {
        let all = self.guard.data.bytes();
        match &self.range {
            Some(r) => &all[r.clone()],
            None => all,
        }
    }
}

/// The bytes of a view, write-locked while this lives.
pub struct WriteView<'a> {
    guard: parking_lot::RwLockWriteGuard<'a, Payload>,
    range: Option<Range<usize>>,
}

impl WriteView<'_> {
    /// The view's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let all = self.guard.data.bytes_mut();
        match &self.range {
            Some(r) => &mut all[r.clone()],
            None => all,
        }
    }
}

impl NDArray {
    /// A dense array of zeros.
    pub fn zeros(shape: &[usize], ctx: Context, dtype: DType) -> Result<NDArray> {
        let size = checked_size(shape)?;
        let payload = Payload {
            data: Memory::zeroed(ctx, size * dtype.size())?,
            storage_shape: shape.to_vec(),
            aux: Vec::new(),
        };
        Ok(NDArray::from_payload(payload, shape, ctx, dtype, StorageType::Default))
    }

    /// A dense `cpu(0)` array over host memory another library owns (see [`ForeignBytes`]),
    /// which must hold exactly `shape` elements of `dtype`.
    pub fn over_foreign(shape: &[usize], dtype: DType, bytes: Box<dyn ForeignBytes>) -> Result<NDArray> {
        let expected = checked_size(shape)? * dtype.size();
        crate::ensure!(
            bytes.bytes().len() == expected,
            "lent memory of {} bytes for an array of {expected} bytes (internal error)",
            bytes.bytes().len()
        );
        let payload = Payload { data: Memory::Foreign(bytes), storage_shape: shape.to_vec(), aux: Vec::new() };
        Ok(NDArray::from_payload(payload, shape, Context::cpu(0), dtype, StorageType::Default))
    }

    fn from_payload(payload: Payload, shape: &[usize], ctx: Context, dtype: DType, stype: StorageType) -> NDArray {
        let chunk = Arc::new(Chunk::new(payload, stype == StorageType::Default));
        let var = chunk.var.var();
        NDArray { chunk, var, shape: shape.into(), dtype, ctx, stype, offset: 0 }
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Device context.
    pub fn ctx(&self) -> Context {
        self.ctx
    }

    /// Storage type.
    pub fn stype(&self) -> StorageType {
        self.stype
    }

    /// Number of elements of the logical shape.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The engine variable ordering the ops on this array's memory.
    pub fn var(&self) -> Var {
        self.var
    }

    /// Hints that this array will soon be cloned: asks for the cache line of its chunk's
    /// reference count, so that loops cloning thousands of arrays (a call's handles) overlap
    /// the misses the locked increments would otherwise take one at a time.
    #[inline(always)]
    pub(crate) fn prefetch_clone(&self) {
        // `Arc`'s counts sit before its value, which starts at the first multiple of the
        // value's alignment past the two counts. Only a hint: a wrong address costs nothing.
        let counts = std::mem::align_of::<Chunk>().max(2 * std::mem::size_of::<usize>());
        crate::base::prefetch::prefetch_line_for_write((Arc::as_ptr(&self.chunk) as *const u8).wrapping_sub(counts));
    }

    /// Whether both views share memory.
    pub fn same_chunk(&self, other: &NDArray) -> bool {
        Arc::ptr_eq(&self.chunk, &other.chunk)
    }

    fn byte_range(&self) -> Range<usize> {
        let esz = self.dtype.size();
        self.offset * esz..(self.offset + self.size()) * esz
    }

    /// Runs `f` on the view's bytes under the chunk's read lock (dense: the view's range;
    /// sparse: the stored values). Callers order the access with the engine first.
    pub fn read_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let payload = self.chunk.payload.read_recursive();
        match self.stype {
            StorageType::Default => f(&payload.data.bytes()[self.byte_range()]),
            _ => f(payload.data.bytes()),
        }
    }

    /// The lock over this array's memory and the view's byte range in it: for a transport
    /// that keeps the bytes read-locked while it sends them in place, past this call (dense
    /// views only).
    pub(crate) fn lock_and_range(&self) -> (&parking_lot::RwLock<Payload>, Range<usize>) {
        (&self.chunk.payload, self.byte_range())
    }

    /// A read guard on the view's bytes, for kernels reading several arrays at once.
    pub fn read_view(&self) -> ReadView<'_> {
        let range = match self.stype {
            StorageType::Default => Some(self.byte_range()),
            _ => None,
        };
        ReadView { guard: self.chunk.payload.read_recursive(), range }
    }

    /// Hints that this array's memory lock will soon be taken (by [`NDArray::read_view`] or
    /// [`NDArray::write_view`]): loops locking thousands of small arrays overlap the misses.
    #[inline(always)]
    pub fn prefetch_lock(&self) {
        crate::base::prefetch::prefetch_line_for_write(&*self.chunk.payload);
    }

    /// A write guard on the view's bytes, for kernels writing several arrays at once.
    pub fn write_view(&self) -> WriteView<'_> {
        let range = match self.stype {
            StorageType::Default => Some(self.byte_range()),
            _ => None,
        };
        WriteView { guard: self.chunk.payload.write(), range }
    }

    /// Runs `f` on the view's bytes under the chunk's write lock; see [`NDArray::read_bytes`].
    pub fn write_bytes<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut payload = self.chunk.payload.write();
        match self.stype {
            StorageType::Default => {
                let range = self.byte_range();
                f(&mut payload.data.bytes_mut()[range])
            }
            _ => f(payload.data.bytes_mut()),
        }
    }

    /// Bytes of the values held: the dense view, or a sparse array's stored rows.
    pub fn data_byte_len(&self) -> usize {
        match self.stype {
            StorageType::Default => self.size() * self.dtype.size(),
            _ => self.chunk.payload.read_recursive().data.len(),
        }
    }

    /// Start of the view's values, for `MXNDArrayGetData`. Does not wait, as in MXNet.
    pub fn data_ptr(&self) -> *mut u8 {
        let mut payload = self.chunk.payload.write();
        let offset = match self.stype {
            StorageType::Default => self.byte_range().start,
            _ => 0,
        };
        payload.data.as_mut_ptr().wrapping_add(offset)
    }

    /// Blocks until pending writes to this array have finished; reports (and clears) the
    /// failure of an asynchronous op that wrote it.
    pub fn wait_to_read(&self) -> Result<()> {
        engine().wait_to_read(self.var())
    }

    /// Blocks until pending reads and writes of this array have finished; reports (and
    /// clears) the failure of an asynchronous op that wrote it.
    pub fn wait_to_write(&self) -> Result<()> {
        engine().wait_to_write(self.var())
    }

    /// Runs `f` on the `T` kept with this array's memory: made by `T::default()` at first use,
    /// dropped with the memory (when its last view goes). What a backend keeps for an array
    /// from one op to the next: a GPU sum's copies of its values beside the merge buffer, a GPU
    /// row_sparse array's spare rows. The ops using it write the array, so the engine runs
    /// them one at a time.
    pub fn kept<T: std::any::Any + Send + Default, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut kept = self.chunk.kept.lock();
        if let Some(t) = kept.iter_mut().find_map(|k| k.downcast_mut::<T>()) {
            return f(t);
        }
        let mut t = Box::new(T::default());
        let r = f(&mut t);
        kept.push(t);
        r
    }

    /// Where the view starts in a GPU's memory, for a dense GPU array (`None` for sparse
    /// arrays: their values are not the view's elements; see [`NDArray::values_device_ptr`]).
    pub fn device_ptr(&self) -> Option<crate::gpu::DevicePtr> {
        if self.stype != StorageType::Default {
            return None;
        }
        self.chunk.dense_device.map(|p| p.offset(self.byte_range().start))
    }

    /// Where the values held start in a GPU's memory (a dense view, or a sparse array's
    /// stored values), for a GPU array.
    pub fn values_device_ptr(&self) -> Option<crate::gpu::DevicePtr> {
        match self.stype {
            StorageType::Default => self.device_ptr(),
            _ => self.chunk.payload.read_recursive().data.device_ptr(),
        }
    }

    /// Where a GPU copy reads or writes the view: its device memory or its pinned host
    /// memory; `None` for pageable host memory (staged through the pinned pool). Dense only.
    pub fn copy_place(&self) -> Option<crate::gpu::Place> {
        if self.stype != StorageType::Default {
            return None;
        }
        if let Some(device) = self.device_ptr() {
            return Some(crate::gpu::Place::Device(device));
        }
        let start = self.byte_range().start;
        match &self.chunk.payload.read_recursive().data {
            Memory::Pinned(p) => Some(crate::gpu::Place::Host(p.at(start))),
            Memory::Device(_) | Memory::Host(_) | Memory::Foreign(_) => None,
        }
    }

    /// A dense array like this one in pinned staging memory (`cpu_pinned(0)`, from the pool):
    /// the host side of a GPU array's staged work.
    pub fn staging_mirror(&self) -> Result<NDArray> {
        let payload = Payload {
            data: Memory::staging(self.size() * self.dtype.size())?,
            storage_shape: self.shape.to_vec(),
            aux: Vec::new(),
        };
        Ok(NDArray::from_payload(payload, &self.shape, Context::cpu_pinned(0), self.dtype, StorageType::Default))
    }

    /// This array, or for a GPU array a host copy of its values (after pending writes), for
    /// host code that reads values.
    pub fn readable_on_host(&self) -> Result<NDArray> {
        if !self.on_device() {
            return Ok(self.clone());
        }
        let copy = NDArray::zeros(&self.shape, Context::cpu(0), self.dtype)?;
        copy.write_bytes(|b| self.copy_to_host(b))?;
        Ok(copy)
    }

    /// A new dense array on `ctx` holding `bytes` (uploaded, for a GPU context). No op may
    /// know the array yet: it is written directly.
    pub fn with_bytes(shape: &[usize], ctx: Context, dtype: DType, bytes: &[u8]) -> Result<NDArray> {
        let expected = checked_size(shape)? * dtype.size();
        crate::ensure!(bytes.len() == expected, "{} bytes for an array of {expected} bytes (internal error)", bytes.len());
        if ctx.dev_type != DeviceType::Gpu && !(ctx.dev_type == DeviceType::CpuPinned && crate::gpu::pinned_memory_available()) {
            // Ordinary host memory: written once, by the copy.
            let payload = Payload { data: Memory::Host(crate::base::buffer::Buffer::copied(bytes)?), storage_shape: shape.to_vec(), aux: Vec::new() };
            return Ok(NDArray::from_payload(payload, shape, ctx, dtype, StorageType::Default));
        }
        let out = NDArray::zeros(shape, ctx, dtype)?;
        match out.device_ptr() {
            Some(dst) => crate::gpu::transfer::upload(dst, bytes).map_err(crate::Error::new)?,
            None => out.write_bytes(|d| d.copy_from_slice(bytes)),
        }
        Ok(out)
    }

    /// Whether this is a dense array whose values live in a GPU's memory: what the GPU
    /// backend copies with the driver and stages through dense pinned mirrors. Sparse arrays
    /// on a GPU context hold their values and aux arrays in the GPU's memory too, but their
    /// size changes with their rows: host code reads and replaces them through
    /// [`NDArray::rows_now`] and [`NDArray::set_rows_now`], which download and upload.
    pub fn on_device(&self) -> bool {
        self.ctx.dev_type == DeviceType::Gpu && self.stype == StorageType::Default
    }

    /// Copies host bytes (the array's dtype, `data_byte_len` long) in, after pending ops.
    pub fn copy_from_host(&self, bytes: &[u8]) -> Result<()> {
        engine().run_sync(&[], &[self.var()], || {
            let len = self.data_byte_len();
            crate::ensure!(len == bytes.len(), "memory size mismatch: the array holds {len} bytes, {} given", bytes.len());
            if let Some(dst) = self.values_device_ptr() {
                return crate::gpu::transfer::upload(dst, bytes).map_err(crate::Error::new);
            }
            self.write_bytes(|dst| dst.copy_from_slice(bytes));
            Ok(())
        })?
    }

    /// Copies the values out to host bytes, after pending writes.
    pub fn copy_to_host(&self, out: &mut [u8]) -> Result<()> {
        engine().run_sync(&[self.var()], &[], || {
            let len = self.data_byte_len();
            crate::ensure!(len == out.len(), "memory size mismatch: the array holds {len} bytes, {} requested", out.len());
            if let Some(src) = self.values_device_ptr() {
                return crate::gpu::transfer::download(out, src).map_err(crate::Error::new);
            }
            self.read_bytes(|src| out.copy_from_slice(src));
            Ok(())
        })?
    }

    /// A view of rows `begin..end` of the first dimension (MXNet's `Slice`).
    pub fn slice(&self, begin: usize, end: usize) -> Result<NDArray> {
        self.require_dense("slice")?;
        crate::ensure!(!self.shape.is_empty(), "cannot slice a 0-d array");
        crate::ensure!(
            begin < end && end <= self.shape[0],
            "slice [{begin},{end}) is out of range for shape {}",
            shape_string(&self.shape)
        );
        let row: usize = self.shape[1..].iter().product();
        let mut view = self.clone();
        let mut shape = self.shape.to_vec();
        shape[0] = end - begin;
        view.shape = shape.into();
        view.offset += begin * row;
        Ok(view)
    }

    /// A view of row `idx` with the first dimension removed (MXNet's `At`).
    pub fn at(&self, idx: usize) -> Result<NDArray> {
        let mut view = self.slice(idx, idx + 1)?;
        if view.shape.len() > 1 {
            view.shape = view.shape[1..].into();
        }
        Ok(view)
    }

    /// A view with another shape of the same size (MXNet's `Reshape`).
    pub fn reshape(&self, shape: &[usize]) -> Result<NDArray> {
        self.require_dense("reshape")?;
        let size = checked_size(shape)?;
        crate::ensure!(
            size == self.size(),
            "cannot reshape {} to {}: sizes differ",
            shape_string(&self.shape),
            shape_string(shape)
        );
        let mut view = self.clone();
        view.shape = shape.into();
        Ok(view)
    }

    pub(crate) fn require_dense(&self, what: &str) -> Result<()> {
        crate::ensure!(
            self.stype == StorageType::Default,
            "{what} needs a dense array, this one is {}",
            self.stype.name()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_with_an_array_is_shared_by_its_views_made_once_and_dropped_with_its_memory() {
        struct Counted(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        #[derive(Default)]
        struct Kept(Vec<Counted>);
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = NDArray::zeros(&[4], Context::cpu(0), DType::Float32).unwrap();
        let view = a.slice(0, 2).unwrap();
        let made = |k: &mut Kept| {
            k.0.push(Counted(Arc::clone(&dropped)));
            k.0.len()
        };
        assert_eq!(a.kept(made), 1);
        // Views share the memory, and so what is kept with it; other types have their own.
        assert_eq!(view.kept(|k: &mut Kept| k.0.len()), 1);
        assert_eq!(view.kept(|n: &mut usize| std::mem::replace(n, 7)), 0);
        assert_eq!(a.kept(|n: &mut usize| *n), 7);
        let other = NDArray::zeros(&[4], Context::cpu(0), DType::Float32).unwrap();
        assert_eq!(other.kept(|k: &mut Kept| k.0.len()), 0);
        drop(a);
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 0, "a view still holds the memory");
        drop(view);
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    fn f32_array(values: &[f32], shape: &[usize]) -> NDArray {
        let a = NDArray::zeros(shape, Context::cpu(0), DType::Float32).unwrap();
        a.copy_from_host(bytemuck::cast_slice(values)).unwrap();
        a
    }

    fn read_f32(a: &NDArray) -> Vec<f32> {
        let mut out = vec![0f32; a.size()];
        a.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
        out
    }

    #[test]
    fn views_share_memory_with_their_parent() {
        let a = f32_array(&[0., 1., 2., 3., 4., 5.], &[3, 2]);
        let row = a.at(1).unwrap();
        assert_eq!(row.shape(), &[2]);
        assert_eq!(read_f32(&row), vec![2., 3.]);
        row.copy_from_host(bytemuck::cast_slice(&[9f32, 8.])).unwrap();
        assert_eq!(read_f32(&a), vec![0., 1., 9., 8., 4., 5.]);
        let flat = a.reshape(&[6]).unwrap();
        assert_eq!(read_f32(&flat.slice(4, 6).unwrap()), vec![4., 5.]);
        assert!(a.slice(2, 4).is_err());
        assert!(a.reshape(&[4]).is_err());
    }

    #[test]
    fn host_copies_check_sizes() {
        let a = NDArray::zeros(&[2, 2], Context::cpu(0), DType::Float64).unwrap();
        assert!(a.copy_from_host(&[0u8; 8]).is_err());
        assert!(a.copy_from_host(&[0u8; 32]).is_ok());
        assert!(checked_size(&[1 << 20, 1 << 20]).is_err());
    }
}
