//! Ops that make a value from parameters alone: `_arange` (MXNet's values exactly) and
//! `_random_normal` (normal samples from libkvstore's own generator, not MXNet's bits).

use super::params::Params;
use super::values::Dense;
use crate::base::buffer::typed_mut;
use crate::base::element::Element;
use crate::error::Result;
use crate::ndarray::DType;
use std::sync::atomic::{AtomicU64, Ordering};

/// `_arange(start, stop, step, repeat)`: `ceil((stop - start) / step)` steps, each value
/// repeated `repeat` times; element `i` is `start + (i / repeat) * step` in the output's type,
/// as MXNet's `range_fwd` computes it. Without `stop` the range is `[0, start)`.
pub fn arange(params: &Params, name: &str) -> Result<Dense> {
    let first = params.f64("start")?.ok_or_else(|| crate::Error::new(format!("operator {name}: parameter start is required")))?;
    let stop = match params.raw("stop") {
        None | Some("None") | Some("") => None,
        Some(_) => params.f64("stop")?,
    };
    let (start, stop) = match stop {
        Some(stop) => (first, stop),
        None => (0.0, first),
    };
    let step = params.f64("step")?.unwrap_or(1.0);
    let repeat = params.f64("repeat")?.unwrap_or(1.0);
    let dtype = params.dtype("dtype")?.unwrap_or(DType::Float32);
    crate::ensure!(step != 0.0, "operator {name}: step must not be 0");
    crate::ensure!(repeat >= 1.0 && repeat.fract() == 0.0, "operator {name}: repeat must be a positive integer, got {repeat}");
    crate::ensure!(
        if step > 0.0 { start < stop } else { start > stop },
        "operator {name}: the range (start={start}, stop={stop}, step={step}) is empty"
    );
    crate::ensure!(dtype != DType::Bool, "operator {name}: dtype bool is not supported");
    let steps = ((stop - start) / step).ceil();
    let len = steps * repeat;
    crate::ensure!(len < (1u64 << 31) as f64, "operator {name}: {len} elements is more than 2^31 - 1");
    let repeat = repeat as usize;
    let mut out = Dense::zeros(&[len as usize], dtype)?;
    let bytes = out.data.bytes_mut();
    match dtype {
        DType::Float32 => {
            let (start, step) = (start as f32, step as f32);
            fill_by_index(typed_mut::<f32>(bytes), repeat, |q| start + q as f32 * step);
        }
        DType::Float64 => fill_by_index(typed_mut::<f64>(bytes), repeat, |q| start + q as f64 * step),
        // MXNet casts start and step through an integer for every type that is not signed by
        // `std::is_signed`, which its 16-bit float classes are not: (1, 2, 0.3) is 1, 1, 1, 1.
        DType::Float16 => fill_half::<half::f16>(typed_mut(bytes), repeat, start.trunc(), step.trunc()),
        DType::Bfloat16 => fill_half::<half::bf16>(typed_mut(bytes), repeat, start.trunc(), step.trunc()),
        _ => {
            // MXNet casts start and step to the element type (through an integer first for
            // unsigned types), then multiplies and adds in that type: wrapping arithmetic.
            let (start, step) = if dtype == DType::Uint8 { (start as i64, step as i64) } else { (int_of(dtype, start), int_of(dtype, step)) };
            crate::with_element_type!(dtype, T => {
                let (start, step) = (T::from_i64(start).to_i64(), T::from_i64(step).to_i64());
                fill_by_index(typed_mut::<T>(bytes), repeat, |q| T::from_i64(start.wrapping_add((q as i64).wrapping_mul(step))));
            });
        }
    }
    Ok(out)
}

/// `v` converted to integer dtype `dtype` as C's `static_cast` from a double.
fn int_of(dtype: DType, v: f64) -> i64 {
    crate::with_element_type!(dtype, T => T::from_f64(v).to_i64())
}

fn fill_by_index<T: Copy>(out: &mut [T], repeat: usize, value: impl Fn(usize) -> T) {
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = value(i / repeat);
    }
}

/// A 16-bit float range: every operation computed in float and rounded back to the 16-bit
/// type, as mshadow's `half_t` arithmetic does.
fn fill_half<T: Element + Copy>(out: &mut [T], repeat: usize, start: f64, step: f64) {
    let round = |v: f32| T::from_f64(v as f64).to_f64() as f32;
    let (start, step) = (round(start as f32), round(step as f32));
    fill_by_index(out, repeat, |q| {
        let product = round(round(q as f32) * step);
        T::from_f64((start + product) as f64)
    });
}

/// The seed `MXRandomSeed` last set (MXNet's default before any call is 0).
static SEED: AtomicU64 = AtomicU64::new(0);
/// How many random values have been drawn since the seed was set: each op draws a new stream.
static DRAWS: AtomicU64 = AtomicU64::new(0);

/// Restarts the random ops' sequence: after the same seed, the same ops draw the same values.
pub fn seed_random(seed: i32) {
    SEED.store(seed as u32 as u64, Ordering::SeqCst);
    DRAWS.store(0, Ordering::SeqCst);
}

/// `_random_normal(loc, scale, shape, dtype)`: samples of N(loc, scale²) (Box–Muller on a
/// SplitMix64 stream), computed in float as MXNet's sampler does, then stored in `dtype`.
pub fn random_normal(params: &Params, target: Option<(&[usize], DType)>, name: &str) -> Result<Dense> {
    let loc = params.f64("loc")?.unwrap_or(0.0) as f32;
    let scale = params.f64("scale")?.unwrap_or(1.0) as f32;
    crate::ensure!(scale >= 0.0, "operator {name}: scale must be non-negative, got {scale}");
    let shape = match params.shape("shape")? {
        Some(s) => s,
        None => target.map(|t| t.0.to_vec()).unwrap_or_default(),
    };
    let dtype = params.dtype("dtype")?.or(target.map(|t| t.1)).unwrap_or(DType::Float32);
    crate::ensure!(
        matches!(dtype, DType::Float16 | DType::Float32 | DType::Float64),
        "operator {name}: dtype {} is not supported (float16, float32 or float64)",
        dtype.name()
    );
    let mut out = Dense::zeros(&shape, dtype)?;
    let stream = DRAWS.fetch_add(1, Ordering::SeqCst);
    let mut rng = SplitMix64(SEED.load(Ordering::SeqCst) ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    crate::with_element_type!(dtype, T => {
        for slot in typed_mut::<T>(out.data.bytes_mut()) {
            *slot = T::from_f64((loc + scale * rng.standard_normal()) as f64);
        }
    });
    Ok(out)
}

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast generator with a 64-bit state.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so the logarithm below is finite.
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    fn standard_normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::buffer::typed;
    use crate::ops::lookup;

    fn params(op: &str, kv: &[(&str, &str)]) -> Params {
        let keys: Vec<&str> = kv.iter().map(|p| p.0).collect();
        let vals: Vec<&str> = kv.iter().map(|p| p.1).collect();
        Params::new(lookup(op).unwrap().info(), &keys, &vals).unwrap()
    }

    #[test]
    fn arange_matches_mxnet_lengths_repeats_and_types() {
        let a = arange(&params("_arange", &[("start", "1"), ("stop", "2"), ("step", "0.3")]), "_arange").unwrap();
        assert_eq!(a.shape, vec![4]);
        assert_eq!(typed::<f32>(a.data.bytes())[..], [1.0, 1.3, 1.6, 1.9000001]);
        let b = arange(&params("_arange", &[("start", "3"), ("repeat", "2"), ("dtype", "int64")]), "_arange").unwrap();
        assert_eq!(typed::<i64>(b.data.bytes())[..], [0, 0, 1, 1, 2, 2]);
        let c = arange(&params("_arange", &[("start", "5"), ("stop", "0"), ("step", "-2"), ("dtype", "int32")]), "_arange").unwrap();
        assert_eq!(typed::<i32>(c.data.bytes())[..], [5, 3, 1]);
        let half = arange(&params("_arange", &[("start", "0.5"), ("stop", "7"), ("step", "1.7"), ("dtype", "float16")]), "_arange").unwrap();
        let got: Vec<f32> = typed::<half::f16>(half.data.bytes()).iter().map(|h| h.to_f32()).collect();
        assert_eq!(got, [0.0, 1.0, 2.0, 3.0]);
        let big = arange(&params("_arange", &[("start", "0"), ("stop", "793470"), ("dtype", "int64")]), "_arange").unwrap();
        assert_eq!(typed::<i64>(big.data.bytes())[793469], 793469);
        for bad in [[("start", "0"), ("stop", "4"), ("step", "0")], [("start", "4"), ("stop", "0"), ("step", "1")]] {
            assert!(arange(&params("_arange", &bad), "_arange").is_err());
        }
    }

    #[test]
    fn random_normal_is_seeded_and_roughly_normal() {
        let p = params("_random_normal", &[("loc", "2"), ("scale", "3"), ("shape", "(10000,)")]);
        seed_random(7);
        let a = random_normal(&p, None, "_random_normal").unwrap();
        seed_random(7);
        let b = random_normal(&p, None, "_random_normal").unwrap();
        let c = random_normal(&p, None, "_random_normal").unwrap();
        assert_eq!(a.data.bytes(), b.data.bytes());
        assert_ne!(b.data.bytes(), c.data.bytes());
        let v = typed::<f32>(a.data.bytes());
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!((mean - 2.0).abs() < 0.1 && (var.sqrt() - 3.0).abs() < 0.1, "mean {mean} sd {}", var.sqrt());
        let int = params("_random_normal", &[("shape", "(2,)"), ("dtype", "float32")]);
        assert!(random_normal(&int, None, "_random_normal").is_ok());
    }
}
