//! Row-sparse kernels: sums over the union of rows, conversions to and from dense, and
//! retaining a set of rows. A row_sparse value is its sorted row ids and the bytes of those
//! rows, `row_bytes` each.

use crate::base::element::Element;
use crate::base::buffer::{try_filled, try_with_capacity, typed, typed_mut, Buffer};
use crate::base::DType;
use crate::error::Result;

/// Sorted unique ids of all inputs.
pub fn union_rows(inputs: &[&[i64]]) -> Result<Vec<i64>> {
    let mut rows = try_with_capacity(inputs.iter().map(|r| r.len()).sum())?;
    rows.extend(inputs.iter().flat_map(|r| r.iter().copied()));
    rows.sort_unstable();
    rows.dedup();
    Ok(rows)
}

/// Where a sum of row_sparse values puts each input row: the union of the rows, and for each
/// input, each of its rows' index in the union and whether the input is that row's first
/// contributor (copied; later contributors are added, in input order). The GPU backend
/// launches its kernels from this plan; [`sum_rows`] follows it on the host.
pub struct RowPlan {
    /// Sorted unique ids of all inputs.
    pub rows: Vec<i64>,
    /// Per input, per row: the row's index in `rows`.
    pub positions: Vec<Vec<i64>>,
    /// Per input, per row: 1 when the input is the row's first contributor, else 0.
    pub first: Vec<Vec<u8>>,
}

/// The [`RowPlan`] of inputs with row ids `inputs` (each input's ids unique).
pub fn plan_rows(inputs: &[&[i64]]) -> Result<RowPlan> {
    let rows = union_rows(inputs)?;
    let mut seen = try_filled(rows.len(), false)?;
    let mut positions = try_with_capacity(inputs.len())?;
    let mut first = try_with_capacity(inputs.len())?;
    for ids in inputs {
        let mut pos = try_with_capacity(ids.len())?;
        let mut fst = try_with_capacity(ids.len())?;
        for id in ids.iter() {
            // Every id is in the union.
            let at = rows.binary_search(id).unwrap_or_else(|at| at);
            pos.push(at as i64);
            fst.push(u8::from(!seen[at]));
            seen[at] = true;
        }
        positions.push(pos);
        first.push(fst);
    }
    Ok(RowPlan { rows, positions, first })
}

/// Σ of row_sparse values in `dtype`: the rows are the union of the inputs' rows; each row
/// is summed in input order.
pub fn sum_rows(dtype: DType, row_bytes: usize, inputs: &[(&[i64], &[u8])]) -> Result<(Vec<i64>, Buffer)> {
    let ids: Vec<&[i64]> = inputs.iter().map(|(r, _)| *r).collect();
    let plan = plan_rows(&ids)?;
    let mut out = Buffer::zeroed(plan.rows.len() * row_bytes)?;
    for (k_in, (_, data)) in inputs.iter().enumerate() {
        for (k, (&at, &first)) in plan.positions[k_in].iter().zip(&plan.first[k_in]).enumerate() {
            let at = at as usize;
            let src = &data[k * row_bytes..(k + 1) * row_bytes];
            let dst = &mut out.bytes_mut()[at * row_bytes..(at + 1) * row_bytes];
            if first == 0 {
                crate::with_element_type!(dtype, T => add_assign::<T>(typed_mut::<T>(dst), typed::<T>(src)));
            } else {
                dst.copy_from_slice(src);
            }
        }
    }
    Ok((plan.rows, out))
}

/// The rows a row_sparse pull of row ids `wanted` (cast to int64, any order, repeated) gives
/// from a value holding rows `stored`: the sorted unique ids, or none at all when the value
/// holds no rows (MXNet's sparse_retain), whatever was wanted.
pub fn retained_rows(mut wanted: Vec<i64>, stored: &[i64]) -> Vec<i64> {
    if stored.is_empty() {
        wanted.clear();
    }
    wanted.sort_unstable();
    wanted.dedup();
    wanted
}

/// For each wanted id, its index among the stored `ids` (sorted), or -1 when not stored: the
/// positions [`retain`] copies from.
pub fn retain_positions(ids: &[i64], want: &[i64]) -> Result<Vec<i64>> {
    let mut out = try_with_capacity(want.len())?;
    out.extend(want.iter().map(|id| ids.binary_search(id).map_or(-1, |at| at as i64)));
    Ok(out)
}

fn add_assign<T: Element>(dst: &mut [T], src: &[T]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = d.add(*s);
    }
}

/// Writes the rows into a dense buffer of `dst.len() / row_bytes` rows, zeros elsewhere.
/// Ids outside the array are skipped.
pub fn densify(row_bytes: usize, ids: &[i64], data: &[u8], dst: &mut [u8]) {
    dst.fill(0);
    let n_rows = dst.len().checked_div(row_bytes).unwrap_or(0);
    for (k, id) in ids.iter().enumerate() {
        if let Ok(r) = usize::try_from(*id) {
            if r < n_rows {
                dst[r * row_bytes..(r + 1) * row_bytes].copy_from_slice(&data[k * row_bytes..(k + 1) * row_bytes]);
            }
        }
    }
}

/// The rows of a dense buffer holding any non-zero byte pattern (MXNet's cast_storage keeps
/// the rows with a non-zero element).
pub fn sparsify(row_bytes: usize, src: &[u8]) -> Result<(Vec<i64>, Buffer)> {
    let non_zero = |row: &[u8]| row_bytes > 0 && row.iter().any(|&b| b != 0);
    let n = src.chunks(row_bytes.max(1)).filter(|row| non_zero(row)).count();
    let mut ids = try_with_capacity(n)?;
    let mut data = Buffer::zeroed(n * row_bytes)?;
    let mut rows_out = data.bytes_mut().chunks_mut(row_bytes.max(1));
    for (r, row) in src.chunks(row_bytes.max(1)).enumerate() {
        if non_zero(row) {
            ids.push(r as i64);
            if let Some(out) = rows_out.next() {
                out.copy_from_slice(row);
            }
        }
    }
    Ok((ids, data))
}

/// The rows `want` (sorted, unique) of a row_sparse value: stored rows are copied, absent
/// ones are zeros.
pub fn retain(row_bytes: usize, ids: &[i64], data: &[u8], want: &[i64]) -> Result<Buffer> {
    let mut out = Buffer::zeroed(want.len() * row_bytes)?;
    for (k, at) in retain_positions(ids, want)?.into_iter().enumerate() {
        if let Ok(at) = usize::try_from(at) {
            out.bytes_mut()[k * row_bytes..(k + 1) * row_bytes].copy_from_slice(&data[at * row_bytes..(at + 1) * row_bytes]);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn retained_rows_are_sorted_unique_and_none_from_a_value_without_rows() {
        assert_eq!(retained_rows(vec![4, 1, 4, 0], &[1, 2]), vec![0, 1, 4]);
        assert_eq!(retained_rows(vec![4, 1], &[]), Vec::<i64>::new());
    }

    #[test]
    fn sums_cover_the_union_of_rows() {
        let (a_ids, a) = ([1i64, 3], bytes(&[1., 2., 3., 4.]));
        let (b_ids, b) = ([0i64, 3], bytes(&[10., 20., 30., 40.]));
        let (rows, out) = sum_rows(DType::Float32, 8, &[(&a_ids, &a), (&b_ids, &b)]).unwrap();
        assert_eq!(rows, vec![0, 1, 3]);
        assert_eq!(typed::<f32>(out.bytes()), &[10., 20., 1., 2., 33., 44.]);
    }

    #[test]
    fn plans_place_each_row_in_the_union_and_mark_its_first_contributor() {
        let plan = plan_rows(&[&[1, 3], &[0, 3], &[3]]).unwrap();
        assert_eq!(plan.rows, vec![0, 1, 3]);
        assert_eq!(plan.positions, vec![vec![1, 2], vec![0, 2], vec![2]]);
        assert_eq!(plan.first, vec![vec![1, 1], vec![1, 0], vec![0]]);
        assert_eq!(retain_positions(&[1, 3, 8], &[0, 3, 8, 9]).unwrap(), vec![-1, 1, 2, -1]);
    }

    #[test]
    fn dense_and_row_sparse_convert_both_ways() {
        let mut dense = vec![9u8; 5 * 8];
        densify(8, &[1, 3], &bytes(&[1., 2., 3., 4.]), &mut dense);
        assert_eq!(typed::<f32>(&dense), &[0., 0., 1., 2., 0., 0., 3., 4., 0., 0.]);
        let (ids, data) = sparsify(8, &dense).unwrap();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(data.bytes(), bytes(&[1., 2., 3., 4.]));
        let kept = retain(8, &ids, data.bytes(), &[1, 4]).unwrap();
        assert_eq!(typed::<f32>(kept.bytes()), &[1., 2., 0., 0.]);
    }
}
