//! The CUDA stand-in's host build of `kernels/*.cu` against the CPU loops of `src/reduce/`
//! and `src/compression/`, bit for bit (NaN compared as NaN: a GPU answers the canonical
//! NaN), for every kernel family: sums of every dtype in both orders with 1 to 20 sources
//! (cut into launches as `gpu::launch` cuts them), the fused small-key sum over a table
//! packed by `gpu::fused`, all 81 casts, fills, byte copies, 2-bit and 1-bit compression
//! over rounds of residuals, and the row-sparse kernels. Launches go through the stand-in's
//! test-only `cuStandinRunKernel` (host pointers, no driver), in shapes where threads loop.
//!
//! The stand-in is `$KVSTORE_CUDA_STANDIN_DIR/libcuda.so.1`, or built by
//! `scripts/cuda-standin.sh`. With NVRTC present (`KVSTORE_NVRTC_PATH`; required when
//! `KVSTORE_REQUIRE_NVRTC` is set) the registry's names are also compared with the entries of
//! the PTX NVRTC makes from the same sources.

use kvstore::base::{cast, DType, ALL_DTYPES};
use kvstore::compression::{CompressionType, GradientCompression};
use kvstore::gpu::fused::{pack, SmallKey};
use kvstore::gpu::kernels::{compile_unit, SOURCES};
use kvstore::gpu::launch::{grid_blocks, sum_launches, MAX_SOURCES};
use kvstore::gpu::nvrtc::{nvrtc, Target};
use kvstore::reduce::{sparse, sum_into, SumOrder};
use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

#[allow(dead_code)] // lib_dir: this test needs no libkvstore.so
mod common;
use common::{root, Rng};

#[repr(C)]
#[derive(Clone, Copy)]
struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}

type RunKernel = unsafe extern "C" fn(*const c_char, *mut *mut c_void, Dim3, Dim3) -> c_int;
type KernelName = unsafe extern "C" fn(c_int) -> *const c_char;

struct Standin {
    run: RunKernel,
    name: KernelName,
    /// The entries of NVRTC's PTX of kernels/, when NVRTC is there.
    nvrtc_entries: Option<BTreeSet<String>>,
    _lib: libloading::Library,
}

fn standin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KVSTORE_CUDA_STANDIN_DIR") {
        return dir.into();
    }
    let out = Command::new(root().join("scripts/cuda-standin.sh")).output().expect("run scripts/cuda-standin.sh");
    assert!(out.status.success(), "scripts/cuda-standin.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout.lines().last().expect("scripts/cuda-standin.sh prints the directory last").into()
}

/// The kernels NVRTC defines (`.entry NAME(` in the PTX of every unit).
fn nvrtc_entries() -> Option<BTreeSet<String>> {
    let nv = match nvrtc() {
        Ok(nv) => nv,
        Err(reason) => {
            assert!(std::env::var_os("KVSTORE_REQUIRE_NVRTC").is_none(), "KVSTORE_REQUIRE_NVRTC is set but {reason}");
            return None;
        }
    };
    let mut names = BTreeSet::new();
    for (file, body) in SOURCES {
        let ptx = compile_unit(nv, file, body, Target::Ptx(80)).unwrap_or_else(|e| panic!("{e}"));
        for line in String::from_utf8_lossy(&ptx.image).lines() {
            if let Some(rest) = line.trim().strip_prefix(".visible .entry ").or_else(|| line.trim().strip_prefix(".entry ")) {
                names.insert(rest.split('(').next().unwrap().trim().to_string());
            }
        }
    }
    Some(names)
}

fn standin() -> &'static Standin {
    static STANDIN: OnceLock<Standin> = OnceLock::new();
    STANDIN.get_or_init(|| {
        // NVRTC first: it looks for a loaded libcuda.so.1 while it compiles, and must not
        // find the stand-in (the driver entry points are not this test's subject).
        let nvrtc_entries = nvrtc_entries();
        let path = standin_dir().join("libcuda.so.1");
        // SAFETY: the stand-in is a plain shared library with no initialisers that need care.
        let lib = unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| panic!("load {}: {e}", path.display()));
        // SAFETY: the symbols have exactly these types (cuda-standin/src/host_kernels.rs).
        let run = *unsafe { lib.get::<RunKernel>(b"cuStandinRunKernel\0") }.expect("the stand-in exports cuStandinRunKernel");
        // SAFETY: as above.
        let name = *unsafe { lib.get::<KernelName>(b"cuStandinKernelName\0") }.expect("the stand-in exports cuStandinKernelName");
        Standin { run, name, nvrtc_entries, _lib: lib }
    })
}

/// A kernel's parameters: each value's bytes, kept alive for the launch.
#[derive(Default)]
struct Params(Vec<Vec<u64>>);
impl Params {
    fn val<T: bytemuck::Pod>(mut self, v: T) -> Self {
        let mut slot = vec![0u64; std::mem::size_of::<T>().div_ceil(8).max(1)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut slot)[..std::mem::size_of::<T>()].copy_from_slice(bytemuck::bytes_of(&v));
        self.0.push(slot);
        self
    }
    fn ptr<T>(self, p: *const T) -> Self {
        self.val(p as u64)
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        let mut slot = vec![0u64; b.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut slot)[..b.len()].copy_from_slice(b);
        self.0.push(slot);
        self
    }
}

/// Threads per block in these launches: the grids are kept small (`grid_blocks` for two
/// SMs), so most threads go round the grid-stride loop several times.
const THREADS: u32 = 64;

fn launch(name: &str, mut params: Params, grid: u32, block: u32) {
    let mut slots: Vec<*mut c_void> = params.0.iter_mut().map(|s| s.as_mut_ptr().cast()).collect();
    let c_name = CString::new(name).unwrap();
    let (g, b) = (Dim3 { x: grid, y: 1, z: 1 }, Dim3 { x: block, y: 1, z: 1 });
    // SAFETY: every caller passes the parameters `name` declares, over host buffers covering
    // the launch; the stand-in runs it on this thread.
    let rc = unsafe { (standin().run)(c_name.as_ptr(), slots.as_mut_ptr(), g, b) };
    assert_eq!(rc, 0, "launch of {name} failed");
}

fn launch_n(name: &str, params: Params, n: u64) {
    launch(name, params, grid_blocks(n, THREADS, 2), THREADS);
}

/// Values that the kernels must get exactly right, per float type: ±0, subnormals, ±Inf,
/// quiet and signalling NaN, the largest finite values (whose sums overflow), values out of
/// every integer type's range and values around float16's largest.
fn special_bits(dtype: DType) -> Vec<u64> {
    match dtype {
        DType::Float32 => {
            let mut v: Vec<u64> = [0.0f32, -0.0, f32::MAX, -f32::MAX, 1.0, -1.0, 65504.0, 65519.0, 65520.0, -65520.0, 255.5, -128.5, 3e9, -3e9, 1e19, -1e19, 9.3e18, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-8, 6e-8]
                .iter()
                .map(|f| f.to_bits() as u64)
                .collect();
            v.extend([0x1, 0x807f_ffff, 0x0080_0000, 0x7fa0_0001, 0xffc0_1234, 0x7f80_0001, 0xff80_1fff, 0x3380_0000, 0x3380_0001]);
            v
        }
        DType::Float64 => {
            let mut v: Vec<u64> = [0.0f64, -0.0, f64::MAX, -f64::MAX, 1.0, 65520.0, 2147483647.5, -2147483648.9, 9223372036854775807.0, -9.3e18, 1e300, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-310, 1e-45]
                .iter()
                .map(|f| f.to_bits())
                .collect();
            v.extend([0x1, 0x8000_0000_0000_0001, 0x7ff4_0000_0000_0001, 0xfff8_0000_dead_beef]);
            v
        }
        DType::Float16 => vec![0x0000, 0x8000, 0x0001, 0x03ff, 0x8001, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe35, 0x3c00, 0x5bf8, 0x5bfc],
        DType::Bfloat16 => vec![0x0000, 0x8000, 0x0001, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3f80, 0x4f80, 0x5f00, 0xdf00],
        DType::Bool => vec![0, 1],
        DType::Uint8 | DType::Int8 => vec![0, 0x7f, 0x80, 0xff, 1],
        DType::Int32 => vec![0, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 1],
        DType::Int64 => vec![0, 0x7fff_ffff_ffff_ffff, 0x8000_0000_0000_0000, u64::MAX, 1],
    }
}

/// `n` elements of `dtype`: a mix of special values, arbitrary bit patterns and modest
/// values whose sums round.
fn values(rng: &mut Rng, dtype: DType, n: usize) -> Vec<u8> {
    let specials = special_bits(dtype);
    let size = dtype.size();
    let mut out = Vec::with_capacity(n * size);
    for _ in 0..n {
        let bits = match rng.below(8) {
            0 => specials[rng.below(specials.len() as u64) as usize],
            1 | 2 if dtype != DType::Bool => rng.next(),
            _ => {
                let modest = (rng.below(1 << 20) as f64 - (1 << 19) as f64) / 4096.0;
                match dtype {
                    DType::Float32 => (modest as f32).to_bits() as u64,
                    DType::Float64 => modest.to_bits(),
                    DType::Float16 => half::f16::from_f64(modest).to_bits() as u64,
                    DType::Bfloat16 => half::bf16::from_f64(modest).to_bits() as u64,
                    DType::Bool => rng.below(2),
                    _ => modest as i64 as u64,
                }
            }
        };
        out.extend_from_slice(&bits.to_le_bytes()[..size]);
    }
    out
}

fn is_nan(dtype: DType, bits: u64) -> bool {
    match dtype {
        DType::Float32 => f32::from_bits(bits as u32).is_nan(),
        DType::Float64 => f64::from_bits(bits).is_nan(),
        DType::Float16 => half::f16::from_bits(bits as u16).is_nan(),
        DType::Bfloat16 => half::bf16::from_bits(bits as u16).is_nan(),
        _ => false,
    }
}

/// Equal bit for bit, but any NaN equals any NaN.
fn assert_same(dtype: DType, kernel: &[u8], cpu: &[u8], what: &str) {
    assert_eq!(kernel.len(), cpu.len(), "{what}: lengths");
    let size = dtype.size();
    for (i, (k, c)) in kernel.chunks(size).zip(cpu.chunks(size)).enumerate() {
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..size].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let (k, c) = (word(k), word(c));
        assert!(k == c || (is_nan(dtype, k) && is_nan(dtype, c)), "{what}: element {i} is {k:#x}, the CPU's {c:#x}");
    }
}

fn order_code(order: SumOrder) -> u32 {
    match order {
        SumOrder::Serial => 0,
        SumOrder::CpuComm => 1,
    }
}

const SUMMABLE: [DType; 8] = [DType::Float32, DType::Float64, DType::Float16, DType::Bfloat16, DType::Uint8, DType::Int8, DType::Int32, DType::Int64];

/// `u64` storage: aligned for every dtype.
fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut v = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..bytes.len()].copy_from_slice(bytes);
    v
}

fn as_bytes(v: &[u64], len: usize) -> &[u8] {
    &bytemuck::cast_slice(v)[..len]
}

#[test]
fn sums_equal_the_cpu_loops_for_every_dtype_order_and_source_count() {
    let mut rng = Rng(0x5eed_0001);
    for dtype in SUMMABLE {
        for n_src in 1..=20usize {
            for order in [SumOrder::Serial, SumOrder::CpuComm] {
                let n = [1usize, 37, 1001][n_src % 3];
                let bytes = n * dtype.size();
                let srcs: Vec<Vec<u64>> = (0..n_src).map(|_| aligned(&values(&mut rng, dtype, n))).collect();
                let src_slices: Vec<&[u8]> = srcs.iter().map(|s| as_bytes(s, bytes)).collect();
                let mut cpu = vec![0u8; bytes];
                sum_into(dtype, order, &mut cpu, &src_slices, 1);

                // Each sum twice: plain, and with joined outputs written by its last launch
                // (`sum_out_<dtype>`, 1 to 3 of them).
                for n_out in [0usize, 1 + n_src % 3] {
                    let mut dst = vec![0u64; bytes.div_ceil(8)];
                    let mut outs: Vec<Vec<u64>> = (0..n_out).map(|_| vec![0u64; bytes.div_ceil(8)]).collect();
                    let launches = sum_launches(n_src, order);
                    assert_eq!(launches.len() > 1, n_src > MAX_SOURCES - 3 * (order == SumOrder::CpuComm) as usize);
                    let last = launches.len() - 1;
                    for (i, l) in launches.into_iter().enumerate() {
                        let mut sources = [0u64; MAX_SOURCES];
                        for (slot, s) in sources.iter_mut().zip(&srcs[l.sources.clone()]) {
                            *slot = s.as_ptr() as u64;
                        }
                        let params = Params::default()
                            .ptr(dst.as_mut_ptr())
                            .val(sources)
                            .val(l.sources.len() as u32)
                            .val(n as u64)
                            .val(order_code(order))
                            .val(l.acc_in_dst as u32);
                        if i == last && n_out > 0 {
                            let mut table = [0u64; MAX_SOURCES];
                            for (slot, o) in table.iter_mut().zip(outs.iter_mut()) {
                                *slot = o.as_mut_ptr() as u64;
                            }
                            launch_n(&format!("sum_out_{}", dtype.name()), params.val(table).val(n_out as u32), n as u64);
                        } else {
                            launch_n(&format!("sum_{}", dtype.name()), params, n as u64);
                        }
                    }
                    let what = format!("sum_{} of {n_src} values, {order:?}, {n_out} outputs", dtype.name());
                    assert_same(dtype, as_bytes(&dst, bytes), &cpu, &what);
                    for o in &outs {
                        assert_same(dtype, as_bytes(o, bytes), &cpu, &format!("{what}: an output"));
                    }
                }
            }
        }
    }
}

#[test]
fn the_fused_sum_equals_the_cpu_loops_for_every_key_of_a_packed_table() {
    let mut rng = Rng(0x5eed_0002);
    let mut by_value_rounds = 0;
    for round in 0..12 {
        let n_keys = 1 + rng.below(12) as usize;
        let mut inputs: Vec<FusedInput> = Vec::new();
        for k in 0..n_keys {
            let dtype = SUMMABLE[rng.below(8) as usize];
            let n = [0usize, 1, 255, 256, 257, 1000][(k + round) % 6];
            let n_src = 1 + rng.below(20) as usize;
            let order = if rng.below(2) == 0 { SumOrder::Serial } else { SumOrder::CpuComm };
            let srcs: Vec<Vec<u64>> = (0..n_src).map(|_| aligned(&values(&mut rng, dtype, n))).collect();
            inputs.push((dtype, n, order, srcs, vec![0u64; (n * dtype.size()).div_ceil(8).max(1)]));
        }
        let keys: Vec<SmallKey> = inputs
            .iter_mut()
            .map(|(dtype, n, order, srcs, dst)| SmallKey {
                dst: dst.as_mut_ptr() as u64,
                srcs: srcs.iter().map(|s| s.as_ptr() as u64).collect(),
                n: *n as u64,
                dtype: *dtype,
                order: *order,
            })
            .collect();
        let elems_per_block = [256u32, 100, 1][round % 3];
        let table = pack(&keys, elems_per_block).unwrap();
        if table.n_blocks == 0 {
            continue;
        }
        let table_words = aligned(&table.bytes);
        let params = Params::default().ptr(table_words.as_ptr()).val(table.n_desc).val(table.elems_per_block);
        launch("fused_sum", params, table.n_blocks as u32, 96);
        let check = |inputs: &[FusedInput], how: &str| {
            for (k, (dtype, n, order, srcs, dst)) in inputs.iter().enumerate() {
                let bytes = n * dtype.size();
                let src_slices: Vec<&[u8]> = srcs.iter().map(|s| as_bytes(s, bytes)).collect();
                let mut cpu = vec![0u8; bytes];
                if *n > 0 {
                    sum_into(*dtype, *order, &mut cpu, &src_slices, 1);
                }
                let what = format!("{how} key {k} of round {round}: {} x {n} {}, {order:?}", srcs.len(), dtype.name());
                assert_same(*dtype, as_bytes(dst, bytes), &cpu, &what);
            }
        };
        check(&inputs, "fused_sum");
        // The same table passed by value (kernels/fused.cu's ParamTable), where it fits.
        if table.bytes.len() <= PARAM_TABLE_BYTES {
            for input in &mut inputs {
                input.4.iter_mut().for_each(|w| *w = 0);
            }
            let mut by_value = table.bytes.clone();
            by_value.resize(PARAM_TABLE_BYTES, 0);
            let params = Params::default().bytes(&by_value).val(table.n_desc).val(table.elems_per_block);
            launch("fused_sum_by_value", params, table.n_blocks as u32, 96);
            check(&inputs, "fused_sum_by_value");
            by_value_rounds += 1;
        }
    }
    assert!(by_value_rounds >= 4, "too few tables fitted a launch's parameters: {by_value_rounds}");
}

/// A key of the fused test: dtype, elements, order, sources, output.
type FusedInput = (DType, usize, SumOrder, Vec<Vec<u64>>, Vec<u64>);

/// The size of `ParamTable` in kernels/fused.cu.
const PARAM_TABLE_BYTES: usize = 4000;

#[test]
fn all_81_casts_equal_the_cpu_casts() {
    let mut rng = Rng(0x5eed_0003);
    let n = 333;
    for from in ALL_DTYPES {
        // Every special value of the source type, then a mix.
        let mut src = Vec::new();
        for bits in special_bits(from) {
            src.extend_from_slice(&bits.to_le_bytes()[..from.size()]);
        }
        src.extend(values(&mut rng, from, n - src.len() / from.size()));
        let src = aligned(&src);
        for to in ALL_DTYPES {
            let mut cpu = vec![0u8; n * to.size()];
            cast(from, as_bytes(&src, n * from.size()), to, &mut cpu);
            let mut dst = vec![0u64; (n * to.size()).div_ceil(8)];
            let name = format!("cast_{}_to_{}", from.name(), to.name());
            launch_n(&name, Params::default().ptr(dst.as_mut_ptr()).ptr(src.as_ptr()).val(n as u64), n as u64);
            assert_same(to, as_bytes(&dst, n * to.size()), &cpu, &name);
        }
    }
}

#[test]
fn fills_and_byte_copies_write_exactly_their_range() {
    let mut rng = Rng(0x5eed_0004);
    for dtype in ALL_DTYPES {
        for value_bits in special_bits(dtype) {
            let n = 1 + rng.below(700) as usize;
            let size = dtype.size();
            // One element more than the fill, which must stay untouched.
            let mut dst = vec![0xa5a5_a5a5_a5a5_a5a5u64; ((n + 1) * size).div_ceil(8)];
            let value = &value_bits.to_le_bytes()[..size];
            let params = Params::default().ptr(dst.as_mut_ptr()).bytes(value).val(n as u64);
            launch_n(&format!("fill_{}", dtype.name()), params, n as u64);
            let mut expected: Vec<u8> = value.repeat(n);
            expected.extend_from_slice(&[0xa5; 8][..size]);
            assert_eq!(as_bytes(&dst, (n + 1) * size), &expected[..], "fill_{} with {value_bits:#x}", dtype.name());
        }
    }
    for nbytes in [1usize, 7, 64, 1001, 4099] {
        let src = values(&mut rng, DType::Uint8, nbytes);
        let mut dst = vec![0u8; nbytes + 1];
        launch_n("copy_bytes", Params::default().ptr(dst.as_mut_ptr()).ptr(src.as_ptr()).val(nbytes as u64), nbytes as u64);
        assert_eq!(&dst[..nbytes], &src[..], "copy_bytes of {nbytes}");
        assert_eq!(dst[nbytes], 0, "copy_bytes of {nbytes} wrote past its end");
    }
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Gradients: modest values around the threshold, with a few ±0, subnormals, Inf and NaN.
fn gradients(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.below(40) {
            0 => f32::from_bits({ let s = special_bits(DType::Float32); s[rng.below(s.len() as u64) as usize] } as u32),
            _ => (rng.below(4001) as f32 - 2000.0) / 1700.0,
        })
        .collect()
}

#[test]
fn compression_equals_the_cpu_over_rounds_of_residuals() {
    let mut rng = Rng(0x5eed_0005);
    for kind in [CompressionType::TwoBit, CompressionType::OneBit] {
        let (q, dq) = match kind {
            CompressionType::TwoBit => ("quantize_2bit", "dequantize_2bit"),
            CompressionType::OneBit => ("quantize_1bit", "dequantize_1bit"),
        };
        for (n, threshold) in [(1usize, 0.5f32), (31, 0.25), (1000, 0.5), (1027, 1.5)] {
            let gc = GradientCompression { kind, threshold };
            let packed_len = gc.packed_bytes(n);
            let n_src = 1 + n % 4;
            let mut cpu_res = vec![vec![0f32; n]; n_src];
            let mut gpu_res = cpu_res.clone();
            for round in 0..20 {
                let srcs: Vec<Vec<f32>> = (0..n_src).map(|_| gradients(&mut rng, n)).collect();
                // The CPU: CommDevice's compressed reduction.
                let mut cpu_out = vec![0f32; n];
                let (mut cpu_packed, mut scratch) = (vec![0u8; packed_len], vec![0f32; n]);
                let src_refs: Vec<&[f32]> = srcs.iter().map(|s| &s[..]).collect();
                let mut res_refs: Vec<&mut [f32]> = cpu_res.iter_mut().map(|r| &mut r[..]).collect();
                gc.reduce(&src_refs, &mut res_refs, &mut cpu_out, &mut cpu_packed, &mut scratch);
                // The kernels: quantize each source, dequantize into the output (accumulating
                // after the first), as the GPU backend launches them.
                let mut out = vec![0f32; n];
                let mut packed = vec![0xffu8; packed_len];
                for (i, (src, res)) in srcs.iter().zip(gpu_res.iter_mut()).enumerate() {
                    let mut p = Params::default().ptr(packed.as_mut_ptr()).val(packed_len as u64).ptr(src.as_ptr()).ptr(res.as_mut_ptr());
                    p = p.val(n as u64).val(threshold);
                    launch_n(q, p, packed_len as u64);
                    let mut d = Params::default().ptr(out.as_mut_ptr()).ptr(packed.as_ptr()).val(n as u64);
                    if kind == CompressionType::TwoBit {
                        d = d.val(threshold);
                    }
                    launch_n(dq, d.val((i > 0) as u32), n as u64);
                }
                let what = format!("{kind:?} n={n} threshold={threshold} round {round}");
                // The last source's packed codes are what both have in `packed`.
                assert_eq!(packed, cpu_packed, "{what}: packed codes");
                for (g, c) in gpu_res.iter().zip(&cpu_res) {
                    assert_same(DType::Float32, f32_bytes(g), f32_bytes(c), &format!("{what}: residual"));
                }
                assert_same(DType::Float32, f32_bytes(&out), f32_bytes(&cpu_out), &format!("{what}: merged output"));
            }
        }
    }
}

/// Sorted unique row ids below `limit`, each present with probability 1/2.
fn row_ids(rng: &mut Rng, limit: i64) -> Vec<i64> {
    (0..limit).filter(|_| rng.below(2) == 0).collect()
}

#[test]
fn row_sparse_accumulate_equals_the_cpu_sum_of_rows() {
    let mut rng = Rng(0x5eed_0006);
    for dtype in SUMMABLE {
        for row_len in [1usize, 3, 70] {
            let n_inputs = 1 + rng.below(5) as usize;
            let inputs: Vec<(Vec<i64>, Vec<u64>)> = (0..n_inputs)
                .map(|_| {
                    let ids = row_ids(&mut rng, 40);
                    let data = aligned(&values(&mut rng, dtype, ids.len() * row_len));
                    (ids, data)
                })
                .collect();
            let row_bytes = row_len * dtype.size();
            let refs: Vec<(&[i64], &[u8])> = inputs.iter().map(|(ids, d)| (&ids[..], as_bytes(d, ids.len() * row_bytes))).collect();
            let (rows, cpu) = sparse::sum_rows(dtype, row_bytes, &refs).unwrap();

            // The host's plan: where each input row lands, and whether it is the row's first.
            let mut out = vec![0u64; (rows.len() * row_bytes).div_ceil(8).max(1)];
            let mut seen = vec![false; rows.len()];
            for (ids, data) in &inputs {
                let out_pos: Vec<i64> = ids.iter().map(|id| rows.binary_search(id).unwrap() as i64).collect();
                let first: Vec<u8> = out_pos.iter().map(|p| !std::mem::replace(&mut seen[*p as usize], true) as u8).collect();
                let total = (ids.len() * row_len) as u64;
                let params = Params::default()
                    .ptr(out.as_mut_ptr())
                    .ptr(data.as_ptr())
                    .ptr(out_pos.as_ptr())
                    .ptr(first.as_ptr())
                    .val(ids.len() as u64)
                    .val(row_len as u64);
                launch_n(&format!("rsp_accumulate_{}", dtype.name()), params, total);
            }
            let what = format!("rsp_accumulate_{} of {n_inputs} inputs, rows of {row_len}", dtype.name());
            assert_same(dtype, as_bytes(&out, rows.len() * row_bytes), cpu.bytes(), &what);
        }
    }
}

/// rsp_gather and rsp_scatter share their parameters: (out, in, ids, n_ids, n_rows, row_bytes).
fn launch_rows(kernel: &str, out: *mut u8, input: *const u8, ids: &[i64], n_rows: i64, row_bytes: usize) {
    let params = Params::default().ptr(out).ptr(input).ptr(ids.as_ptr()).val(ids.len() as u64).val(n_rows as u64).val(row_bytes as u64);
    launch_n(kernel, params, (ids.len() * row_bytes) as u64);
}

#[test]
fn row_gather_and_scatter_equal_retain_and_densify_with_ids_out_of_range() {
    let mut rng = Rng(0x5eed_0007);
    for row_bytes in [1usize, 4, 24, 130] {
        let n_rows = 1 + rng.below(50) as i64;
        let dense = values(&mut rng, DType::Uint8, n_rows as usize * row_bytes);
        // Ids in range, and some below and above it, which both sides skip.
        let mut ids: Vec<i64> = row_ids(&mut rng, n_rows);
        ids.extend([-3, -1].iter().chain(&[n_rows, n_rows + 7]));
        ids.sort();

        let all_rows: Vec<i64> = (0..n_rows).collect();
        let cpu = sparse::retain(row_bytes, &all_rows, &dense, &ids).unwrap();
        let mut gathered = vec![0xeeu8; ids.len() * row_bytes];
        launch_rows("rsp_gather", gathered.as_mut_ptr(), dense.as_ptr(), &ids, n_rows, row_bytes);
        assert_eq!(gathered, cpu.bytes(), "rsp_gather, rows of {row_bytes} bytes");

        let data = values(&mut rng, DType::Uint8, ids.len() * row_bytes);
        let mut cpu_dense = vec![0xeeu8; dense.len()];
        sparse::densify(row_bytes, &ids, &data, &mut cpu_dense);
        // The kernel writes into a zeroed array, as the backend hands it one.
        let mut scattered = vec![0u8; dense.len()];
        launch_rows("rsp_scatter", scattered.as_mut_ptr(), data.as_ptr(), &ids, n_rows, row_bytes);
        assert_eq!(scattered, cpu_dense, "rsp_scatter, rows of {row_bytes} bytes");
    }
}

#[test]
fn the_registry_names_exactly_the_kernels_nvrtc_compiles() {
    let s = standin();
    let mut names = BTreeSet::new();
    for i in 0.. {
        // SAFETY: the stand-in answers a static string or null past the end.
        let p = unsafe { (s.name)(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated static string.
        names.insert(unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string());
    }
    assert_eq!(names.len(), 8 + 8 + 8 + 9 + 81 + 11, "sum, sum_out and rsp_accumulate per summable dtype, fill per dtype, 81 casts, 11 single kernels");
    match &s.nvrtc_entries {
        Some(entries) => assert_eq!(&names, entries, "the host build and NVRTC's PTX define different kernels"),
        None => println!("the_registry_names_exactly_the_kernels_nvrtc_compiles: NVRTC absent, compared with the counts only"),
    }
}
