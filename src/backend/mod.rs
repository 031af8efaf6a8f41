//! The execution seam. The store plans: which keys, which values, in which association order,
//! into which destinations, batched how. A backend executes: it orders each plan on the engine
//! and picks the kernels that sum, copy, cast, compress and handle sparse rows. There is one
//! backend per kind of context (host memory, for `cpu`, `cpu_pinned` and `cpu_shared`; CUDA
//! GPUs, for `gpu(i)`), each an implementation of [`Backend`]; the store asks [`for_context`]
//! and never knows which one runs.
//!
//! A backend's ops run after the call that scheduled them has returned. A failure (a kernel's
//! error or panic, an allocation that fails, later a CUDA error) is returned from the op, and
//! the engine keeps it on the arrays the op writes until a wait reports it. Work that finishes
//! later on another thread or device completes through the engine's `push_async`.
//!
//! Which backend runs a job: that of its destination's context (for a copy to several
//! outputs, the first output's; the store keeps a batch to one backend). That choice is made
//! here, above the backends, which know nothing of each other: a job for a host context that
//! touches a GPU's memory (a `local` store's GPU values, a pull into GPU outputs) goes to the
//! GPU backend ([`HostContexts`]), and the GPU backend runs what it stages through host memory
//! on the host backend it is handed ([`GPU`]).
//!
//! Code that works on host bytes rather than arrays (a distributed store's worker and server,
//! on what they send and receive) runs its kernels on the calling thread through the same
//! seam: [`Backend::byte_kernels`], the [`ByteKernels`] of its context's backend.

mod bytes;
pub(crate) mod gpu;
pub(crate) mod host;

use crate::engine::{Detach, Ticket};
use crate::error::Result;
use crate::ndarray::{Context, DeviceType, NDArray};
use std::ops::Range;
use std::sync::Arc;

pub use bytes::ByteKernels;
pub use crate::compression::{CompressionType, GradientCompression};
pub use crate::reduce::SumOrder;
/// A `device` store's merge-buffer placement (MXNet's `CommDevice::InitMergeBuffer`).
pub use crate::gpu::placement::MergePlacement;

/// `dst = Σ values[values]` for one key; the values are shared by all sums of a call.
pub struct SumJob {
    /// The key's values in the call's shared vector.
    pub values: Range<usize>,
    /// Where the sum goes: the stored value, or the buffer handed to an updater.
    pub dst: NDArray,
    /// Outputs a pull may hand to this sum before it starts (see [`PullTail`]).
    pub tail: Option<Arc<PullTail>>,
}

/// Host sums smaller than this leave no pull joining them (see [`BackendKind::joins_pull`]).
const HOST_JOIN_MIN_BYTES: usize = 1 << 20;

/// The outputs of a pull queued right behind a sum that has not started, handed to the sum's
/// op (see `Engine::try_extend`): it writes them with the sum, in one pass over memory. Dense,
/// of the sum's dtype and size, in host memory, distinct.
#[derive(Default)]
pub struct PullTail(parking_lot::Mutex<Vec<NDArray>>);

impl PullTail {
    /// Adds outputs (while the sum's op cannot start).
    pub fn hand(&self, outs: impl IntoIterator<Item = NDArray>) {
        self.0.lock().extend(outs);
    }

    /// Takes the outputs handed so far.
    pub fn take(&self) -> Vec<NDArray> {
        std::mem::take(&mut *self.0.lock())
    }

    /// What takes `outs` (handed before) back while the sum's op cannot start, as work that
    /// copies `src` (the sum) into them once it may (a host's engine runs the ops, and let the
    /// op start before it let the outputs be written: `crate::engine::Detach`).
    pub fn take_back(self: &Arc<Self>, src: &NDArray, outs: Vec<NDArray>) -> Detach {
        let (tail, src) = (Arc::clone(self), src.clone());
        Box::new(move || {
            tail.0.lock().retain(|o| !outs.iter().any(|t| t.same_chunk(o)));
            Box::new(move || host::copy_now(&src, &outs))
        })
    }
}

/// `dst = Σ dequantize(quantize(values[i], residuals[i]))` for one key (float32).
pub struct CompressedSumJob {
    /// The key's values.
    pub values: Vec<NDArray>,
    /// One residual per value, updated by the quantisation.
    pub residuals: Vec<NDArray>,
    /// Where the sum goes.
    pub dst: NDArray,
    /// The compression's parameters.
    pub compression: GradientCompression,
}

/// `outs[i] = src` for each `i` in `dsts`; the outputs are shared by all copies of a call.
pub struct CopyJob {
    /// The stored value.
    pub src: NDArray,
    /// The key's outputs in the call's shared vector.
    pub dsts: Range<usize>,
}

/// `out = the rows row_ids of stored` (row ids of any dtype and shape; the output's rows are
/// their sorted unique values, absent rows zero).
pub struct RowSparsePull {
    /// The stored row_sparse value.
    pub stored: NDArray,
    /// The row_sparse output.
    pub out: NDArray,
    /// The wanted row ids.
    pub row_ids: NDArray,
}

/// One context kind's execution. Every method checks nothing (the store has) and returns once
/// the work is scheduled; failures surface at the next wait on the written arrays.
pub trait Backend: Sync {
    /// The context kind's name, for messages.
    fn name(&self) -> &'static str;

    /// Sums a batch of keys (`bytes` moved in all). Returns the op's ticket where the backend
    /// writes the jobs' [`PullTail`]s.
    fn sum(&self, order: SumOrder, values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, bytes: usize, priority: i32) -> Option<Ticket>;

    /// Compressed sums of a batch of keys (`bytes` moved in all).
    fn compressed_sum(&self, batch: Vec<CompressedSumJob>, bytes: usize, priority: i32);

    /// Copies a batch of keys into their outputs (`bytes` moved in all).
    fn copy(&self, outs: &Arc<Vec<NDArray>>, batch: Vec<CopyJob>, bytes: usize, priority: i32);

    /// A row_sparse pull of one key.
    fn row_sparse_pull(&self, pull: RowSparsePull, priority: i32);

    /// `dst = src` across storage types and dtypes (same shape), as MXNet's `CopyFromTo`.
    fn copy_any(&self, src: &NDArray, dst: &NDArray, priority: i32);

    /// `dst = src` (dense, same shape) on the calling thread, after pending ops on both.
    fn copy_sync(&self, src: &NDArray, dst: &NDArray) -> Result<()>;

    /// The kernels over host bytes that code working on host copies of this backend's values
    /// runs (a distributed store's wire bytes). Every backend's are the host's for now: a
    /// backend whose memory is not host memory stages its values to host first
    /// ([`host_readable`]).
    fn byte_kernels(&self) -> &'static dyn ByteKernels;
}

/// The one GPU backend; what it stages through host memory runs on the host backend.
static GPU: gpu::Gpu = gpu::Gpu::new(&host::HOST);

/// Jobs whose destination is in host memory: the host backend's, unless one of their arrays
/// lives in a GPU's memory (dense or row_sparse), then the GPU backend's.
struct HostContexts;

/// The backend running a host-context job reading or writing `arrays`.
fn host_or_gpu<'a>(arrays: impl Iterator<Item = &'a NDArray>) -> &'static dyn Backend {
    if gpu::touches_device(arrays) {
        &GPU
    } else {
        &host::HOST
    }
}

impl Backend for HostContexts {
    fn name(&self) -> &'static str {
        host::HOST.name()
    }

    fn sum(&self, order: SumOrder, values: &Arc<Vec<NDArray>>, batch: Vec<SumJob>, bytes: usize, priority: i32) -> Option<Ticket> {
        let backend = host_or_gpu(batch.iter().flat_map(|j| values[j.values.clone()].iter().chain(std::iter::once(&j.dst))));
        backend.sum(order, values, batch, bytes, priority)
    }

    fn compressed_sum(&self, batch: Vec<CompressedSumJob>, bytes: usize, priority: i32) {
        let backend = host_or_gpu(batch.iter().flat_map(|j| j.values.iter().chain(&j.residuals).chain(std::iter::once(&j.dst))));
        backend.compressed_sum(batch, bytes, priority)
    }

    fn copy(&self, outs: &Arc<Vec<NDArray>>, batch: Vec<CopyJob>, bytes: usize, priority: i32) {
        let backend = host_or_gpu(batch.iter().flat_map(|j| outs[j.dsts.clone()].iter().chain(std::iter::once(&j.src))));
        backend.copy(outs, batch, bytes, priority)
    }

    fn row_sparse_pull(&self, pull: RowSparsePull, priority: i32) {
        host_or_gpu([&pull.stored, &pull.out, &pull.row_ids].into_iter()).row_sparse_pull(pull, priority)
    }

    fn copy_any(&self, src: &NDArray, dst: &NDArray, priority: i32) {
        host_or_gpu([src, dst].into_iter()).copy_any(src, dst, priority)
    }

    fn copy_sync(&self, src: &NDArray, dst: &NDArray) -> Result<()> {
        host_or_gpu([src, dst].into_iter()).copy_sync(src, dst)
    }

    fn byte_kernels(&self) -> &'static dyn ByteKernels {
        host::HOST.byte_kernels()
    }
}

/// The kinds of backend, for keeping a batch to one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// Host memory: `cpu`, `cpu_pinned`, `cpu_shared`.
    Host,
    /// GPU memory: `gpu(i)`.
    Gpu,
}

impl BackendKind {
    /// Whether a pull of a key of `bytes` joins its push's sum ([`PullTail`]). On the host, a
    /// big key (small ones' copies run batched with other keys', where the stored value is
    /// still in cache). On a GPU, a key too big for the fused copy launch (small ones' copies
    /// cost less batched in that launch than handed to each sum), and only under the native
    /// engine (a host's engine would run a detached copy on the host).
    pub fn joins_pull(self, bytes: usize) -> bool {
        match self {
            BackendKind::Host => bytes >= HOST_JOIN_MIN_BYTES,
            BackendKind::Gpu => bytes > gpu::FUSED_COPY_MAX_BYTES && !crate::engine::engine().hosted(),
        }
    }

    /// The kind running jobs whose destination is on `ctx`. (A host-context job reading GPU
    /// arrays goes to the GPU backend too: [`HostContexts`].)
    pub fn of(ctx: Context) -> BackendKind {
        match ctx.dev_type {
            DeviceType::Cpu | DeviceType::CpuPinned | DeviceType::CpuShared => BackendKind::Host,
            DeviceType::Gpu => BackendKind::Gpu,
        }
    }

    /// The backend of this kind.
    pub fn backend(self) -> &'static dyn Backend {
        match self {
            BackendKind::Host => &HostContexts,
            BackendKind::Gpu => &GPU,
        }
    }
}

/// The number of usable GPUs, or why there is none (for stores that need GPUs: `nccl`).
pub fn require_gpus() -> Result<i32> {
    crate::gpu::require_some_device()
}

/// `arrays` as host code can read them: GPU arrays replaced by pinned copies scheduled now.
pub fn host_readable(arrays: Vec<NDArray>, priority: i32) -> Result<Vec<NDArray>> {
    gpu::host_readable(arrays, priority)
}

/// The backend for jobs whose destination is on `ctx`.
pub fn for_context(ctx: Context) -> &'static dyn Backend {
    BackendKind::of(ctx).backend()
}
