//! The hosted store: libkvstore's store semantics (validation, per-store-type sum order) on
//! the host's NDArray handles. Each data operation is ops in the host's engine: `_copyto`
//! stages a host array into store-owned memory (only the host understands its layouts), one
//! `MXEnginePushSyncND` op sums the staged copies with libkvstore's kernels (declaring the
//! copies as read and the destination as written), and `_copyto` writes pulled values back.
//! So a push returns at once and runs after the ops producing its values; the host's later
//! writes of a pushed array wait for its staging copy; the host's readers of a pulled array
//! wait for the pull.

use super::dist::HostedDist;
use super::dlpack::HostArray;
use super::key::Key;
use super::key::drop_source_for_test;
use super::async_op::{push_async, Property};
use super::host::{check_row_sparse_pull, describe, Described, Host, DENSE, ROW_SPARSE};
use crate::compression::GradientCompression;
use crate::ffi::{MXKVStoreStrUpdater, MXKVStoreUpdater, NDArrayHandle};
use crate::reduce::SumOrder;
use crate::{DType, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

/// A row_sparse host array the store holds (its layout is the host's: only host operators
/// touch it).
struct SparseArray(NDArrayHandle);

// SAFETY: a host handle; the host's engine orders its users and the store serialises its own.
unsafe impl Send for SparseArray {}

/// A key's value: dense in store-owned memory, or row_sparse in a host array (MXNet keeps a
/// key's storage type from its init, and a push without updater can change it).
enum Stored {
    Dense(HostArray),
    Sparse(SparseArray),
}

impl Stored {
    fn handle(&self) -> NDArrayHandle {
        match self {
            Stored::Dense(a) => a.handle,
            Stored::Sparse(a) => a.0,
        }
    }

    fn stype(&self) -> c_int {
        match self {
            Stored::Dense(_) => DENSE,
            Stored::Sparse(_) => ROW_SPARSE,
        }
    }

    fn free(self, host: &Host) {
        match self {
            Stored::Dense(a) => a.free(host),
            Stored::Sparse(a) => host.release(a.0),
        }
    }
}

struct Entry {
    dtype: DType,
    shape: Vec<i64>,
    stored: Stored,
    /// The sum handed to the updater (created on the first push with an updater).
    merged: Option<HostArray>,
    /// Store-owned copies of the pushed values, one per source position.
    stages: Vec<HostArray>,
    /// The sum of row_sparse pushes (MXNet's sparse merge buffer), created on the first.
    sparse_merged: Option<SparseArray>,
    /// Row_sparse copies of the pushed row_sparse values, one per source position.
    sparse_copies: Vec<SparseArray>,
    /// Gradient-compression residuals, one per source position (zero until first used).
    residuals: Vec<HostArray>,
}

impl Entry {
    fn free(self, host: &Host) {
        self.stored.free(host);
        for a in self.merged.into_iter().chain(self.stages).chain(self.residuals) {
            a.free(host);
        }
        for a in self.sparse_merged.into_iter().chain(self.sparse_copies) {
            host.release(a.0);
        }
    }
}

/// The frontend's updaters, each with its own user pointer (MXNet's `SetUpdater` replaces
/// only the int one; `SetUpdaterEx` sets both).
#[derive(Clone, Copy, Default)]
struct Updaters {
    int: Option<(IntUpdater, usize)>,
    string: Option<(StrUpdater, usize)>,
}

type IntUpdater = unsafe extern "C" fn(c_int, NDArrayHandle, NDArrayHandle, *mut c_void);
type StrUpdater = unsafe extern "C" fn(*const c_char, NDArrayHandle, NDArrayHandle, *mut c_void);

/// The updater call one push makes, chosen as MXNet's local store does: only when an int
/// updater is set; string keys go to the string updater when there is one, else to the int
/// updater with their internal id.
enum UpdaterCall {
    Int(IntUpdater, usize, c_int),
    Str(StrUpdater, usize, CString),
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    updaters: Updaters,
    /// Whether the store's keys are strings (set by the first init; MXNet refuses mixing).
    string_keys: Option<bool>,
    /// String keys' internal ids, in init order (MXNet's `str_key_dict_`).
    string_ids: HashMap<String, i32>,
    /// The gradient compression set on the store (only `device` stores apply it).
    compression: Option<GradientCompression>,
}

impl State {
    /// Refuses keys of the other type than the store's.
    fn check_key_type(&self, keys: &[Key]) -> Result<()> {
        let Some(first) = keys.first() else { return Ok(()) };
        let passed = matches!(first, Key::Str(_));
        if let Some(stored) = self.string_keys {
            let name = |s: bool| if s { "string" } else { "int" };
            crate::ensure!(
                stored == passed,
                "Mixed key types are not allowed: this store uses {} keys, the call passes {} keys",
                name(stored),
                name(passed)
            );
        }
        Ok(())
    }

    /// The int a key is ordered and (for the int updater) named by.
    fn id(&self, key: &Key) -> i32 {
        match key {
            Key::Int(k) => *k,
            Key::Str(s) => self.string_ids.get(s).copied().unwrap_or(i32::MAX),
        }
    }

    fn updater_call(&self, key: &Key) -> Option<UpdaterCall> {
        let (int, user) = self.updaters.int?;
        Some(match (key, self.updaters.string) {
            // Keys were checked free of NUL bytes when they came in.
            (Key::Str(name), Some((f, u))) => UpdaterCall::Str(f, u, CString::new(name.as_str()).unwrap_or_default()),
            _ => UpdaterCall::Int(int, user, self.id(key)),
        })
    }
}

pub(super) struct HostedStore {
    pub type_name: CString,
    order: SumOrder,
    /// Whether pushes apply the gradient compression set (MXNet's CommDevice does, its
    /// CommCPU ignores it).
    compresses: bool,
    state: Mutex<State>,
    /// A distributed store's MPI part: every data call goes to it.
    pub dist: Option<HostedDist>,
}


fn shape_text(shape: &[i64]) -> String {
    format!(
        "({})",
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

fn check_shape(key: &Key, entry: &Entry, value: &Described, what: &str) -> Result<()> {
    crate::ensure!(
        value.shape == entry.shape,
        "shape mismatch for key {key}: the stored value has shape {}, the {what} {}",
        shape_text(&entry.shape),
        shape_text(&value.shape)
    );
    Ok(())
}

/// MXNet's local store takes dense and row_sparse values only.
fn check_push_stype(value: &Described) -> Result<()> {
    crate::ensure!(
        value.stype == DENSE || value.stype == ROW_SPARSE,
        "Unexpected storage type detected during kvstore push: {}",
        value.stype
    );
    Ok(())
}

fn check_matches(key: &Key, entry: &Entry, value: &Described, what: &str) -> Result<()> {
    check_shape(key, entry, value, what)?;
    crate::ensure!(
        value.dtype == entry.dtype,
        "dtype mismatch for key {key}: the stored value is {}, the {what} {}",
        entry.dtype.name(),
        value.dtype.name()
    );
    Ok(())
}

/// As libkvstore's own store: a compressed push takes dense float32 values only (MXNet's
/// kernels read float32).
fn check_compressible(key: &Key, entry: &Entry, value: &Described) -> Result<()> {
    crate::ensure!(value.stype == DENSE, "gradient compression does not support row_sparse values (key {key})");
    crate::ensure!(
        entry.dtype == DType::Float32,
        "Gradient compression is only supported for float32 type of parameters (key {key} is {})",
        entry.dtype.name()
    );
    Ok(())
}

/// Groups `values` by key, keys in the order of their ids (MXNet's local store sorts them;
/// the updater calls follow that order), values in the order given.
fn group(state: &State, keys: Vec<Key>, values: &[NDArrayHandle]) -> Vec<(Key, Vec<NDArrayHandle>)> {
    let mut groups: Vec<(Key, Vec<NDArrayHandle>)> = Vec::new();
    for (k, v) in keys.into_iter().zip(values) {
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, vs)) => vs.push(*v),
            None => groups.push((k, vec![*v])),
        }
    }
    groups.sort_by_key(|(k, _)| state.id(k));
    groups
}

/// One key's push of row_sparse values, all with host operators (no non-blocking C API
/// reaches a row_sparse array's row indices), as MXNet's CommCPU does it: one value is copied
/// into the sparse merge buffer; several are copied into row_sparse copy buffers and summed
/// there with `add_n` (MXNet's `ElementwiseSum`; the rows of the sum are the sorted union).
/// Then the updater gets the sum, or (no updater) the stored value becomes a copy of it,
/// row_sparse even where it was dense. Returns the updater call to make, if any.
fn push_sparse(
    host: &Host,
    entry: &mut Entry,
    updaters: Option<UpdaterCall>,
    values: &[NDArrayHandle],
) -> Result<Option<(UpdaterCall, NDArrayHandle, NDArrayHandle)>> {
    let new = || host.new_row_sparse(entry.dtype as c_int, &entry.shape).map(SparseArray);
    if entry.sparse_merged.is_none() {
        entry.sparse_merged = Some(new()?);
    }
    if values.len() > 1 {
        while entry.sparse_copies.len() < values.len() {
            let copy = new()?;
            entry.sparse_copies.push(copy);
        }
    }
    let merged = entry.sparse_merged.as_ref().map(|m| m.0).unwrap_or(std::ptr::null_mut());
    if let [value] = values {
        host.copy(*value, merged)?;
    } else {
        let used = if drop_source_for_test() { values.len() - 1 } else { values.len() };
        let copies: Vec<NDArrayHandle> = entry.sparse_copies[..values.len()].iter().map(|c| c.0).collect();
        for (v, c) in values.iter().zip(&copies) {
            host.copy(*v, *c)?;
        }
        let n = CString::new(used.to_string()).unwrap_or_default();
        host.invoke(host.add_n, "add_n", &copies[..used], merged, &[(c"num_args", n.as_c_str())])?;
    }
    match updaters {
        Some(u) => {
            let recv = host.shallow_copy(merged)?;
            let local = host.shallow_copy(entry.stored.handle())?;
            Ok(Some((u, recv, local)))
        }
        None => {
            if entry.stored.stype() != ROW_SPARSE {
                let stored = SparseArray(host.new_row_sparse(entry.dtype as c_int, &entry.shape)?);
                std::mem::replace(&mut entry.stored, Stored::Sparse(stored)).free(host);
            }
            host.copy(merged, entry.stored.handle())?;
            Ok(None)
        }
    }
}

/// The sorted, unique row ids of a dense id array of any shape and dtype, cast to int64 as
/// MXNet's `Unique` does (a C cast: floats truncate). Reading them waits for their writers:
/// MXNet reads them in an engine op instead, but no non-blocking C API gives them to us.
fn unique_row_ids(host: &Host, ids: NDArrayHandle, d: &Described) -> Result<Vec<i64>> {
    let n = usize::try_from(d.shape.iter().product::<i64>()).unwrap_or(0);
    let raw = host.read(ids, n * d.dtype.size(), n)?;
    let mut out: Vec<i64> = match d.dtype {
        DType::Float32 => raw.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as i64).collect(),
        DType::Float64 => raw.chunks_exact(8).map(|b| f64::from_ne_bytes(b.try_into().unwrap_or([0; 8])) as i64).collect(),
        DType::Float16 => raw.chunks_exact(2).map(|b| half::f16::from_ne_bytes([b[0], b[1]]).to_f32() as i64).collect(),
        DType::Uint8 => raw.iter().map(|&b| b as i64).collect(),
        DType::Int8 => raw.iter().map(|&b| b as i8 as i64).collect(),
        DType::Int32 => raw.chunks_exact(4).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as i64).collect(),
        DType::Int64 => raw.chunks_exact(8).map(|b| i64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))).collect(),
        other => crate::bail!("row ids of dtype {} are not supported by the hosted store yet", other.name()),
    };
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The parameter of one sum op in the host's engine.
struct SumJob {
    dtype: DType,
    order: SumOrder,
    dst: (*mut u8, usize),
    srcs: Vec<(*const u8, usize)>,
    /// A compressed sum (float32 only): each source goes through 2bit/1bit with its residual.
    compressed: Option<Compressed>,
}

/// A compressed sum's residuals (one per source) and working space, allocated when the push
/// is queued so that the op itself cannot fail.
struct Compressed {
    compression: GradientCompression,
    residuals: Vec<(*mut u8, usize)>,
    packed: Vec<u8>,
    scratch: Vec<f32>,
}

/// A zeroed vector of `n` elements, or an error where the memory is not there.
fn zeroed<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| crate::Error::out_of_memory(what))?;
    v.resize(n, T::default());
    Ok(v)
}

/// `len` bytes at `ptr` as float32s (store-owned buffers are 64-byte aligned).
///
/// # Safety
/// `ptr` points to `len` bytes that nothing else touches while the slice lives.
unsafe fn floats<'a>(ptr: *mut u8, len: usize) -> &'a mut [f32] {
    // SAFETY: as the caller promises; the buffers are aligned for every element type.
    unsafe { std::slice::from_raw_parts_mut(ptr as *mut f32, len / 4) }
}

// SAFETY: the pointers are into store-owned arrays that the host op running the job declares
// (sources read; destination and residuals written) and that the store frees only after
// waiting for that op.
unsafe impl Send for SumJob {}

impl SumJob {
    /// Runs the sum on a host engine thread, once the staged copies are written and every
    /// earlier user of the destination is done.
    fn run(&mut self) -> Result<()> {
        super::key::fail_sum_for_test()?;
        match &mut self.compressed {
            None => {
                // SAFETY: as for `Send`: no other op touches these arrays now; the sources
                // are distinct store-owned buffers from the destination.
                let dst = unsafe { std::slice::from_raw_parts_mut(self.dst.0, self.dst.1) };
                let srcs: Vec<&[u8]> = self.srcs.iter().map(|&(p, n)| unsafe { std::slice::from_raw_parts(p, n) }).collect();
                crate::reduce::sum_into(self.dtype, self.order, dst, &srcs, 1);
            }
            Some(c) => {
                // SAFETY: as above; float32 buffers (checked at the push), all distinct.
                let out = unsafe { floats(self.dst.0, self.dst.1) };
                let srcs: Vec<&[f32]> = self.srcs.iter().map(|&(p, n)| &*unsafe { floats(p as *mut u8, n) }).collect();
                let mut residuals: Vec<&mut [f32]> = c.residuals.iter().map(|&(p, n)| unsafe { floats(p, n) }).collect();
                c.compression.reduce(&srcs, &mut residuals, out, &mut c.packed, &mut c.scratch);
            }
        }
        Ok(())
    }
}

impl HostedStore {
    pub fn new(name: &str) -> Result<HostedStore> {
        let lower = name.to_ascii_lowercase();
        crate::ensure!(
            !lower.contains("nccl") && !lower.contains("horovod") && !lower.contains("byteps"),
            "store type {name}: hosted mode serves `local`, `device` and the `dist` stores; GPU stores are later work"
        );
        let dist = match crate::store::dist::dist_mode(&lower) {
            Some(_) => Some(HostedDist::new(&lower)?),
            None => None,
        };
        let compresses = lower.contains("device");
        let order = if compresses {
            SumOrder::Serial
        } else {
            SumOrder::CpuComm
        };
        Ok(HostedStore {
            // MXNet reports the lower-cased name.
            type_name: CString::new(lower).map_err(|_| crate::Error::new("store type with NUL"))?,
            order,
            compresses,
            state: Mutex::new(State::default()),
            dist,
        })
    }

    pub fn init(&self, host: &Host, keys: Vec<Key>, values: &[NDArrayHandle]) -> Result<()> {
        let mut state = self.state.lock();
        state.check_key_type(&keys)?;
        if let Some(d) = &self.dist {
            if let Some(first) = keys.first() {
                state.string_keys = Some(matches!(first, Key::Str(_)));
            }
            drop(state);
            return d.init(host, keys, values);
        }
        let mut planned = Vec::with_capacity(keys.len());
        for (k, v) in keys.into_iter().zip(values) {
            crate::ensure!(
                !state.entries.contains_key(&k)
                    && !planned.iter().any(|(p, _, _): &(Key, _, _)| *p == k),
                "key {k} has already been inited"
            );
            let d = describe(host, *v)?;
            crate::ensure!(
                d.stype == DENSE || d.stype == ROW_SPARSE,
                "key {k}: the hosted store keeps dense and row_sparse values, not storage type {}",
                d.stype
            );
            planned.push((k, *v, d));
        }
        let mut made = Vec::with_capacity(planned.len());
        for (k, v, d) in planned {
            let stored = if d.stype == DENSE {
                Stored::Dense(HostArray::new(host, d.dtype, &d.shape)?)
            } else {
                Stored::Sparse(SparseArray(host.new_row_sparse(d.dtype as c_int, &d.shape)?))
            };
            made.push((k, v, d, stored));
        }
        if let Some(first) = made.first() {
            state.string_keys = Some(matches!(first.0, Key::Str(_)));
        }
        for (k, v, d, stored) in made {
            if let Key::Str(name) = &k {
                let id = state.string_ids.len() as i32;
                state.string_ids.insert(name.clone(), id);
            }
            host.copy(v, stored.handle())?;
            state.entries.insert(
                k,
                Entry {
                    dtype: d.dtype,
                    shape: d.shape,
                    stored,
                    merged: None,
                    stages: Vec::new(),
                    sparse_merged: None,
                    sparse_copies: Vec::new(),
                    residuals: Vec::new(),
                },
            );
        }
        Ok(())
    }

    /// `PushPull` is a push, then a pull: a distributed store first refuses what its pull
    /// would (row_sparse keys), and what MXNet's dist workers refuse once gradient compression
    /// is set (their push-and-pull message has no compressed form), so a refused call pushes
    /// nothing.
    pub fn check_push_pull(&self, host: &Host, vkeys: &[Key], values: &[NDArrayHandle], okeys: &[Key], outs: &[NDArrayHandle]) -> Result<()> {
        match &self.dist {
            Some(d) => {
                crate::ensure!(self.state.lock().compression.is_none(), "Compression not supported with PushPull");
                d.check_push_pull(host, vkeys, values, okeys, outs)
            }
            None => Ok(()),
        }
    }

    pub fn push(
        &self,
        host: &Host,
        keys: Vec<Key>,
        values: &[NDArrayHandle],
        priority: c_int,
    ) -> Result<()> {
        if let Some(d) = &self.dist {
            self.state.lock().check_key_type(&keys)?;
            return d.push(host, keys, values, priority);
        }
        let (groups, compression) = {
            let state = self.state.lock();
            state.check_key_type(&keys)?;
            let compression = state.compression.filter(|_| self.compresses);
            let groups = group(&state, keys, values);
            for (k, vs) in &groups {
                let entry = state
                    .entries
                    .get(k)
                    .ok_or_else(|| crate::Error::new(format!("key {k} has not been inited")))?;
                for v in vs {
                    let d = describe(host, *v)?;
                    check_push_stype(&d)?;
                    check_matches(k, entry, &d, "pushed value")?;
                    if compression.is_some() {
                        check_compressible(k, entry, &d)?;
                    }
                }
            }
            (groups, compression)
        };
        for (k, vs) in groups {
            let update = self.push_one(host, &k, &vs, compression, priority)?;
            if let Some((call, recv, local)) = update {
                // The updater runs on the calling thread without the store's lock, as MXNet's
                // local store calls it, right after the sum is queued.
                // SAFETY: the callbacks the frontend installed with these signatures; it owns
                // (and frees) the two new handles.
                unsafe {
                    match call {
                        UpdaterCall::Int(f, user, id) => f(id, recv, local, user as *mut c_void),
                        UpdaterCall::Str(f, user, name) => f(name.as_ptr(), recv, local, user as *mut c_void),
                    }
                }
            }
        }
        Ok(())
    }

    /// Stages and sums one key's values; returns the updater call to make, if any.
    fn push_one(
        &self,
        host: &Host,
        key: &Key,
        values: &[NDArrayHandle],
        compression: Option<GradientCompression>,
        priority: c_int,
    ) -> Result<Option<(UpdaterCall, NDArrayHandle, NDArrayHandle)>> {
        let mut state = self.state.lock();
        let updaters = state.updater_call(key);
        let entry = state
            .entries
            .get_mut(key)
            .ok_or_else(|| crate::Error::new(format!("key {key} has not been inited")))?;
        // As MXNet's CommCPU: the first value's storage type picks the sum (the copies of the
        // others into its buffers cast their storage type).
        if describe(host, values[0])?.stype == ROW_SPARSE {
            return push_sparse(host, entry, updaters, values);
        }
        if updaters.is_none() && entry.stored.stype() == ROW_SPARSE {
            // MXNet: a sum of another storage type than the stored value's replaces it by a
            // copy, so a row_sparse key pushed dense values without updater becomes dense.
            let dense = HostArray::new(host, entry.dtype, &entry.shape)?;
            std::mem::replace(&mut entry.stored, Stored::Dense(dense)).free(host);
        }
        let stored_handle = entry.stored.handle();
        // With an updater the sum goes to the merge buffer, so a row_sparse stored value is
        // only handed to the updater.
        let (stored_ptr, stored_len) = match &entry.stored {
            Stored::Dense(a) => (a.ptr, a.len),
            Stored::Sparse(_) => (std::ptr::null_mut(), 0),
        };
        while entry.stages.len() < values.len() {
            entry
                .stages
                .push(HostArray::new(host, entry.dtype, &entry.shape)?);
        }
        // As MXNet's CommDevice: a residual per source position, zero when first used.
        if compression.is_some() {
            while entry.residuals.len() < values.len() {
                entry.residuals.push(HostArray::new(host, entry.dtype, &entry.shape)?);
            }
        }
        for (v, stage) in values.iter().zip(&entry.stages) {
            host.copy(*v, stage.handle)?;
        }
        if updaters.is_some() && entry.merged.is_none() {
            entry.merged = Some(HostArray::new(host, entry.dtype, &entry.shape)?);
        }
        let (dst_handle, dst_ptr, dst_len) = match (&updaters, &entry.merged) {
            (Some(_), Some(m)) => (m.handle, m.ptr, m.len),
            _ => (stored_handle, stored_ptr, stored_len),
        };
        let used = if drop_source_for_test() && values.len() > 1 {
            values.len() - 1
        } else {
            values.len()
        };
        let stages = &entry.stages[..used];
        let compressed = match compression {
            Some(gc) => {
                let n = dst_len / 4;
                Some(Compressed {
                    compression: gc,
                    residuals: entry.residuals[..used].iter().map(|r| (r.ptr, r.len)).collect(),
                    packed: zeroed(gc.packed_bytes(n), "a compressed push's packed buffer")?,
                    scratch: zeroed(n, "a compressed push's dequantised buffer")?,
                })
            }
            None => None,
        };
        let mut writes = vec![dst_handle];
        if compression.is_some() {
            writes.extend(entry.residuals[..used].iter().map(|r| r.handle));
        }
        let job = SumJob {
            dtype: entry.dtype,
            order: self.order,
            dst: (dst_ptr, dst_len),
            srcs: stages.iter().map(|s| (s.ptr as *const u8, s.len)).collect(),
            compressed,
        };
        let reads: Vec<NDArrayHandle> = stages.iter().map(|s| s.handle).collect();
        let mut job = job;
        // A failing or panicking sum fails the host op: the host keeps the failure on the
        // destination (and what is computed from it) and reports it at the next wait.
        push_async(host, &reads, &writes, priority, (c"KVStoreReduce", Property::CpuPrioritized), move |done| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run())) {
                Ok(Ok(())) => done.finish(),
                Ok(Err(e)) => done.fail(&format!("libkvstore's sum failed: {}", e.message())),
                Err(_) => done.fail("libkvstore's sum failed: internal error (panic)"),
            }
        })?;
        match (updaters, &entry.merged) {
            (Some(u), Some(merged)) => {
                let recv = host.shallow_copy(merged.handle)?;
                let local = host.shallow_copy(stored_handle)?;
                Ok(Some((u, recv, local)))
            }
            _ => Ok(None),
        }
    }

    /// `PullRowSparse`: each output becomes the stored rows named by its row ids (sorted,
    /// unique, zeros for rows the store lacks), with the host's `_sparse_retain`.
    pub fn pull_row_sparse(
        &self,
        host: &Host,
        keys: Vec<Key>,
        outs: &[NDArrayHandle],
        row_ids: &[NDArrayHandle],
    ) -> Result<()> {
        if let Some(d) = &self.dist {
            self.state.lock().check_key_type(&keys)?;
            return d.pull_row_sparse(host, keys, outs, row_ids);
        }
        let state = self.state.lock();
        state.check_key_type(&keys)?;
        let mut planned = Vec::with_capacity(outs.len());
        for ((k, o), r) in keys.iter().zip(outs).zip(row_ids) {
            let out = describe(host, *o)?;
            let ids = describe(host, *r)?;
            check_row_sparse_pull(&out, &ids)?;
            let entry = state
                .entries
                .get(k)
                .ok_or_else(|| crate::Error::new(format!("key {k} has not been inited")))?;
            crate::ensure!(
                entry.stored.stype() == ROW_SPARSE,
                "PullRowSparse expects row_sparse src NDArray (key {k} holds a dense value)"
            );
            check_matches(k, entry, &out, "row_sparse_pull output")?;
            let unique = unique_row_ids(host, *r, &ids)?;
            // As libkvstore's own store (MXNet does not check: an id past the end would make
            // an output whose ids and shape disagree).
            let rows = entry.shape.first().copied().unwrap_or(0);
            if let Some(bad) = unique.iter().find(|&&id| id < 0 || id >= rows) {
                crate::bail!("row id {bad} is out of range for key {k}: the stored value has {rows} rows");
            }
            planned.push((entry.stored.handle(), *o, unique));
        }
        for (stored, out, unique) in planned {
            let ids = HostArray::new(host, DType::Int64, &[unique.len() as i64])?;
            // SAFETY: `ids` is new: no host op uses its memory yet, which holds `len` bytes,
            // exactly `unique.len()` int64s.
            unsafe { std::ptr::copy_nonoverlapping(unique.as_ptr() as *const u8, ids.ptr, ids.len.min(unique.len() * 8)) };
            let done = host.invoke(host.sparse_retain, "_sparse_retain", &[stored, ids.handle], out, &[]);
            // The retain op holds its own reference to the ids.
            ids.forget(host);
            done?;
        }
        Ok(())
    }

    pub fn pull(
        &self,
        host: &Host,
        keys: Vec<Key>,
        outs: &[NDArrayHandle],
        priority: c_int,
        ignore_sparse: bool,
    ) -> Result<()> {
        if let Some(d) = &self.dist {
            self.state.lock().check_key_type(&keys)?;
            return d.pull(host, keys, outs, priority, ignore_sparse);
        }
        let state = self.state.lock();
        state.check_key_type(&keys)?;
        let mut copies = Vec::with_capacity(outs.len());
        for (k, o) in keys.iter().zip(outs) {
            let entry = state
                .entries
                .get(k)
                .ok_or_else(|| crate::Error::new(format!("key {k} has not been inited")))?;
            let d = describe(host, *o)?;
            if d.stype != DENSE && ignore_sparse {
                continue;
            }
            crate::ensure!(
                d.stype == DENSE || d.stype == ROW_SPARSE,
                "key {k}: pulling into storage type {} is not supported by the hosted store yet",
                d.stype
            );
            if d.stype == DENSE && entry.stored.stype() == DENSE {
                // Pulls cast, as MXNet's CopyFromTo does: only the shape must match.
                check_shape(k, entry, &d, "pull output")?;
            } else {
                check_matches(k, entry, &d, "pull output")?;
            }
            copies.push((entry.stored.handle(), *o));
        }
        for (src, dst) in copies {
            host.copy(src, dst)?;
        }
        Ok(())
    }

    /// `MXKVStoreSetGradientCompression`, parsed as libkvstore's own store parses it.
    /// `device` stores apply it to every later push (not to Init); `local` stores keep it and
    /// ignore it, as MXNet's CommCPU does; dist stores hand it to the MPI store underneath,
    /// which compresses each worker's merged value (MXNet's dist workers reduce their local
    /// values uncompressed: their Comm never gets the setting).
    pub fn set_gradient_compression(&self, params: &[(String, String)]) -> Result<()> {
        let gc = GradientCompression::from_params(params)?;
        if let Some(d) = &self.dist {
            d.set_gradient_compression(params)?;
        }
        self.state.lock().compression = Some(gc);
        Ok(())
    }

    /// `MXKVStoreSetUpdater`: replaces the int updater only.
    pub fn set_int_updater(&self, int: MXKVStoreUpdater, user: *mut c_void) -> Result<()> {
        if let Some(d) = &self.dist {
            return d.set_updater(int, user);
        }
        self.state.lock().updaters.int = int.map(|f| (f, user as usize));
        Ok(())
    }

    /// `MXKVStoreSetUpdaterEx`: replaces both updaters.
    pub fn set_updaters(&self, int: MXKVStoreUpdater, string: MXKVStoreStrUpdater, user: *mut c_void) -> Result<()> {
        if let Some(d) = &self.dist {
            return d.set_updater(int, user);
        }
        let mut state = self.state.lock();
        state.updaters.int = int.map(|f| (f, user as usize));
        state.updaters.string = string.map(|f| (f, user as usize));
        Ok(())
    }

    /// Waits for every pending op on the store's arrays, then drops them.
    pub fn free(self, host: &Host) {
        if let Some(d) = self.dist {
            d.free(host);
        }
        let state = self.state.into_inner();
        for (_, e) in state.entries {
            e.free(host);
        }
    }
}
