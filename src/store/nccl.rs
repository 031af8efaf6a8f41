//! The rules of MXNet's `nccl` store (`KVStoreNCCL`, src/kvstore/kvstore_nccl.h in MXNet 1.9),
//! kept on the `device` store's path: no libnccl, the sums are the device store's left fold,
//! landing on one root GPU. What KVStoreNCCL refuses is refused here before anything changes,
//! where MXNet would abort in an engine thread or hand NCCL arguments it rejects:
//!
//! - dense arrays only, in every call (`GroupKVPairsHelper` and `InitKey`, lines 193-209 and
//!   446-453; `PullRowSparseImpl`, 177-181); no gradient compression (183-186); a pull with
//!   `ignore_sparse` false is refused (151);
//! - one set of devices: the first push that sums several values of a key fixes it
//!   (`InitNCCL`, 235-242 and 475-493) and puts every key's merge buffer on that push's first
//!   value's GPU (`InitMergeBuffer`, 496-506: `devs[0]`); from then on every push of several
//!   values and every pull must use exactly that set, one array per device (250, 349-355);
//!   a single pushed value is handed over as it is, unchecked (230-233);
//! - the summed and broadcast dtypes are NCCL's: float32, float16, float64, uint8, int32 and
//!   int64 (`GetNCCLType`, 455-473), checked where MXNet calls NCCL: a push of several values,
//!   a pull once the set is fixed;
//! - several values of a key must be on distinct GPUs (NCCL's communicator has one rank per
//!   device; host pointers or two ranks on one GPU are NCCL errors that MXNet does not check).

use super::plan::{PullPlan, PushPlan};
use crate::error::Result;
use crate::ndarray::{Context, DType, DeviceType, NDArray, StorageType};

/// The dtypes NCCL sums and broadcasts for MXNet.
const DTYPES: [DType; 6] = [DType::Float32, DType::Float16, DType::Float64, DType::Uint8, DType::Int32, DType::Int64];

/// The GPUs an `nccl` store reduces and broadcasts over, once fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceSet {
    /// Where every sum lands: the first value's GPU in the push that fixed the set.
    root: Context,
    /// The GPUs' ids, ascending.
    ids: Vec<i32>,
}

impl DeviceSet {
    /// The GPU every key's sum lands on.
    pub(crate) fn root(&self) -> Context {
        self.root
    }

    fn shown(&self) -> String {
        self.ids.iter().map(|&id| Context::gpu(id).to_string()).collect::<Vec<_>>().join(", ")
    }
}

fn listed(ctxs: &[Context]) -> String {
    ctxs.iter().map(Context::to_string).collect::<Vec<_>>().join(", ")
}

/// Sorted ids when every context is a GPU, none repeated.
fn distinct_gpus(ctxs: &[Context]) -> Option<Vec<i32>> {
    let mut ids = Vec::with_capacity(ctxs.len());
    for c in ctxs {
        if c.dev_type != DeviceType::Gpu {
            return None;
        }
        ids.push(c.dev_id);
    }
    ids.sort_unstable();
    ids.windows(2).all(|w| w[0] != w[1]).then_some(ids)
}

/// Checks the contexts of several values summed for `key`, fixing the set if it is not yet:
/// the values on distinct GPUs, and on the set's GPUs once there is one.
pub(crate) fn reduce_over(set: &mut Option<DeviceSet>, ctxs: &[Context], key: &str) -> Result<()> {
    if let Some(host) = ctxs.iter().find(|c| c.dev_type != DeviceType::Gpu) {
        crate::bail!(
            "the nccl store sums several values of a key on GPUs only: key {key} has a value on {host} (its values are on {})",
            listed(ctxs)
        );
    }
    let Some(ids) = distinct_gpus(ctxs) else {
        crate::bail!(
            "the nccl store sums several values of a key on distinct GPUs, one value per GPU: key {key} has values on {}",
            listed(ctxs)
        );
    };
    match set {
        None => {
            // Only reached with several GPU contexts: the first is the root.
            *set = Some(DeviceSet { root: ctxs[0], ids });
            Ok(())
        }
        Some(s) => {
            crate::ensure!(
                s.ids == ids,
                "the nccl store works with one set of devices, {} (fixed by its first push that summed several values): key {key}'s values are on {}",
                s.shown(),
                listed(ctxs)
            );
            Ok(())
        }
    }
}

/// Checks the outputs of a pull of `key` against a fixed set: one per GPU of the set.
pub(crate) fn broadcast_over(set: &DeviceSet, ctxs: &[Context], key: &str) -> Result<()> {
    crate::ensure!(
        distinct_gpus(ctxs).is_some_and(|ids| ids == set.ids),
        "the nccl store works with one set of devices, {} (fixed by its first push that summed several values): a pull of key {key} must have one output on each of them, not {}",
        set.shown(),
        listed(ctxs)
    );
    Ok(())
}

/// Refuses a dtype NCCL does not sum or broadcast.
pub(crate) fn check_dtype(dtype: DType, key: &str) -> Result<()> {
    crate::ensure!(
        DTYPES.contains(&dtype),
        "the nccl store cannot sum or broadcast {} values (key {key}): NCCL handles float32, float16, float64, uint8, int32 and int64",
        dtype.name()
    );
    Ok(())
}

/// Refuses sparse arrays: every array an `nccl` store is given must be dense.
pub(crate) fn check_dense(ids: &[i32], arrays: &[NDArray], shown: &dyn Fn(i32) -> String, what: &str) -> Result<()> {
    match ids.iter().zip(arrays).find(|(_, a)| a.stype() != StorageType::Default) {
        Some((&id, a)) => crate::bail!(
            "the nccl store supports dense arrays only: key {} was given a {} {what}",
            shown(id),
            a.stype().name()
        ),
        None => Ok(()),
    }
}

/// The refusal of row_sparse pulls.
pub(crate) fn no_row_sparse_pull() -> crate::Error {
    crate::Error::new("the nccl store supports dense arrays only: it has no row_sparse pull")
}

/// The refusal of gradient compression.
pub(crate) fn no_compression() -> crate::Error {
    crate::Error::new("the nccl store does not support gradient compression")
}

/// Refuses a pull that would keep sparse outputs (MXNet's `PullWithSparse` with
/// `ignore_sparse` false).
pub(crate) fn check_ignore_sparse(ignore_sparse: bool) -> Result<()> {
    crate::ensure!(ignore_sparse, "the nccl store's pull needs ignore_sparse to be true (it was false)");
    Ok(())
}

/// Checks the keys of a checked push that sum several values; returns the set after the push
/// (fixed by it when it is the first to sum several values). A single value is not checked.
pub(crate) fn check_push(set: &Option<DeviceSet>, plan: &PushPlan, shown: &dyn Fn(i32) -> String) -> Result<Option<DeviceSet>> {
    let mut set = set.clone();
    for g in &plan.groups {
        let vals = &plan.values[g.values.clone()];
        if vals.len() < 2 {
            continue;
        }
        let key = shown(g.id);
        let ctxs: Vec<Context> = vals.iter().map(NDArray::ctx).collect();
        reduce_over(&mut set, &ctxs, &key)?;
        check_dtype(vals[0].dtype(), &key)?;
    }
    Ok(set)
}

/// Checks a checked pull against a fixed set: every key's outputs on the set's GPUs, one each,
/// of a dtype NCCL broadcasts, with the stored value's dtype (a broadcast copies bytes).
/// Before the set is fixed a pull copies, as the `device` store's does.
pub(crate) fn check_pull(set: Option<&DeviceSet>, pull: &PullPlan, shown: &dyn Fn(i32) -> String) -> Result<()> {
    let Some(set) = set else { return Ok(()) };
    for (job, &id) in pull.copies.iter().zip(&pull.ids) {
        let key = shown(id);
        let outs = &pull.outs[job.dsts.clone()];
        let ctxs: Vec<Context> = outs.iter().map(NDArray::ctx).collect();
        broadcast_over(set, &ctxs, &key)?;
        check_dtype(job.src.dtype(), &key)?;
        if let Some(other) = outs.iter().find(|o| o.dtype() != job.src.dtype()) {
            crate::bail!(
                "the nccl store broadcasts without casting: key {key} is {}, an output {}",
                job.src.dtype().name(),
                other.dtype().name()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(id: i32) -> Context {
        Context::gpu(id)
    }

    #[test]
    fn the_first_reduction_fixes_the_set_and_its_first_value_is_the_root() {
        let mut set = None;
        reduce_over(&mut set, &[gpu(2), gpu(0), gpu(1)], "7").unwrap();
        let fixed = set.clone().unwrap();
        assert_eq!((fixed.root(), fixed.ids.clone()), (gpu(2), vec![0, 1, 2]));
        // The same GPUs in another order: accepted, the root unchanged.
        reduce_over(&mut set, &[gpu(0), gpu(1), gpu(2)], "8").unwrap();
        assert_eq!(set.as_ref().unwrap().root(), gpu(2));
        // Another set: refused, naming both; the set unchanged.
        let err = reduce_over(&mut set, &[gpu(0), gpu(1)], "9").unwrap_err();
        assert!(err.message().contains("one set of devices, gpu(0), gpu(1), gpu(2)") && err.message().contains("key 9's values are on gpu(0), gpu(1)"), "{err}");
        assert_eq!(set, Some(fixed));
    }

    #[test]
    fn several_values_need_distinct_gpus() {
        let mut set = None;
        let err = reduce_over(&mut set, &[gpu(0), Context::cpu(0)], "3").unwrap_err();
        assert!(err.message().contains("GPUs only: key 3 has a value on cpu(0)"), "{err}");
        let err = reduce_over(&mut set, &[Context::cpu_pinned(0), gpu(1)], "3").unwrap_err();
        assert!(err.message().contains("cpu_pinned(0)"), "{err}");
        let err = reduce_over(&mut set, &[gpu(1), gpu(0), gpu(1)], "4").unwrap_err();
        assert!(err.message().contains("distinct GPUs") && err.message().contains("gpu(1), gpu(0), gpu(1)"), "{err}");
        assert!(set.is_none(), "a refused reduction fixes nothing");
    }

    #[test]
    fn pulls_after_the_set_is_fixed_need_one_output_per_gpu_of_the_set() {
        let set = DeviceSet { root: gpu(1), ids: vec![0, 1] };
        broadcast_over(&set, &[gpu(1), gpu(0)], "k").unwrap();
        for bad in [&[gpu(0)][..], &[gpu(0), gpu(0)], &[gpu(0), gpu(1), gpu(2)], &[Context::cpu(0), gpu(1)], &[]] {
            let err = broadcast_over(&set, bad, "k").unwrap_err();
            assert!(err.message().contains("a pull of key k must have one output on each of them"), "{err}");
        }
    }

    #[test]
    fn only_nccls_dtypes_are_summed() {
        for ok in DTYPES {
            check_dtype(ok, "1").unwrap();
        }
        for bad in [DType::Int8, DType::Bool, DType::Bfloat16] {
            let err = check_dtype(bad, "1").unwrap_err();
            assert!(err.message().contains(&format!("cannot sum or broadcast {} values (key 1)", bad.name())), "{err}");
        }
        assert!(check_ignore_sparse(false).unwrap_err().message().contains("ignore_sparse"));
        check_ignore_sparse(true).unwrap();
    }
}
