//! `sum`: the sum over axes, with MXNet's `axis`, `keepdims` and `exclude` parameters.

use super::params::Params;
use super::values::Dense;
use crate::error::Result;
use crate::base::buffer::{typed, typed_mut};
use crate::ndarray::shape_string;
use crate::base::element::Element;

/// The axes to reduce, normalised (negative counts from the end), sorted and unique.
fn reduced_axes(ndim: usize, axis: Option<Vec<i64>>, exclude: bool, shape: &[usize]) -> Result<Vec<bool>> {
    let mut reduce = vec![axis.is_none(); ndim];
    if let Some(axes) = axis {
        // `axis=()` means every axis, as in MXNet.
        if axes.is_empty() {
            reduce = vec![true; ndim];
        }
        for a in axes {
            let i = if a < 0 { a + ndim as i64 } else { a };
            crate::ensure!(
                (0..ndim as i64).contains(&i),
                "operator sum: axis {a} is out of range for shape {}",
                shape_string(shape)
            );
            reduce[i as usize] = true;
        }
        if exclude {
            reduce.iter_mut().for_each(|r| *r = !*r);
        }
    }
    Ok(reduce)
}

/// Sums `data` over the chosen axes: floats accumulate in double, integers in wrapping int64;
/// the result keeps the input's dtype.
pub fn sum(data: &Dense, params: &Params) -> Result<Dense> {
    let ndim = data.shape.len();
    let reduce = reduced_axes(ndim, params.axes("axis")?, params.bool("exclude")?.unwrap_or(false), &data.shape)?;
    let keepdims = params.bool("keepdims")?.unwrap_or(false);
    let kept: Vec<usize> = (0..ndim).map(|d| if reduce[d] { 1 } else { data.shape[d] }).collect();
    let mut out_shape: Vec<usize> = if keepdims {
        kept.clone()
    } else {
        (0..ndim).filter(|&d| !reduce[d]).map(|d| data.shape[d]).collect()
    };
    if out_shape.is_empty() {
        // MXNet's legacy sum of everything is a 1-element 1-D array.
        out_shape.push(1);
    }
    let out_size: usize = kept.iter().product();
    // Output index of every input element: row-major over `kept`.
    let mut out = Dense::zeros(&out_shape, data.dtype)?;
    crate::with_element_type!(data.dtype, T => {
        let input = typed::<T>(data.data.bytes());
        let mut acc_f = vec![0f64; out_size];
        let mut acc_i = vec![0i64; out_size];
        let mut index = vec![0usize; ndim];
        for x in input {
            let mut o = 0;
            for d in 0..ndim {
                o = o * kept[d] + if reduce[d] { 0 } else { index[d] };
            }
            if T::IS_INTEGER {
                acc_i[o] = acc_i[o].wrapping_add(x.to_i64());
            } else {
                acc_f[o] += x.to_f64();
            }
            for d in (0..ndim).rev() {
                index[d] += 1;
                if index[d] < data.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        for (k, o) in typed_mut::<T>(out.data.bytes_mut()).iter_mut().enumerate() {
            *o = if T::IS_INTEGER { T::from_i64(acc_i[k]) } else { T::from_f64(acc_f[k]) };
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::DType;
    use crate::ops::registry::lookup;

    fn run(keys: &[&str], vals: &[&str]) -> Dense {
        let mut d = Dense::zeros(&[2, 3], DType::Int64).unwrap();
        d.data.bytes_mut().copy_from_slice(bytemuck::cast_slice(&[1i64, 2, 3, 4, 5, 6]));
        sum(&d, &Params::new(lookup("sum").unwrap().info(), keys, vals).unwrap()).unwrap()
    }

    #[test]
    fn sums_over_axes_like_mxnet() {
        let all = run(&[], &[]);
        assert_eq!((all.shape.clone(), typed::<i64>(all.data.bytes()).to_vec()), (vec![1], vec![21]));
        let rows = run(&["axis"], &["1"]);
        assert_eq!((rows.shape.clone(), typed::<i64>(rows.data.bytes()).to_vec()), (vec![2], vec![6, 15]));
        let cols = run(&["axis", "keepdims"], &["(0,)", "True"]);
        assert_eq!((cols.shape.clone(), typed::<i64>(cols.data.bytes()).to_vec()), (vec![1, 3], vec![5, 7, 9]));
        let excl = run(&["axis", "exclude"], &["-1", "1"]);
        assert_eq!(typed::<i64>(excl.data.bytes()), &[5, 7, 9]);
    }
}
