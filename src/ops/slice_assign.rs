//! `_slice_assign` and `_slice_assign_scalar` (what the Python frontend's `a[i] = v` and
//! `a[i:j, ::2] = v` call): the output is the input with a strided box replaced by an array
//! of the box's shape or by a scalar. `begin`, `end` and `step` are tuples of optional
//! integers over the leading axes, with MXNet's rules for defaults, negative indices and
//! clamping; the axes past them are taken whole.

use super::params::Params;
use super::values::Dense;
use crate::error::Result;
use crate::engine::{engine, Var};
use crate::ndarray::{shape_string, DType, NDArray, StorageType};

/// One axis of the box: its first index, its step and how many indices it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AxisRange {
    /// First index.
    pub begin: i64,
    /// Step (non-zero; negative walks backwards).
    pub step: i64,
    /// Number of indices.
    pub count: usize,
}

/// A tuple parameter such as `(1, None)`, `[0,2]`, `(None,)` or `()`; `None` entries are
/// absent values.
fn optional_ints(params: &Params, op: &str, key: &str) -> Result<Vec<Option<i64>>> {
    let Some(raw) = params.raw(key) else { return Ok(Vec::new()) };
    let inner = raw.trim_start_matches(['(', '[']).trim_end_matches([')', ']']);
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "None" | "none" => Ok(None),
            v => v.parse::<i64>().map(Some).map_err(|_| crate::Error::new(format!("operator {op}: parameter {key}='{raw}' is not a tuple of integers or None"))),
        })
        .collect()
}

/// The box `begin`/`end`/`step` select in `shape` (MXNet's `GetIndexRange` and output-size
/// rules); `None` when it is empty (the op then leaves the value unchanged).
#[cfg(test)]
fn box_of(shape: &[usize], begin: &[Option<i64>], end: &[Option<i64>], step: &[Option<i64>], op: &str) -> Result<Option<Vec<AxisRange>>> {
    let (axes, empty) = box_and_emptiness(shape, begin, end, step, op)?;
    Ok((!empty).then_some(axes))
}

/// The box and whether MXNet skips it as empty (some axis with `begin == end`).
fn box_and_emptiness(shape: &[usize], begin: &[Option<i64>], end: &[Option<i64>], step: &[Option<i64>], op: &str) -> Result<(Vec<AxisRange>, bool)> {
    crate::ensure!(!shape.is_empty(), "operator {op}: the input has no axes");
    crate::ensure!(
        begin.len() <= shape.len() && end.len() <= shape.len(),
        "operator {op}: Slicing axis exceeds data dimensions (begin has {}, end has {} entries, the input {} axes)",
        begin.len(),
        end.len(),
        shape.len()
    );
    crate::ensure!(begin.len() == end.len(), "operator {op}: begin and end must have the same length");
    crate::ensure!(step.is_empty() || step.len() == begin.len(), "operator {op}: step and begin must have the same length");
    let mut axes = Vec::with_capacity(shape.len());
    let mut empty = false;
    for (i, &dim) in shape.iter().enumerate() {
        if i >= begin.len() {
            axes.push(AxisRange { begin: 0, step: 1, count: dim });
            continue;
        }
        let s = step.get(i).copied().flatten().unwrap_or(1);
        crate::ensure!(s != 0, "operator {op}: slice op step[{i}] cannot be 0");
        let len = dim as i64;
        let (mut b, mut e) = (0i64, 0i64);
        if len > 0 {
            b = begin[i].unwrap_or(if s < 0 { len - 1 } else { 0 });
            e = end[i].unwrap_or(if s < 0 { -1 } else { len });
            if b < 0 {
                b += len;
            }
            if e < 0 && end[i].is_some() {
                e += len;
            }
            if b < 0 && s > 0 {
                b = 0;
            }
            if b > len - 1 && s < 0 {
                b = len - 1;
            }
            if b < 0 || b > len - 1 {
                b = -1;
            }
            e = e.max(-1).min(len);
        }
        if b == e {
            empty = true;
        }

        let count = if e != b && b >= 0 {
            if s > 0 {
                if e > b { (e - b - 1) / s + 1 } else { 0 }
            } else if e < b {
                (b - e - 1) / (-s) + 1
            } else {
                0
            }
        } else {
            0
        };
        axes.push(AxisRange { begin: b, step: s, count: count as usize });
    }
    Ok((axes, empty))
}

/// Calls `f(flat index in the input, flat index in the box)` for every element of the box.
fn for_each_in_box(shape: &[usize], axes: &[AxisRange], mut f: impl FnMut(usize, usize)) {
    let total: usize = axes.iter().map(|a| a.count).product();
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let mut idx = vec![0usize; axes.len()];
    for k in 0..total {
        let flat: i64 = axes.iter().zip(&idx).zip(&strides).map(|((a, &j), &st)| (a.begin + j as i64 * a.step) * st as i64).sum();
        f(flat as usize, k);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < axes[d].count {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn params_box(shape: &[usize], params: &Params, op: &str) -> Result<(Vec<AxisRange>, bool)> {
    let begin = optional_ints(params, op, "begin")?;
    let end = optional_ints(params, op, "end")?;
    let step = optional_ints(params, op, "step")?;
    crate::ensure!(params.raw("begin").is_some() && params.raw("end").is_some(), "operator {op}: parameters begin and end are required");
    box_and_emptiness(shape, &begin, &end, &step, op)
}

fn copy(data: &Dense) -> Result<Dense> {
    let mut out = Dense::zeros(&data.shape, data.dtype)?;
    out.data.bytes_mut().copy_from_slice(data.data.bytes());
    Ok(out)
}

/// `_slice_assign(lhs, rhs)`: `lhs` with the box replaced by `rhs` (same dtype, the box's shape).
pub fn slice_assign(data: &Dense, value: &Dense, params: &Params, op: &str) -> Result<Dense> {
    let mut out = copy(data)?;
    assign_box(out.data.bytes_mut(), &data.shape, data.dtype, Some(value), params, op)?;
    Ok(out)
}

/// `_slice_assign_scalar(data)`: `data` with every element of the box set to `scalar`
/// (C-cast to the dtype).
pub fn slice_assign_scalar(data: &Dense, params: &Params, op: &str) -> Result<Dense> {
    let mut out = copy(data)?;
    assign_box(out.data.bytes_mut(), &data.shape, data.dtype, None, params, op)?;
    Ok(out)
}

/// Writes the box of `dst` (an array of `shape` and `dtype`): from `value` (`_slice_assign`)
/// or from the `scalar` parameter (`_slice_assign_scalar`). Touches nothing outside the box,
/// so it serves both the copying ops above and the in-place call (`out` = the input).
fn assign_box(dst: &mut [u8], shape: &[usize], dtype: DType, value: Option<&Dense>, params: &Params, op: &str) -> Result<()> {
    if let Some(value) = value {
        crate::ensure!(
            dtype == value.dtype,
            "operator {op}: the value's dtype {} differs from the array's {}",
            value.dtype.name(),
            dtype.name()
        );
    }
    let scalar = match value {
        Some(_) => None,
        None => Some(params.f64("scalar")?.unwrap_or(0.0)),
    };
    let (axes, empty) = params_box(shape, params, op)?;
    if let Some(value) = value {
        let want: Vec<usize> = axes.iter().map(|a| a.count).collect();
        // MXNet's shape inference wants the box's shape exactly, even for an empty box.
        crate::ensure!(
            value.shape == want,
            "operator {op}: the value has shape {}, the slice has shape {}",
            shape_string(&value.shape),
            shape_string(&want)
        );
    }
    if empty {
        return Ok(());
    }
    let size = dtype.size();
    match (value, scalar) {
        (Some(value), _) => {
            let src = value.data.bytes();
            for_each_in_box(shape, &axes, |at, k| dst[at * size..(at + 1) * size].copy_from_slice(&src[k * size..(k + 1) * size]));
        }
        (None, scalar) => {
            let element = scalar_bytes(dtype, scalar.unwrap_or(0.0))?;
            for_each_in_box(shape, &axes, |at, _| dst[at * size..(at + 1) * size].copy_from_slice(&element));
        }
    }
    Ok(())
}

/// `_slice_assign` / `_slice_assign_scalar` with `out` the input itself (what `a[i] = v`
/// calls): writes the box into the array instead of copying the whole array through the
/// generic op path, which costs several full passes over a big array per assignment. `None`
/// when the call is not such a call (the generic path then runs it).
pub fn try_in_place(scalar: bool, inputs: &[NDArray], params: &Params, given: Option<&[Option<NDArray>]>, op: &str) -> Result<Option<Vec<NDArray>>> {
    let Some([Some(out)]) = given else { return Ok(None) };
    let Some(data) = inputs.first() else { return Ok(None) };
    let value = if scalar { None } else { inputs.get(1) };
    let arity_ok = inputs.len() == if scalar { 1 } else { 2 };
    // GPU arrays take the generic path (staged through the host).
    if !arity_ok || !out.same_view(data) || data.stype() != StorageType::Default || out.on_device() {
        return Ok(None);
    }
    // `a[i] += x` assigns a view of `a` itself: the value is copied out (it is the box's
    // size) before the array is written, and a read of the written var is not registered.
    let reads: Vec<Var> = value.filter(|v| !v.same_chunk(out)).map(NDArray::var).into_iter().collect();
    engine().run_sync(&reads, &[out.var()], || -> Result<()> {
        let value = value.map(Dense::read_now).transpose()?;
        out.write_bytes(|dst| assign_box(dst, out.shape(), out.dtype(), value.as_ref(), params, op))
    })??;
    Ok(Some(vec![out.clone()]))
}

/// The bytes of `value` C-cast to `dtype`.
fn scalar_bytes(dtype: DType, value: f64) -> Result<Vec<u8>> {
    // MXNet's `static_cast<DType>(double)` on x86 truncates to a machine integer and keeps its
    // low bytes for the narrow integer types (-3 -> 253 as uint8, 300.7 -> 44 as int8).
    if matches!(dtype, DType::Uint8 | DType::Int8 | DType::Int32 | DType::Int64) {
        return Ok((value as i64).to_le_bytes()[..dtype.size()].to_vec());
    }
    let mut one = Dense::zeros(&[1], dtype)?;
    crate::with_element_type!(dtype, T => {
        crate::base::buffer::typed_mut::<T>(one.data.bytes_mut()).fill(<T as crate::base::element::Element>::from_f64(value));
    });
    Ok(one.data.bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(begin: i64, step: i64, count: usize) -> AxisRange {
        AxisRange { begin, step, count }
    }

    #[test]
    fn boxes_follow_mxnet_defaults_negatives_and_clamping() {
        // a[1] on (4, 3): row 1, all columns.
        assert_eq!(box_of(&[4, 3], &[Some(1)], &[Some(2)], &[], "t").unwrap(), Some(vec![r(1, 1, 1), r(0, 1, 3)]));
        // a[-1:] and a[::-2] on (5,).
        assert_eq!(box_of(&[5], &[Some(-1)], &[None], &[], "t").unwrap(), Some(vec![r(4, 1, 1)]));
        assert_eq!(box_of(&[5], &[None], &[None], &[Some(-2)], "t").unwrap(), Some(vec![r(4, -2, 3)]));
        // End past the axis is clamped; begin == end is empty.
        assert_eq!(box_of(&[5], &[Some(3)], &[Some(99)], &[], "t").unwrap(), Some(vec![r(3, 1, 2)]));
        assert_eq!(box_of(&[5], &[Some(2)], &[Some(2)], &[], "t").unwrap(), None);
        // Steps of 3 over 0..7: 0, 3, 6.
        assert_eq!(box_of(&[7], &[Some(0)], &[Some(7)], &[Some(3)], "t").unwrap(), Some(vec![r(0, 3, 3)]));
        assert!(box_of(&[5], &[Some(0)], &[Some(1)], &[Some(0)], "t").is_err());
        assert!(box_of(&[5], &[Some(0), Some(0)], &[Some(1), Some(1)], &[], "t").is_err());
        assert!(box_of(&[5, 2], &[Some(0)], &[Some(1), Some(1)], &[], "t").is_err());
    }

    #[test]
    fn boxes_are_walked_in_row_major_order() {
        let axes = box_of(&[3, 4], &[Some(2), Some(3)], &[Some(0), Some(0)], &[Some(-1), Some(-2)], "t").unwrap().unwrap();
        let mut seen = Vec::new();
        for_each_in_box(&[3, 4], &axes, |at, k| seen.push((at, k)));
        // rows 2, 1; columns 3, 1.
        assert_eq!(seen, vec![(11, 0), (9, 1), (7, 2), (5, 3)]);
    }
}
