//! The launches of a dense sum on one device: a key's sum as `sum_<dtype>` launches cut by
//! [`super::launch::sum_launches`] (the store's association, bit for bit), the small keys of a
//! call in one `fused_sum` launch per device (its table in the launch's parameters when it
//! fits, else staged through pinned memory), and
//! `fill_<dtype>` for constant arrays; the row_sparse kernels' launches (`rsp_accumulate_<dtype>`,
//! `rsp_gather`), their plans made by the caller.

use super::fused::{pack, SmallKey};
use super::launch::{grid_blocks, sum_launches, MAX_SOURCES};
use super::memory::DevicePtr;
use super::queue::{Output, Queue};
use crate::base::DType;
use crate::reduce::SumOrder;
use std::ffi::c_void;

/// Threads per block of every launch.
const THREADS: u32 = 256;
/// Elements per block of the fused launch.
pub const FUSED_ELEMS_PER_BLOCK: u32 = 1024;
/// Keys of at most this many elements go into the fused launch.
pub const SMALL_KEY_ELEMS: u64 = 1 << 16;

fn sms(ordinal: i32) -> u32 {
    super::driver::runtime().ok().and_then(|rt| rt.device(ordinal).ok().map(|d| d.multiprocessors as u32)).unwrap_or(1)
}

/// `dst = Σ srcs` (`n` elements of `dtype`, every address on `dst`'s device) in `order`, the
/// sum also written to `outs` (on `dst`'s device, of its size) by the last launch, in the same
/// pass. Returns how many of `outs` it writes: at most [`MAX_SOURCES`].
pub fn sum_to(q: &mut Queue, dst: DevicePtr, srcs: &[DevicePtr], n: u64, dtype: DType, order: SumOrder, outs: &[DevicePtr]) -> usize {
    if n == 0 || srcs.is_empty() {
        return 0;
    }
    let outs = &outs[..outs.len().min(MAX_SOURCES)];
    let grid = grid_blocks(n, THREADS, sms(dst.ordinal));
    let order_code: u32 = match order {
        SumOrder::Serial => 0,
        SumOrder::CpuComm => 1,
    };
    let mut out_table = [0u64; MAX_SOURCES];
    for (slot, o) in out_table.iter_mut().zip(outs) {
        *slot = o.addr;
    }
    let mut n_out = outs.len() as u32;
    let launches = sum_launches(srcs.len(), order);
    let last = launches.len().saturating_sub(1);
    for (i, l) in launches.into_iter().enumerate() {
        let mut table = [0u64; MAX_SOURCES];
        for (slot, s) in table.iter_mut().zip(&srcs[l.sources.clone()]) {
            *slot = s.addr;
        }
        let (mut d, mut count, mut elems, mut ord, mut acc) = (dst.addr, l.sources.len() as u32, n, order_code, l.acc_in_dst as u32);
        let mut params: [*mut c_void; 8] = [
            (&mut d as *mut u64).cast(),
            table.as_mut_ptr().cast(),
            (&mut count as *mut u32).cast(),
            (&mut elems as *mut u64).cast(),
            (&mut ord as *mut u32).cast(),
            (&mut acc as *mut u32).cast(),
            out_table.as_mut_ptr().cast(),
            (&mut n_out as *mut u32).cast(),
        ];
        let (name, n_params, written) = if i == last && !outs.is_empty() {
            (format!("sum_out_{}", dtype.name()), 8, 1 + outs.len())
        } else {
            (format!("sum_{}", dtype.name()), 6, 1)
        };
        let output = Output { bytes: n as usize * dtype.size() * written, elements: n * written as u64 };
        q.launch(dst.ordinal, &name, grid, THREADS, &mut params[..n_params], output);
    }
    outs.len()
}

/// The bytes a key of `n_src` sources takes in a fused launch's table.
pub fn table_bytes(n_src: usize) -> usize {
    std::mem::size_of::<super::fused::KeyDesc>() + 8 * n_src
}

/// Every key of `keys` (all on `ordinal`) summed by one launch. Its table goes in the launch's
/// parameters when `room` (the most bytes the call site's table may take, whichever keys it
/// holds this time: [`table_bytes`] summed) fits there; else it is placed on the device by
/// `place_table(q, bytes)`: device memory on `ordinal`, filled ahead of the kernels, that the
/// caller keeps until the work has finished (`None` when the queue failed). Deciding by the
/// room, not the table, keeps a steady loop from allocating when the table varies.
pub fn fused(q: &mut Queue, ordinal: i32, keys: &[SmallKey], room: usize, place_table: impl FnOnce(&mut Queue, &[u8]) -> Option<DevicePtr>) {
    fused_launch(q, ordinal, "fused_sum", keys, room, place_table)
}

/// Every copy of `copies` (each a key of one source, all on `ordinal`) by one launch, as
/// [`fused`], the room being the table's own size.
pub fn fused_copy(q: &mut Queue, ordinal: i32, copies: &[SmallKey], place_table: impl FnOnce(&mut Queue, &[u8]) -> Option<DevicePtr>) {
    fused_launch(q, ordinal, "fused_copy", copies, 0, place_table)
}

/// Every copy of `copies` (each a key of one source, all on `ordinal`, of any size) by
/// launches of `fused_copy_by_value`, as many as their tables need: no table memory, so a
/// steady loop allocates nothing however many of them a call has.
pub fn fused_copy_by_value(q: &mut Queue, ordinal: i32, copies: &[SmallKey]) {
    let per_launch = PARAM_TABLE_WORDS * 8 / table_bytes(1);
    for chunk in copies.chunks(per_launch) {
        fused_launch(q, ordinal, "fused_copy", chunk, 0, |q: &mut Queue, _: &[u8]| {
            q.fail("internal error: a copy table does not fit a launch's parameters".into());
            None
        });
    }
}

fn fused_launch(
    q: &mut Queue,
    ordinal: i32,
    kernel: &str,
    keys: &[SmallKey],
    room: usize,
    place_table: impl FnOnce(&mut Queue, &[u8]) -> Option<DevicePtr>,
) {
    let table = match pack(keys, FUSED_ELEMS_PER_BLOCK) {
        Ok(t) => t,
        Err(e) => return q.fail(e.message().to_string()),
    };
    if table.n_blocks == 0 {
        // Nothing to launch this time; a table that needs device memory still gets it now,
        // so that a later call with keys here does not allocate.
        if room > PARAM_TABLE_WORDS * 8 {
            let _ = place_table(q, &[]);
        }
        return;
    }
    let blocks = u32::try_from(table.n_blocks).unwrap_or(u32::MAX);
    let output = Output {
        bytes: keys.iter().map(|k| k.n as usize * k.dtype.size()).sum(),
        elements: keys.iter().map(|k| k.n).sum(),
    };
    let (mut n_desc, mut per_block) = (table.n_desc, table.elems_per_block);
    if let Some(mut words) = by_value(&table.bytes, room) {
        // In the launch's parameters: nothing is copied to the device ahead of the kernel.
        let mut params: [*mut c_void; 3] =
            [words.as_mut_ptr().cast(), (&mut n_desc as *mut u32).cast(), (&mut per_block as *mut u32).cast()];
        let name = format!("{kernel}_by_value");
        return q.launch(ordinal, &name, blocks, THREADS, &mut params, output);
    }
    let Some(device_table) = place_table(q, &table.bytes) else { return };
    let mut t = device_table.addr;
    let mut params: [*mut c_void; 3] =
        [(&mut t as *mut u64).cast(), (&mut n_desc as *mut u32).cast(), (&mut per_block as *mut u32).cast()];
    q.launch(ordinal, kernel, blocks, THREADS, &mut params, output);
}

/// Words of the `ParamTable` of `kernels/fused.cu` (4,000 bytes: a launch's parameters may
/// take 4 KiB in all).
pub const PARAM_TABLE_WORDS: usize = 500;

/// A packed table as the `_by_value` kernels' parameter, when it and `room` fit.
fn by_value(bytes: &[u8], room: usize) -> Option<[u64; PARAM_TABLE_WORDS]> {
    if bytes.len().max(room) > PARAM_TABLE_WORDS * 8 {
        return None;
    }
    let mut words = [0u64; PARAM_TABLE_WORDS];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    Some(words)
}

/// `n` elements at `dst` set to the value whose bytes (in `dtype`) are `value`.
pub fn fill(q: &mut Queue, dst: DevicePtr, dtype: DType, value: [u8; 8], n: u64) {
    if n == 0 {
        return;
    }
    if value[..dtype.size()].iter().all(|b| *b == 0) {
        return q.fill_bytes(dst, 0, n as usize * dtype.size());
    }
    let (mut d, mut v, mut elems) = (dst.addr, value, n);
    let mut params: [*mut c_void; 3] = [(&mut d as *mut u64).cast(), v.as_mut_ptr().cast(), (&mut elems as *mut u64).cast()];
    let grid = grid_blocks(n, THREADS, sms(dst.ordinal));
    q.launch(dst.ordinal, &format!("fill_{}", dtype.name()), grid, THREADS, &mut params, Output { bytes: n as usize * dtype.size(), elements: n });
}

/// One input of a row_sparse sum (`kernels/row_sparse.cu`): its `n_rows` rows of `row_len`
/// elements at `data` copied (`first[k]` non-zero) or added into row `out_pos[k]` of `out`
/// (every address on `out`'s device).
#[allow(clippy::too_many_arguments)]
pub fn rsp_accumulate(q: &mut Queue, out: DevicePtr, data: DevicePtr, out_pos: DevicePtr, first: DevicePtr, n_rows: u64, row_len: u64, dtype: DType) {
    let n = n_rows * row_len;
    if n == 0 {
        return;
    }
    let grid = grid_blocks(n, THREADS, sms(out.ordinal));
    let output = Output { bytes: n as usize * dtype.size(), elements: n };
    let name = format!("rsp_accumulate_{}", dtype.name());
    launch_words(q, out.ordinal, &name, grid, [out.addr, data.addr, out_pos.addr, first.addr, n_rows, row_len], output);
}

/// `out` row `k` (of `row_bytes`) = row `ids[k]` of the `n_rows` rows at `rows`, zeros for an
/// id outside them (every address on `out`'s device).
pub fn rsp_gather(q: &mut Queue, out: DevicePtr, rows: DevicePtr, ids: DevicePtr, n_ids: u64, n_rows: u64, row_bytes: u64) {
    let n = n_ids * row_bytes;
    if n == 0 {
        return;
    }
    let grid = grid_blocks(n, THREADS, sms(out.ordinal));
    let output = Output { bytes: n as usize, elements: n };
    launch_words(q, out.ordinal, "rsp_gather", grid, [out.addr, rows.addr, ids.addr, n_ids, n_rows, row_bytes], output);
}

/// Launches kernel `name` whose parameters are all 64-bit words (addresses and counts).
fn launch_words<const N: usize>(q: &mut Queue, ordinal: i32, name: &str, grid: u32, mut words: [u64; N], output: Output) {
    let mut params: [*mut c_void; N] = [std::ptr::null_mut(); N];
    for (p, w) in params.iter_mut().zip(words.iter_mut()) {
        *p = (w as *mut u64).cast();
    }
    q.launch(ordinal, name, grid, THREADS, &mut params, output);
}

/// Gradient compression's two steps on one device (`kernels/compress.cu`): 2-bit (MXNet 1.9)
/// or 1-bit (`one_bit`) codes of `grad + residual` into `packed`, the residual keeping the rest.
#[allow(clippy::too_many_arguments)]
pub fn quantize(q: &mut Queue, one_bit: bool, packed: DevicePtr, packed_len: u64, grad: DevicePtr, residual: DevicePtr, n: u64, threshold: f32) {
    if n == 0 {
        return;
    }
    let (mut p, mut len, mut g, mut r, mut elems, mut t) = (packed.addr, packed_len, grad.addr, residual.addr, n, threshold);
    let mut params: [*mut c_void; 6] = [
        (&mut p as *mut u64).cast(),
        (&mut len as *mut u64).cast(),
        (&mut g as *mut u64).cast(),
        (&mut r as *mut u64).cast(),
        (&mut elems as *mut u64).cast(),
        (&mut t as *mut f32).cast(),
    ];
    let name = if one_bit { "quantize_1bit" } else { "quantize_2bit" };
    // Its output as shown: the codes (the residual is updated in place too).
    let output = Output { bytes: packed_len as usize, elements: n };
    q.launch(packed.ordinal, name, grid_blocks(packed_len, THREADS, sms(packed.ordinal)), THREADS, &mut params, output);
}

/// The values `packed` codes for, written to `out` or (with `accumulate`) added to it.
pub fn dequantize(q: &mut Queue, one_bit: bool, out: DevicePtr, packed: DevicePtr, n: u64, threshold: f32, accumulate: bool) {
    if n == 0 {
        return;
    }
    let (mut o, mut p, mut elems, mut t, mut acc) = (out.addr, packed.addr, n, threshold, accumulate as u32);
    let grid = grid_blocks(n, THREADS, sms(out.ordinal));
    let output = Output { bytes: n as usize * 4, elements: n };
    if one_bit {
        let mut params: [*mut c_void; 4] =
            [(&mut o as *mut u64).cast(), (&mut p as *mut u64).cast(), (&mut elems as *mut u64).cast(), (&mut acc as *mut u32).cast()];
        q.launch(out.ordinal, "dequantize_1bit", grid, THREADS, &mut params, output);
    } else {
        let mut params: [*mut c_void; 5] = [
            (&mut o as *mut u64).cast(),
            (&mut p as *mut u64).cast(),
            (&mut elems as *mut u64).cast(),
            (&mut t as *mut f32).cast(),
            (&mut acc as *mut u32).cast(),
        ];
        q.launch(out.ordinal, "dequantize_2bit", grid, THREADS, &mut params, output);
    }
}
