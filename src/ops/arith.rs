//! Element-wise arithmetic for every dtype: same-shape (`elemwise_*`), broadcasting
//! (`broadcast_*`) and with a scalar (`*_scalar`).

use super::values::Dense;
use crate::error::Result;
use crate::base::buffer::{typed, typed_mut};
use crate::ndarray::shape_string;
use crate::base::element::Element;

/// A binary arithmetic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
}

impl BinaryOp {
    /// `a op b` in `T`: integers wrap and divide toward zero (x / 0 gives 0 rather than a
    /// trap); floats are computed in double and rounded once to `T`, which for one
    /// operation equals computing in `T`.
    #[inline]
    pub fn apply<T: Element>(self, a: T, b: T) -> T {
        if T::IS_INTEGER {
            let (a, b) = (a.to_i64(), b.to_i64());
            T::from_i64(match self {
                BinaryOp::Add => a.wrapping_add(b),
                BinaryOp::Sub => a.wrapping_sub(b),
                BinaryOp::Mul => a.wrapping_mul(b),
                BinaryOp::Div => a.checked_div(b).unwrap_or(0),
            })
        } else {
            let (a, b) = (a.to_f64(), b.to_f64());
            T::from_f64(match self {
                BinaryOp::Add => a + b,
                BinaryOp::Sub => a - b,
                BinaryOp::Mul => a * b,
                BinaryOp::Div => a / b,
            })
        }
    }
}

fn check_same_dtype(a: &Dense, b: &Dense, op: &str) -> Result<()> {
    crate::ensure!(
        a.dtype == b.dtype,
        "operator {op}: inputs have different dtypes ({} and {})",
        a.dtype.name(),
        b.dtype.name()
    );
    Ok(())
}

/// `lhs op rhs` for arrays of one shape.
pub fn elemwise(op: BinaryOp, lhs: &Dense, rhs: &Dense, name: &str) -> Result<Dense> {
    check_same_dtype(lhs, rhs, name)?;
    crate::ensure!(
        lhs.shape == rhs.shape,
        "operator {name}: shapes {} and {} differ (use broadcast_* to broadcast)",
        shape_string(&lhs.shape),
        shape_string(&rhs.shape)
    );
    let mut out = Dense::zeros(&lhs.shape, lhs.dtype)?;
    crate::with_element_type!(lhs.dtype, T => {
        let (a, b) = (typed::<T>(lhs.data.bytes()), typed::<T>(rhs.data.bytes()));
        for ((o, x), y) in typed_mut::<T>(out.data.bytes_mut()).iter_mut().zip(a).zip(b) {
            *o = op.apply(*x, *y);
        }
    });
    Ok(out)
}

/// `data op scalar`, or `scalar op data` when `reverse`; the scalar is first cast to the
/// array's dtype, as MXNet's legacy scalar ops do.
pub fn with_scalar(op: BinaryOp, data: &Dense, scalar: f64, reverse: bool) -> Result<Dense> {
    let mut out = Dense::zeros(&data.shape, data.dtype)?;
    crate::with_element_type!(data.dtype, T => {
        let s = T::from_f64(scalar);
        for (o, x) in typed_mut::<T>(out.data.bytes_mut()).iter_mut().zip(typed::<T>(data.data.bytes())) {
            *o = if reverse { op.apply(s, *x) } else { op.apply(*x, s) };
        }
    });
    Ok(out)
}

/// The broadcast shape of two shapes, aligned on their last dimension as MXNet does; each
/// pair of dimensions must agree or one must be 1.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= n { s[i + s.len() - n] } else { 1 };
    (0..n)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => crate::bail!("shapes {} and {} cannot be broadcast together", shape_string(a), shape_string(b)),
        })
        .collect()
}

/// Strides (in elements) of `shape` seen as `out_shape`: 0 along broadcast dimensions.
fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let pad = out_shape.len() - shape.len();
    let mut strides = vec![0; out_shape.len()];
    let mut stride = 1;
    for i in (0..shape.len()).rev() {
        strides[i + pad] = if shape[i] == 1 { 0 } else { stride };
        stride *= shape[i];
    }
    strides
}

/// `lhs op rhs` with broadcasting.
pub fn broadcast(op: BinaryOp, lhs: &Dense, rhs: &Dense, name: &str) -> Result<Dense> {
    check_same_dtype(lhs, rhs, name)?;
    let shape = broadcast_shape(&lhs.shape, &rhs.shape).map_err(|e| crate::Error::new(format!("operator {name}: {e}")))?;
    let (sa, sb) = (broadcast_strides(&lhs.shape, &shape), broadcast_strides(&rhs.shape, &shape));
    let mut out = Dense::zeros(&shape, lhs.dtype)?;
    crate::with_element_type!(lhs.dtype, T => {
        let (a, b) = (typed::<T>(lhs.data.bytes()), typed::<T>(rhs.data.bytes()));
        let mut index = vec![0usize; shape.len()];
        let (mut ia, mut ib) = (0usize, 0usize);
        for o in typed_mut::<T>(out.data.bytes_mut()).iter_mut() {
            *o = op.apply(a[ia], b[ib]);
            // Advance the multi-index like an odometer, keeping both input offsets in step.
            for d in (0..shape.len()).rev() {
                index[d] += 1;
                ia += sa[d];
                ib += sb[d];
                if index[d] < shape[d] {
                    break;
                }
                ia -= sa[d] * shape[d];
                ib -= sb[d] * shape[d];
                index[d] = 0;
            }
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::DType;

    fn dense<T: bytemuck::Pod>(shape: &[usize], dtype: DType, v: &[T]) -> Dense {
        let mut d = Dense::zeros(shape, dtype).unwrap();
        d.data.bytes_mut().copy_from_slice(bytemuck::cast_slice(v));
        d
    }

    #[test]
    fn broadcasting_aligns_trailing_dimensions() {
        assert_eq!(broadcast_shape(&[2, 3], &[3]).unwrap(), vec![2, 3]);
        assert_eq!(broadcast_shape(&[2, 1], &[1, 3]).unwrap(), vec![2, 3]);
        assert!(broadcast_shape(&[2, 3], &[2]).is_err());
        let a = dense(&[2, 3], DType::Float32, &[0f32, 1., 2., 3., 4., 5.]);
        let col = dense(&[2, 1], DType::Float32, &[10f32, 20.]);
        let out = broadcast(BinaryOp::Add, &a, &col, "broadcast_add").unwrap();
        assert_eq!(typed::<f32>(out.data.bytes()), &[10., 11., 12., 23., 24., 25.]);
        let row = dense(&[3], DType::Float32, &[1f32, 2., 4.]);
        let out = broadcast(BinaryOp::Div, &a, &row, "broadcast_div").unwrap();
        assert_eq!(typed::<f32>(out.data.bytes()), &[0., 0.5, 0.5, 3., 2., 1.25]);
    }

    #[test]
    fn integer_and_float_rules_per_dtype() {
        let a = dense(&[3], DType::Int32, &[7i32, -7, i32::MAX]);
        let b = dense(&[3], DType::Int32, &[2i32, 0, 1]);
        assert_eq!(typed::<i32>(elemwise(BinaryOp::Div, &a, &b, "d").unwrap().data.bytes()), &[3, 0, i32::MAX]);
        assert_eq!(typed::<i32>(elemwise(BinaryOp::Add, &a, &b, "a").unwrap().data.bytes()), &[9, -7, i32::MIN]);
        // The scalar is cast to the dtype first: 2.5 → 2 for integers.
        assert_eq!(typed::<i32>(with_scalar(BinaryOp::Mul, &a, 2.5, false).unwrap().data.bytes()), &[14, -14, -2]);
        let f = dense(&[2], DType::Float64, &[1.0f64, 4.0]);
        assert_eq!(typed::<f64>(with_scalar(BinaryOp::Div, &f, 2.0, true).unwrap().data.bytes()), &[2.0, 0.5]);
        let h = dense(&[1], DType::Float16, &[half::f16::from_f32(2048.0)]);
        let one = dense(&[1], DType::Float16, &[half::f16::ONE]);
        assert_eq!(typed::<half::f16>(elemwise(BinaryOp::Add, &h, &one, "a").unwrap().data.bytes())[0].to_f32(), 2048.0);
        assert!(elemwise(BinaryOp::Add, &a, &f, "elemwise_add").unwrap_err().message().contains("different dtypes"));
    }
}
