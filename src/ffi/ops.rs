//! Operators: listing and describing them (what the frontends' code generators read at
//! import) and running them imperatively (`MXImperativeInvoke(Ex)`).
//!
//! Op handles (`AtomicSymbolCreator`, nnvm's `OpHandle`) are tokens into the registry
//! (`handle::token`), never pointers: they are decoded and range-checked, not dereferenced.

#![allow(non_snake_case)]

use super::args::{self, Out};
use super::cstr_table::{CStrTable, TokenTable};
use super::handle;
use super::types::NDArrayHandle;
use crate::error::Result;
use crate::ndarray::NDArray;
use super::handle::TokenKind;
use crate::ops::{self, OpRef};
use once_cell::sync::Lazy;
use std::cell::RefCell;
use std::os::raw::{c_char, c_int, c_void};

fn op_handle(op: OpRef) -> usize {
    handle::token(TokenKind::Op, op.index())
}

/// The op behind a handle from `NNGetOpHandle` / `MXSymbolListAtomicSymbolCreators`.
fn op_from_handle(h: *mut c_void, arg: &str) -> Result<OpRef> {
    let op = handle::token_index(TokenKind::Op, h, usize::MAX).and_then(OpRef::from_index);
    op.ok_or_else(|| crate::Error::new(format!("{arg} ({h:p}) is not an operator handle of libkvstore")))
}

static ALL_NAMES: Lazy<CStrTable> = Lazy::new(|| CStrTable::new(ops::all_names().iter().copied()));
static CREATORS: Lazy<TokenTable> = Lazy::new(|| TokenTable::new(ops::all_ops().map(op_handle).collect()));

/// The C strings of one op's metadata.
struct OpStrings {
    name: CStrTable,
    arg_names: CStrTable,
    arg_types: CStrTable,
    arg_descriptions: CStrTable,
}

static OP_STRINGS: Lazy<Vec<OpStrings>> = Lazy::new(|| {
    ops::all_ops()
        .map(|op| {
            let info = op.info();
            OpStrings {
                name: CStrTable::new([info.name, info.description, info.key_var_num_args]),
                arg_names: CStrTable::new(info.args.iter().map(|a| a.name)),
                arg_types: CStrTable::new(info.args.iter().map(|a| a.type_info)),
                arg_descriptions: CStrTable::new(info.args.iter().map(|a| a.description)),
            }
        })
        .collect()
});

fn write_names(out_size: Out<u32>, out_array: Out<*mut *const c_char>) {
    out_size.write(ALL_NAMES.len() as u32);
    out_array.write(ALL_NAMES.as_ptr());
}

/// Every registered op name, aliases included.
///
/// Ownership: the array and strings belong to the library and live for the process.
pub extern "C" fn MXListAllOpNames(out_size: *mut u32, out_array: *mut *mut *const c_char) -> c_int {
    ffi_boundary!({
        write_names(Out::new(out_size, "out_size")?, Out::new(out_array, "out_array")?);
        Ok(())
    })
}

/// nnvm's [`MXListAllOpNames`].
///
/// Ownership: the array and strings belong to the library and live for the process.
pub extern "C" fn NNListAllOpNames(out_size: *mut u32, out_array: *mut *mut *const c_char) -> c_int {
    ffi_boundary!({
        write_names(Out::new(out_size, "out_size")?, Out::new(out_array, "out_array")?);
        Ok(())
    })
}

/// The handle of the op named `op_name` (canonical name or alias).
///
/// Ownership: `*op_out` is a token valid for the process; it is never freed.
pub extern "C" fn NNGetOpHandle(op_name: *const c_char, op_out: *mut *mut c_void) -> c_int {
    ffi_boundary!({
        let out = Out::new(op_out, "op_out")?;
        let op = ops::lookup(args::string(op_name, "op_name")?)?;
        out.write(op_handle(op) as *mut c_void);
        Ok(())
    })
}

/// One handle per op (aliases not repeated).
///
/// Ownership: the array belongs to the library and lives for the process.
pub extern "C" fn MXSymbolListAtomicSymbolCreators(out_size: *mut u32, out_array: *mut *mut *mut c_void) -> c_int {
    ffi_boundary!({
        let (size, array) = (Out::new(out_size, "out_size")?, Out::new(out_array, "out_array")?);
        size.write(CREATORS.len() as u32);
        array.write(CREATORS.as_ptr());
        Ok(())
    })
}

/// An op's name, description, arguments (names, MXNet type strings, descriptions) and
/// variadic-count parameter. `return_type` may be NULL; when given it receives NULL, as
/// MXNet writes for every op.
///
/// Ownership: every string and array belongs to the library and lives for the process.
pub extern "C" fn MXSymbolGetAtomicSymbolInfo(
    creator: *mut c_void,
    name: *mut *const c_char,
    description: *mut *const c_char,
    num_args: *mut u32,
    arg_names: *mut *mut *const c_char,
    arg_type_infos: *mut *mut *const c_char,
    arg_descriptions: *mut *mut *const c_char,
    key_var_num_args: *mut *const c_char,
    return_type: *mut *const c_char,
) -> c_int {
    ffi_boundary!({
        let (name, description) = (Out::new(name, "name")?, Out::new(description, "description")?);
        let num_args = Out::new(num_args, "num_args")?;
        let (names, types) = (Out::new(arg_names, "arg_names")?, Out::new(arg_type_infos, "arg_type_infos")?);
        let descriptions = Out::new(arg_descriptions, "arg_descriptions")?;
        let key_var = Out::new(key_var_num_args, "key_var_num_args")?;
        let op = op_from_handle(creator, "creator")?;
        let strings = &OP_STRINGS[op.index()];
        name.write(strings.name.get(0));
        description.write(strings.name.get(1));
        num_args.write(strings.arg_names.len() as u32);
        names.write(strings.arg_names.as_ptr());
        types.write(strings.arg_types.as_ptr());
        descriptions.write(strings.arg_descriptions.as_ptr());
        key_var.write(strings.name.get(2));
        if let Ok(rt) = Out::new(return_type, "return_type") {
            rt.write(std::ptr::null());
        }
        Ok(())
    })
}

thread_local! {
    // MXNet returns allocated outputs and their storage types in thread-local arrays that the
    // next invocation on the thread overwrites.
    static OUTPUT_HANDLES: RefCell<Vec<NDArrayHandle>> = const { RefCell::new(Vec::new()) };
    static OUTPUT_STYPES: RefCell<Vec<c_int>> = const { RefCell::new(Vec::new()) };
}

/// The shared body of both invoke calls.
#[allow(clippy::too_many_arguments)]
fn invoke(
    creator: *mut c_void,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    num_params: c_int,
    param_keys: *mut *const c_char,
    param_vals: *mut *const c_char,
    out_stypes: Option<Out<*const c_int>>,
) -> Result<()> {
    let (n_out, outs) = (Out::new(num_outputs, "num_outputs")?, Out::new(outputs, "outputs")?);
    // Checked before any work: the outputs could not be returned (teardown).
    super::thread_buffers::check(&OUTPUT_HANDLES, "the outputs")?;
    super::thread_buffers::check(&OUTPUT_STYPES, "the output storage types")?;
    let op = op_from_handle(creator, "creator")?;
    let count = |n: c_int, what: &str| usize::try_from(n).map_err(|_| crate::Error::new(format!("{what} {n} is negative")));
    let input_handles = args::slice(inputs as *const NDArrayHandle, count(num_inputs, "num_inputs")?, "inputs")?;
    let input_arrays = handle::ndarrays(input_handles, "inputs")?;
    let n_params = count(num_params, "num_params")?;
    let keys = args::strings(param_keys as *const *const c_char, n_params, "param_keys")?;
    let vals = args::strings(param_vals as *const *const c_char, n_params, "param_vals")?;

    // SAFETY: `num_outputs` and `outputs` were checked non-NULL above (Out::new); MXNet's
    // contract makes both point to initialised values the caller owns for the call.
    let (given_count, given_ptr) = unsafe { (*num_outputs, *outputs) };
    let results: Vec<NDArray>;
    let handles: Vec<NDArrayHandle> = if given_ptr.is_null() || given_count == 0 {
        results = ops::invoke(op, &input_arrays, &keys, &vals, None)?;
        results.iter().map(|a| handle::new_ndarray(Some(a.clone()))).collect()
    } else {
        let given = args::slice(given_ptr as *const NDArrayHandle, count(given_count, "*num_outputs")?, "*outputs")?;
        let arrays = given
            .iter()
            .enumerate()
            .map(|(i, h)| handle::ndarray_or_empty(*h, &format!("outputs[{i}]")))
            .collect::<Result<Vec<_>>>()?;
        results = ops::invoke(op, &input_arrays, &keys, &vals, Some(&arrays))?;
        // Empty arrays (MXNDArrayCreateNone) given as outputs now hold the results.
        handle::fill_empty(given, &results);
        given.to_vec()
    };
    let stypes: Vec<c_int> = results.iter().map(|a| a.stype() as c_int).collect();
    let stypes_ptr = super::thread_buffers::keep(&OUTPUT_STYPES, stypes, "the output storage types")? as *const c_int;
    if !given_ptr.is_null() && given_count != 0 {
        // The caller's own array stays in place.
        n_out.write(given_count);
        outs.write(given_ptr);
    } else {
        let n = handles.len() as c_int;
        let ptr = super::thread_buffers::keep(&OUTPUT_HANDLES, handles, "the outputs")?;
        n_out.write(n);
        outs.write(ptr);
    }
    if let Some(o) = out_stypes {
        o.write(stypes_ptr);
    }
    Ok(())
}

/// Runs an op. With `*outputs == NULL` (or `*num_outputs == 0`) the outputs are allocated and
/// `*outputs` / `*num_outputs` describe them; otherwise the results are written into the
/// `*num_outputs` given arrays (an empty array from `MXNDArrayCreateNone` receives a new one).
/// Parameters are strings, as MXNet's frontends send them (`shape="(2, 3)"`, `scalar="2.0"`).
/// An op that libkvstore registers but does not compute fails with "not supported by
/// libkvstore: NAME".
///
/// Ownership: allocated output handles belong to the caller (`MXNDArrayFree`); the array
/// holding them belongs to the library, valid until the next invoke on this thread.
pub extern "C" fn MXImperativeInvoke(
    creator: *mut c_void,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    num_params: c_int,
    param_keys: *mut *const c_char,
    param_vals: *mut *const c_char,
) -> c_int {
    ffi_boundary!({
        invoke(creator, num_inputs, inputs, num_outputs, outputs, num_params, param_keys, param_vals, None)
    })
}

/// [`MXImperativeInvoke`], also reporting each output's storage type in `*out_stypes`
/// (0 default, 1 row_sparse).
///
/// Ownership: as `MXImperativeInvoke`; `*out_stypes` is valid until the next invoke on this thread.
pub extern "C" fn MXImperativeInvokeEx(
    creator: *mut c_void,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    num_params: c_int,
    param_keys: *mut *const c_char,
    param_vals: *mut *const c_char,
    out_stypes: *mut *const c_int,
) -> c_int {
    ffi_boundary!({
        let stypes = Out::new(out_stypes, "out_stypes")?;
        invoke(creator, num_inputs, inputs, num_outputs, outputs, num_params, param_keys, param_vals, Some(stypes))
    })
}

/// The legacy function registry: empty in libkvstore (every op is reached through the op
/// registry instead).
///
/// Ownership: `*out_array` belongs to the library.
pub extern "C" fn MXListFunctions(out_size: *mut u32, out_array: *mut *mut *const c_void) -> c_int {
    ffi_boundary!({
        let (size, array) = (Out::new(out_size, "out_size")?, Out::new(out_array, "out_array")?);
        size.write(0);
        array.write(CREATORS.as_ptr() as *mut *const c_void);
        Ok(())
    })
}

/// The packed-function registry (MXNet's `_api_internal` / numpy FFI): empty in libkvstore.
///
/// Ownership: `*out_array` belongs to the library.
pub extern "C" fn MXNetFuncListGlobalNames(out_size: *mut u32, out_array: *mut *mut *const c_char) -> c_int {
    ffi_boundary!({
        let (size, array) = (Out::new(out_size, "out_size")?, Out::new(out_array, "out_array")?);
        size.write(0);
        array.write(ALL_NAMES.as_ptr());
        Ok(())
    })
}

/// Registers a custom op's property creator. libkvstore accepts the registration (the Python
/// frontend registers its own ops at import) but never runs custom ops.
///
/// Ownership: `op_type` is read during the call only.
pub extern "C" fn MXCustomOpRegister(op_type: *const c_char, creator: super::types::CustomOpPropCreator) -> c_int {
    let _ = creator;
    ffi_boundary!({
        args::string(op_type, "op_type")?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_handles_round_trip_and_foreign_tokens_are_refused() {
        let op = ops::lookup("_copyto").unwrap();
        assert_eq!(op_from_handle(op_handle(op) as *mut c_void, "h").unwrap(), op);
        assert!(op_from_handle(std::ptr::null_mut(), "h").is_err());
        assert!(op_from_handle(0x10 as *mut c_void, "h").is_err());
        assert!(op_from_handle(((1usize << 30) << 4 | TokenKind::Op as usize) as *mut c_void, "h").is_err());
    }
}
