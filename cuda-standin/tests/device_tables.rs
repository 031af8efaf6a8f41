//! Device addresses that kernels read from memory or from a struct parameter (sum.cu's
//! `Sources`, fused.cu's descriptor table) go through `dev_ptr` and are translated by the
//! launch like pointer parameters: the sums come out right on the stand-in's device memory
//! (whose addresses fault when the host dereferences them untranslated), and a freed address
//! inside a table is an illegal address, sticky, as on a GPU.

#[macro_use]
mod common;
use common::{nvrtc, setup, Api, Ptr};
use std::ffi::{c_void, CString};
use std::ptr::null_mut;

/// Kernel `name` of kernels/`file`, from NVRTC's CUBIN through the driver entry points.
fn kernel(api: &Api, nvrtc: &nvrtc::Nvrtc, file: &str, name: &str) -> Ptr {
    let image = nvrtc.compile(file, "sm_90");
    let (mut module, mut f): (Ptr, Ptr) = (null_mut(), null_mut());
    ok!(api.cuModuleLoadData(&mut module, image.as_ptr().cast()));
    let name = CString::new(name).unwrap();
    ok!(api.cuModuleGetFunction(&mut f, module, name.as_ptr()));
    f
}

fn upload<T: Copy>(api: &Api, values: &[T]) -> u64 {
    let bytes = std::mem::size_of_val(values);
    let mut d = 0u64;
    ok!(api.cuMemAlloc_v2(&mut d, bytes.max(1)));
    ok!(api.cuMemcpyHtoD_v2(d, values.as_ptr().cast(), bytes));
    d
}

fn download(api: &Api, d: u64, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    ok!(api.cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), d, n * 4));
    out
}

/// Launches `f` on the default stream with one pointer per parameter value.
fn launch(api: &Api, f: Ptr, grid: u32, block: u32, params: &mut [*mut c_void]) -> i32 {
    cu!(api.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()))
}

/// sum_float32(dst, Sources, n_src, n, order = serial, acc_in_dst = 0).
fn launch_sum(api: &Api, f: Ptr, dst: u64, sources: &[u64], n: u64) -> i32 {
    let mut table = [0u64; 16];
    table[..sources.len()].copy_from_slice(sources);
    let (mut dst, mut n_src, mut n, mut order, mut acc) = (dst, sources.len() as u32, n, 0u32, 0u32);
    let mut params: [*mut c_void; 6] = [
        (&mut dst as *mut u64).cast(),
        table.as_mut_ptr().cast(),
        (&mut n_src as *mut u32).cast(),
        (&mut n as *mut u64).cast(),
        (&mut order as *mut u32).cast(),
        (&mut acc as *mut u32).cast(),
    ];
    launch(api, f, 3, 32, &mut params)
}

isolated_test!(sources_in_a_struct_parameter_are_translated, [], {
    let Some(nvrtc) = nvrtc::load() else { return };
    let api = Api::load();
    setup(&api, 0);
    let f = kernel(&api, &nvrtc, "sum.cu", "sum_float32");
    let n = 1000usize;
    let sources: Vec<Vec<f32>> = (0..3).map(|s| (0..n).map(|i| (i * (s + 1)) as f32 * 0.5).collect()).collect();
    let device: Vec<u64> = sources.iter().map(|s| upload(&api, s)).collect();
    let dst = upload(&api, &vec![0f32; n]);
    assert_eq!(launch_sum(&api, f, dst, &device, n as u64), 0);
    ok!(api.cuCtxSynchronize());
    let expected: Vec<f32> = (0..n).map(|i| sources[0][i] + sources[1][i] + sources[2][i]).collect();
    assert_eq!(download(&api, dst, n), expected);

    // A freed source, known only from inside the struct: an illegal address, sticky.
    ok!(api.cuMemFree_v2(device[2]));
    assert_eq!(launch_sum(&api, f, dst, &device, n as u64), 0, "a launch is not checked before it runs");
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
    let mut again = 0u64;
    assert_eq!(cu!(api.cuMemAlloc_v2(&mut again, 64)), 700, "sticky");
});

/// One 48-byte KeyDesc of kernels/fused.cu, then its sources' addresses.
fn fused_table(dst: u64, sources: &[u64], n: u64) -> Vec<u64> {
    let mut t = vec![dst, 48, n, 0, sources.len() as u64, 0];
    t.extend_from_slice(sources);
    t
}

isolated_test!(addresses_in_a_device_table_are_translated, [], {
    let Some(nvrtc) = nvrtc::load() else { return };
    let api = Api::load();
    setup(&api, 0);
    let f = kernel(&api, &nvrtc, "fused.cu", "fused_sum");
    let n = 300usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.25 * i as f32).collect();
    let (da, db, dst) = (upload(&api, &a), upload(&api, &b), upload(&api, &vec![0f32; n]));
    // dtype 0 (float32) and order 0 (serial) are the zero upper halves of word 4 and word 5.
    let table = upload(&api, &fused_table(dst, &[da, db], n as u64));
    let (mut t, mut n_desc, mut per_block) = (table, 1u32, 128u32);
    let mut params: [*mut c_void; 3] = [(&mut t as *mut u64).cast(), (&mut n_desc as *mut u32).cast(), (&mut per_block as *mut u32).cast()];
    assert_eq!(launch(&api, f, n.div_ceil(128) as u32, 64, &mut params), 0);
    ok!(api.cuCtxSynchronize());
    let expected: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(download(&api, dst, n), expected);

    // The output address in the table freed: an illegal address.
    ok!(api.cuMemFree_v2(dst));
    assert_eq!(launch(&api, f, n.div_ceil(128) as u32, 64, &mut params), 0);
    assert_eq!(cu!(api.cuCtxSynchronize()), 700);
});
