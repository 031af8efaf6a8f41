//! Copies with a GPU on one side or both, as driver copies: device to device on the
//! destination's compute stream (peer copies between devices), host to device and device to
//! host on their own streams. Pinned host arrays are copied directly; pageable host memory
//! goes through the pinned staging pool (a source is staged on the worker, a destination is
//! filled from its staging buffer when the copy's event fired). One engine op per batch,
//! completed from the event: the worker never waits for the GPU.

use crate::engine::{engine, OpDone, OpEnv, Var};
use crate::error::{Error, Result};
use crate::gpu::{PinnedMemory, Place, Queue};
use crate::ndarray::NDArray;

/// Whether `src` to `dst` is a plain GPU copy: dense, same dtype, a GPU on a side.
pub(super) fn is_driver_copy(src: &NDArray, dst: &NDArray) -> bool {
    src.dtype() == dst.dtype()
        && src.stype() == crate::ndarray::StorageType::Default
        && dst.stype() == crate::ndarray::StorageType::Default
        && (src.on_device() || dst.on_device())
}

/// Schedules `dst = src` for every pair (each a driver copy, see [`is_driver_copy`]), as one op.
pub(super) fn push_copies(pairs: Vec<(NDArray, NDArray)>, priority: i32) {
    if pairs.is_empty() {
        return;
    }
    let reads: Vec<&Var> = pairs.iter().map(|(s, _)| s.var()).collect();
    let writes: Vec<&Var> = pairs.iter().map(|(_, d)| d.var()).collect();
    let pairs_for_op = pairs.clone();
    engine().push_async(&reads, &writes, priority, move |env, done| run_copies(pairs_for_op, env, done));
}

/// Pinned buffers a copy stages through: sources filled now, destinations emptied at completion.
#[derive(Default)]
struct Staged {
    sources: Vec<PinnedMemory>,
    landings: Vec<(PinnedMemory, NDArray)>,
}

fn run_copies(pairs: Vec<(NDArray, NDArray)>, env: &OpEnv, done: OpDone) {
    let mut q = Queue::new();
    let mut staged = Staged::default();
    for (src, dst) in &pairs {
        if let Err(e) = enqueue(&mut q, src, dst, &mut staged, env.threads()) {
            q.fail(e.message().to_string());
            break;
        }
    }
    let Staged { sources, landings } = staged;
    q.finish(
        Box::new(move |outcome| {
            let landed = outcome.map_err(Error::new).and_then(|()| land(&landings));
            done.finish(landed);
        }),
        Box::new((pairs, sources)),
    );
}

/// Fills pageable destinations from their staging buffers.
fn land(landings: &[(PinnedMemory, NDArray)]) -> Result<()> {
    for (staged, dst) in landings {
        dst.write_bytes(|d| d.copy_from_slice(&staged.bytes()[..d.len()]));
    }
    Ok(())
}

fn enqueue(q: &mut Queue, src: &NDArray, dst: &NDArray, staged: &mut Staged, threads: usize) -> Result<()> {
    let bytes = src.data_byte_len();
    let (from, to) = (src.copy_place(), dst.copy_place());
    if !src.on_device() && !dst.on_device() {
        // Host to host (a pull into mixed outputs): on the worker, now.
        return crate::backend::host::copy_any_now(src, dst, threads);
    }
    let from = match from {
        Some(place) => place,
        None => {
            let mut buffer = PinnedMemory::staging(bytes).map_err(Error::new)?;
            src.read_bytes(|b| buffer.bytes_mut().copy_from_slice(b));
            let place = Place::Host(buffer.at(0));
            staged.sources.push(buffer);
            place
        }
    };
    let to = match to {
        Some(place) => place,
        None => {
            let buffer = PinnedMemory::staging(bytes).map_err(Error::new)?;
            let place = Place::Host(buffer.at(0));
            staged.landings.push((buffer, dst.clone()));
            place
        }
    };
    q.copy(to, from, bytes);
    Ok(())
}
