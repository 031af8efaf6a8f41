//! Operators: the registry the frontends discover through `MXListAllOpNames` /
//! `MXSymbolGetAtomicSymbolInfo`, and the ops libkvstore computes for `MXImperativeInvoke`
//! (creation, copies, arithmetic, casts, sums). Ops run synchronously on the calling thread,
//! ordered with the engine: the inputs are read once their pending writes are done, and the
//! outputs are written once their pending reads and writes are done.

mod arith;
mod catalog;
mod creation;
mod info;
mod kernel;
mod params;
pub mod registry;
mod slice_assign;
mod sum;
mod values;

pub use creation::seed_random;
pub use info::{ArgInfo, OpInfo};
pub use registry::{all_names, all_ops, lookup, OpRef};

use crate::engine::{engine, Var};
use crate::error::Result;
use crate::ndarray::{Context, NDArray, StorageType};
use params::Params;
use values::Dense;

/// Runs `op` on `inputs` with string parameters `keys[i] = vals[i]`.
///
/// `given`: the caller's output arrays (`None` entries are empty arrays to be created), or
/// `None` to have the outputs allocated. Returns the output arrays, in order.
pub fn invoke(op: OpRef, inputs: &[NDArray], keys: &[&str], vals: &[&str], given: Option<&[Option<NDArray>]>) -> Result<Vec<NDArray>> {
    let name = op.info().name;
    let kernel = op.kernel().ok_or_else(|| crate::Error::new(format!("not supported by libkvstore: {name}")))?;
    let params = Params::new(op.info(), keys, vals)?;
    if matches!(kernel, kernel::Kernel::SliceAssign | kernel::Kernel::SliceAssignScalar) {
        if let Some(done) = slice_assign::try_in_place(kernel == kernel::Kernel::SliceAssignScalar, inputs, &params, given, name)? {
            return Ok(done);
        }
    }
    if let (kernel::Kernel::CopyTo, [src], Some([Some(dst)])) = (kernel, inputs, given) {
        let dense = src.stype() == StorageType::Default && dst.stype() == StorageType::Default;
        if dense && (src.on_device() || dst.on_device()) {
            // `x.copyto(gpu)`: a driver copy on the GPU (a cast within one GPU is staged).
            crate::backend::for_context(dst.ctx()).copy_sync(src, dst)?;
            return Ok(vec![dst.clone()]);
        }
    }
    let target = given.and_then(|g| g.iter().flatten().next()).map(|a| (a.shape().to_vec(), a.dtype()));

    let reads: Vec<Var> = inputs.iter().map(NDArray::var).collect();
    let values = engine().run_sync(&reads, &[], || inputs.iter().map(Dense::read_now).collect::<Result<Vec<_>>>())??;
    let results = kernel.compute(name, &values, &params, target.as_ref().map(|(s, d)| (s.as_slice(), *d)))?;

    let ctx = match params.ctx("ctx")? {
        Some(c) => c,
        None => inputs.first().map_or(Context::cpu(0), NDArray::ctx),
    };
    let outputs: Vec<NDArray> = match given {
        Some(g) => {
            crate::ensure!(g.len() == results.len(), "operator {name} has {} output(s), {} given", results.len(), g.len());
            g.iter()
                .zip(&results)
                .map(|(slot, r)| match slot {
                    Some(a) => r.check_target(a, name).map(|()| a.clone()),
                    None => r.allocate(ctx),
                })
                .collect::<Result<_>>()?
        }
        None => results.iter().map(|r| r.allocate(ctx)).collect::<Result<_>>()?,
    };

    let mut writes: Vec<Var> = Vec::new();
    for o in &outputs {
        if !writes.iter().any(|w| *w == o.var()) {
            writes.push(o.var());
        }
    }
    engine().run_sync(&[], &writes, || results.iter().zip(&outputs).try_for_each(|(r, o)| r.write_now(o)))??;
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::{DType, StorageType};

    fn f32_array(v: &[f32], shape: &[usize]) -> NDArray {
        let a = NDArray::zeros(shape, Context::cpu(0), DType::Float32).unwrap();
        a.copy_from_host(bytemuck::cast_slice(v)).unwrap();
        a
    }

    fn read(a: &NDArray) -> Vec<f32> {
        let mut out = vec![0f32; a.size()];
        a.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
        out
    }

    #[test]
    fn ops_allocate_or_fill_given_outputs_and_alias_their_inputs_safely() {
        let ones = invoke(lookup("_ones").unwrap(), &[], &["shape", "ctx", "dtype"], &["(2, 2)", "cpu(1)", "float32"], None).unwrap();
        assert_eq!((ones[0].shape(), ones[0].ctx()), (&[2usize, 2][..], Context::cpu(1)));
        let a = f32_array(&[1., 2., 3., 4.], &[2, 2]);
        // a += ones, in place (out=a): reads and writes the same array.
        invoke(lookup("broadcast_add").unwrap(), &[a.clone(), ones[0].clone()], &[], &[], Some(&[Some(a.clone())])).unwrap();
        assert_eq!(read(&a), vec![2., 3., 4., 5.]);
        let times = invoke(lookup("_mul_scalar").unwrap(), std::slice::from_ref(&a), &["scalar"], &["2"], None).unwrap();
        assert_eq!(read(&times[0]), vec![4., 6., 8., 10.]);
        let wrong = f32_array(&[0.; 3], &[3]);
        assert!(invoke(lookup("_copyto").unwrap(), std::slice::from_ref(&a), &[], &[], Some(&[Some(wrong)])).is_err());
        let err = invoke(lookup("sgd_update").unwrap(), &[], &[], &[], None).unwrap_err();
        assert_eq!(err.message(), "not supported by libkvstore: sgd_update");
    }

    #[test]
    fn slice_assign_into_itself_writes_only_the_box() {
        let a = f32_array(&[1., 2., 3., 4., 5., 6.], &[3, 2]);
        let keys = ["begin", "end", "step"];
        // a[1] = [7, 8] (out=a, what `a[i] = v` calls).
        let v = f32_array(&[7., 8.], &[1, 2]);
        let out = invoke(lookup("_slice_assign").unwrap(), &[a.clone(), v], &keys, &["(1,)", "(2,)", "(None,)"], Some(&[Some(a.clone())])).unwrap();
        assert!(out[0].same_view(&a));
        assert_eq!(read(&a), vec![1., 2., 7., 8., 5., 6.]);
        // a[2] = a[0] (`a[i] += x` assigns a view of the array itself).
        let row0 = a.at(0).unwrap().reshape(&[1, 2]).unwrap();
        invoke(lookup("_slice_assign").unwrap(), &[a.clone(), row0], &keys, &["(2,)", "(3,)", "(None,)"], Some(&[Some(a.clone())])).unwrap();
        assert_eq!(read(&a), vec![1., 2., 7., 8., 1., 2.]);
        // a[::2, 1] = 9 through the scalar op.
        invoke(lookup("_slice_assign_scalar").unwrap(), std::slice::from_ref(&a), &["begin", "end", "step", "scalar"], &["(None, 1)", "(None, 2)", "(2, None)", "9"], Some(&[Some(a.clone())])).unwrap();
        assert_eq!(read(&a), vec![1., 9., 7., 8., 1., 9.]);
        // A value of the wrong shape is refused before anything is written.
        let wrong = f32_array(&[0., 0., 0.], &[1, 3]);
        let err = invoke(lookup("_slice_assign").unwrap(), &[a.clone(), wrong], &keys, &["(0,)", "(1,)", "(None,)"], Some(&[Some(a.clone())])).unwrap_err();
        assert!(err.message().contains("the slice has shape (1,2)"), "{}", err.message());
        assert_eq!(read(&a), vec![1., 9., 7., 8., 1., 9.]);
        // Into another array: the input is left as it was.
        let b = f32_array(&[0.; 6], &[3, 2]);
        invoke(lookup("_slice_assign_scalar").unwrap(), std::slice::from_ref(&a), &["begin", "end", "scalar"], &["(0,)", "(1,)", "5"], Some(&[Some(b.clone())])).unwrap();
        assert_eq!((read(&a), read(&b)), (vec![1., 9., 7., 8., 1., 9.], vec![5., 5., 7., 8., 1., 9.]));
    }

    #[test]
    fn cast_storage_round_trips_through_row_sparse() {
        let a = f32_array(&[0., 0., 1., 2., 0., 0.], &[3, 2]);
        let rsp = invoke(lookup("cast_storage").unwrap(), &[a], &["stype"], &["row_sparse"], None).unwrap();
        assert_eq!(rsp[0].stype(), StorageType::RowSparse);
        assert_eq!(rsp[0].rows_now().unwrap().ids, vec![1]);
        let back = invoke(lookup("cast_storage").unwrap(), &[rsp[0].clone()], &["stype"], &["default"], None).unwrap();
        assert_eq!(read(&back[0]), vec![0., 0., 1., 2., 0., 0.]);
        let cast = invoke(lookup("cast").unwrap(), &[back[0].clone()], &["dtype"], &["int64"], None).unwrap();
        assert_eq!(cast[0].dtype(), DType::Int64);
    }
}
