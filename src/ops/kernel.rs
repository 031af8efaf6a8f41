//! What each implemented op computes, from dense input values and parameters.

use super::arith::{self, BinaryOp};
use super::params::Params;
use super::values::{Dense, Output};
use crate::error::Result;
use crate::ndarray::{DType, StorageType};
use crate::base::cast;

/// The computation behind an op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// `_copyto`: the input, cast to the output's dtype.
    CopyTo,
    /// `_zeros`, `_ones`, `_full`: a new value from `shape`/`dtype` (or the given output).
    Fill(Option<f64>),
    /// `_set_value`: every element of the output set to `src`.
    SetValue,
    /// `elemwise_*`: same-shape arithmetic.
    Elemwise(BinaryOp),
    /// `broadcast_*`: broadcasting arithmetic.
    Broadcast(BinaryOp),
    /// `*_scalar`: arithmetic with `scalar`; `true` puts the scalar on the left (`_rminus_scalar`).
    Scalar(BinaryOp, bool),
    /// `Cast`: a new dtype.
    Cast,
    /// `cast_storage`: a new storage type.
    CastStorage,
    /// `sum`: a reduction over axes.
    Sum,
    /// `_slice_assign`: a strided box of the first input replaced by the second.
    SliceAssign,
    /// `_slice_assign_scalar`: a strided box of the input set to `scalar`.
    SliceAssignScalar,
    /// `_arange`: an evenly spaced range.
    Arange,
    /// `_random_normal`: normal samples.
    RandomNormal,
}

impl Kernel {
    /// The kernel of the op with canonical name `name`, if libkvstore computes it.
    pub fn for_op(name: &str) -> Option<Kernel> {
        use BinaryOp::*;
        Some(match name {
            "_copyto" => Kernel::CopyTo,
            "_zeros" => Kernel::Fill(Some(0.0)),
            "_ones" => Kernel::Fill(Some(1.0)),
            "_full" => Kernel::Fill(None),
            "_set_value" => Kernel::SetValue,
            "elemwise_add" => Kernel::Elemwise(Add),
            "elemwise_sub" => Kernel::Elemwise(Sub),
            "elemwise_mul" => Kernel::Elemwise(Mul),
            "elemwise_div" => Kernel::Elemwise(Div),
            "broadcast_add" => Kernel::Broadcast(Add),
            "broadcast_sub" => Kernel::Broadcast(Sub),
            "broadcast_mul" => Kernel::Broadcast(Mul),
            "broadcast_div" => Kernel::Broadcast(Div),
            "_plus_scalar" => Kernel::Scalar(Add, false),
            "_minus_scalar" => Kernel::Scalar(Sub, false),
            "_rminus_scalar" => Kernel::Scalar(Sub, true),
            "_mul_scalar" => Kernel::Scalar(Mul, false),
            "_div_scalar" => Kernel::Scalar(Div, false),
            "_rdiv_scalar" => Kernel::Scalar(Div, true),
            "Cast" => Kernel::Cast,
            "cast_storage" => Kernel::CastStorage,
            "sum" => Kernel::Sum,
            "_slice_assign" => Kernel::SliceAssign,
            "_slice_assign_scalar" => Kernel::SliceAssignScalar,
            "_arange" => Kernel::Arange,
            "_random_normal" => Kernel::RandomNormal,
            _ => return None,
        })
    }

    /// How many array inputs the op takes.
    pub fn num_inputs(self) -> usize {
        match self {
            Kernel::Fill(_) | Kernel::SetValue | Kernel::Arange | Kernel::RandomNormal => 0,
            Kernel::Elemwise(_) | Kernel::Broadcast(_) | Kernel::SliceAssign => 2,
            _ => 1,
        }
    }

    /// Computes the outputs. `target` is the shape and dtype of the first given output array,
    /// which ops without inputs fall back on (`_set_value` needs it).
    pub fn compute(self, name: &str, inputs: &[Dense], params: &Params, target: Option<(&[usize], DType)>) -> Result<Vec<Output>> {
        crate::ensure!(
            inputs.len() == self.num_inputs(),
            "operator {name} takes {} input array(s), {} given",
            self.num_inputs(),
            inputs.len()
        );
        let out = match self {
            Kernel::CopyTo => Output::dense(copy_of(&inputs[0], target.map_or(inputs[0].dtype, |t| t.1))?),
            Kernel::Fill(value) => {
                let value = match value {
                    Some(v) => v,
                    None => params.f64("value")?.unwrap_or(0.0),
                };
                let shape = match params.shape("shape")? {
                    Some(s) => s,
                    None => target.map(|t| t.0.to_vec()).unwrap_or_default(),
                };
                let dtype = params.dtype("dtype")?.or(target.map(|t| t.1)).unwrap_or(DType::Float32);
                Output::dense(filled(&shape, dtype, value)?)
            }
            Kernel::SetValue => {
                let (shape, dtype) = target.ok_or_else(|| crate::Error::new(format!("operator {name} needs an output array")))?;
                let src = params.f64("src")?.ok_or_else(|| crate::Error::new(format!("operator {name}: parameter src is required")))?;
                Output::dense(filled(shape, dtype, src)?)
            }
            Kernel::Elemwise(op) => Output::dense(arith::elemwise(op, &inputs[0], &inputs[1], name)?),
            Kernel::Broadcast(op) => Output::dense(arith::broadcast(op, &inputs[0], &inputs[1], name)?),
            Kernel::Scalar(op, reverse) => {
                let scalar = params.f64("scalar")?.unwrap_or(1.0);
                Output::dense(arith::with_scalar(op, &inputs[0], scalar, reverse)?)
            }
            Kernel::Cast => {
                let dtype = params.dtype("dtype")?.ok_or_else(|| crate::Error::new(format!("operator {name}: parameter dtype is required")))?;
                Output::dense(copy_of(&inputs[0], dtype)?)
            }
            Kernel::CastStorage => {
                let stype = params.stype("stype")?.ok_or_else(|| crate::Error::new(format!("operator {name}: parameter stype is required")))?;
                crate::ensure!(stype != StorageType::Csr, "operator {name}: csr is not supported by libkvstore");
                Output { value: copy_of(&inputs[0], inputs[0].dtype)?, stype }
            }
            Kernel::Sum => Output::dense(super::sum::sum(&inputs[0], params)?),
            Kernel::SliceAssign => Output::dense(super::slice_assign::slice_assign(&inputs[0], &inputs[1], params, name)?),
            Kernel::SliceAssignScalar => Output::dense(super::slice_assign::slice_assign_scalar(&inputs[0], params, name)?),
            Kernel::Arange => Output::dense(super::creation::arange(params, name)?),
            Kernel::RandomNormal => Output::dense(super::creation::random_normal(params, target, name)?),
        };
        Ok(vec![out])
    }
}

/// `value` cast to `dtype`, `shape` times.
fn filled(shape: &[usize], dtype: DType, value: f64) -> Result<Dense> {
    let mut out = Dense::zeros(shape, dtype)?;
    crate::with_element_type!(dtype, T => {
        crate::base::buffer::typed_mut::<T>(out.data.bytes_mut()).fill(<T as crate::base::element::Element>::from_f64(value));
    });
    Ok(out)
}

/// A copy of `value` in `dtype` (C casts).
fn copy_of(value: &Dense, dtype: DType) -> Result<Dense> {
    let mut out = Dense::zeros(&value.shape, dtype)?;
    cast(value.dtype, value.data.bytes(), dtype, out.data.bytes_mut());
    Ok(out)
}
