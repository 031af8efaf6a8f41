//! Where a `device` store's sums land when its values are on GPUs, as MXNet's `CommDevice`:
//! each key's merge buffer on the GPU MXNet's placement picks (over the contexts of the first
//! push that reduces several values), the stored value moved there when an updater is set
//! (the updater receives handles on that GPU), the sum kept there otherwise. Values on host
//! contexts keep everything in the store's pinned memory. The placement itself is the GPU
//! backend's (`MergePlacement`); the store only names contexts.

use super::StoreKind;
use crate::backend::MergePlacement;
use crate::ndarray::{Context, DeviceType, NDArray, StorageType};

/// The GPU of `id`'s merge buffer for a push of `vals`, if the sum is to land on one: a
/// `device` store, several values (or compressed ones), all dense or all row_sparse (MXNet's
/// `merged_buf` of a row_sparse sum is on the merge buffer's context too), the placed context
/// a GPU. A single dense value on a GPU (uncompressed) is not reduced: MXNet keeps it as
/// the stored value where it is (`local = merged`), so the sum of one value lands on its own
/// GPU, where a pull reads it without a trip through host memory. `placed` is the key's own
/// record of its placed context.
pub(super) fn merge_gpu(
    placement: &mut MergePlacement,
    kind: StoreKind,
    id: i32,
    vals: &[NDArray],
    compressed: bool,
    placed: &mut Option<Context>,
) -> Option<Context> {
    if let [one] = vals {
        let on_gpu = one.ctx().dev_type == DeviceType::Gpu && one.stype() == StorageType::Default;
        if kind == StoreKind::Device && !compressed && on_gpu {
            return Some(one.ctx());
        }
    }
    let reduces = vals.len() > 1 || compressed;
    let one_stype = [StorageType::Default, StorageType::RowSparse].into_iter().any(|st| vals.iter().all(|v| v.stype() == st));
    if kind != StoreKind::Device || !reduces || !one_stype {
        return None;
    }
    if placement.needs_placement() {
        let devs: Vec<Context> = vals.iter().map(NDArray::ctx).collect();
        placement.ensure_placed(&devs);
    }
    // Kept in the key's entry: a placed key keeps its context when placement runs again for
    // keys initialised later, and the placement's map is a cache miss per key of a call.
    if placed.is_none() {
        *placed = placement.merge_context(id);
    }
    placed.filter(|c| c.dev_type == DeviceType::Gpu)
}

/// Where an updater's stored value must be for a sum landing in `recv` (MXNet copies the
/// stored value to the merged array's GPU): `Some(gpu)` when it must move there.
pub(super) fn stored_home(stored: &NDArray, recv: &NDArray) -> Option<Context> {
    let ctx = recv.ctx();
    (ctx.dev_type == DeviceType::Gpu && stored.ctx() != ctx && stored.stype() == StorageType::Default).then_some(ctx)
}

/// Where the compression residual of a value's position lives: the value's GPU, or the store's
/// pinned memory for host values.
pub(super) fn residual_home(value: &NDArray) -> Context {
    match value.ctx().dev_type {
        DeviceType::Gpu if value.stype() == StorageType::Default => value.ctx(),
        _ => super::STORE_CONTEXT,
    }
}
