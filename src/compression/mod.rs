//! Gradient compression: MXNet 1.9's `2bit` (bit-exact: quantisation, residual carry-over and
//! packed layout) and MXNet 2.0's `1bit`. Applied by `device` stores to every pushed value;
//! `local` stores accept the setting and ignore it, as MXNet's CommCPU does.
//!
//! The kernels work on plain slices and a packed byte buffer in MXNet's memory layout, so a
//! GPU kernel can mirror them element for element.

mod one_bit;
mod two_bit;

use crate::error::Result;

/// The compression types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionType {
    /// MXNet 1.9's `2bit`: +threshold, -threshold or 0 per element, 16 elements per float.
    TwoBit,
    /// MXNet 2.0's `1bit`: +1 or -1 per element, 32 elements per float.
    OneBit,
}

/// A store's gradient-compression setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradientCompression {
    /// The type.
    pub kind: CompressionType,
    /// The threshold (`2bit`: the quantum; `1bit`: the sign boundary).
    pub threshold: f32,
}

/// A threshold: a finite float32 greater than 0. An infinite one (`inf`, or `1e40`, which
/// float32 cannot hold) would quantise every gradient to zero: every later push would
/// silently add nothing. MXNet refuses these too ("Out of range value"); NaN fails its
/// `threshold > 0` check.
fn parse_threshold(v: &str) -> Result<f32> {
    let threshold: f32 = v.trim().parse().map_err(|_| crate::Error::new(format!("threshold '{v}' is not a number")))?;
    crate::ensure!(
        threshold.is_finite() && threshold > 0.0,
        "threshold must be greater than 0 and finite (got '{v}')"
    );
    Ok(threshold)
}

impl GradientCompression {
    /// Parses `MXKVStoreSetGradientCompression`'s key/value pairs: `type` is required,
    /// `threshold` defaults to 0.5 and must be positive. Unlike MXNet, which ignores unknown
    /// keys, an unknown key is an error: a misspelt `threshold` would otherwise pass silently.
    pub fn from_params(params: &[(String, String)]) -> Result<GradientCompression> {
        let mut kind = None;
        let mut threshold = 0.5f32;
        for (k, v) in params {
            match k.as_str() {
                "type" => kind = Some(v.as_str()),
                "threshold" => threshold = parse_threshold(v)?,
                other => crate::bail!("unknown gradient compression parameter '{other}' (expected 'type' and 'threshold')"),
            }
        }
        let Some(kind) = kind else { crate::bail!("gradient compression needs the parameter 'type'") };
        let kind = match kind {
            "2bit" => CompressionType::TwoBit,
            "1bit" => CompressionType::OneBit,
            other => crate::bail!("Unknown type for gradient compression {other}"),
        };
        Ok(GradientCompression { kind, threshold })
    }

    /// Bytes of the packed form of `n` values (MXNet allocates whole floats).
    pub fn packed_bytes(&self, n: usize) -> usize {
        match self.kind {
            CompressionType::TwoBit => n.div_ceil(16) * 4,
            CompressionType::OneBit => n.div_ceil(32) * 4,
        }
    }

    /// `residual += grad`, then packs each element's code into `packed` and takes what the
    /// code carries off the residual.
    pub fn quantize(&self, grad: &[f32], residual: &mut [f32], packed: &mut [u8]) {
        match self.kind {
            CompressionType::TwoBit => two_bit::quantize(grad, residual, packed, self.threshold),
            CompressionType::OneBit => one_bit::quantize(grad, residual, packed, self.threshold),
        }
    }

    /// The values the codes in `packed` stand for.
    pub fn dequantize(&self, packed: &[u8], out: &mut [f32]) {
        match self.kind {
            CompressionType::TwoBit => two_bit::dequantize(packed, out, self.threshold),
            CompressionType::OneBit => one_bit::dequantize(packed, out),
        }
    }

    /// One key's compressed reduction, as MXNet's `CommDevice::ReduceCompressed`: each source
    /// is quantised against its own position's residual and dequantised, and the dequantised
    /// values are summed left to right into `out` (`((d0 + d1) + d2) + ...`). `packed` (of
    /// [`packed_bytes`](Self::packed_bytes)`(out.len())` bytes) and `scratch` (as long as
    /// `out`) are working space, passed in so the caller allocates where it can report failure.
    pub fn reduce(&self, srcs: &[&[f32]], residuals: &mut [&mut [f32]], out: &mut [f32], packed: &mut [u8], scratch: &mut [f32]) {
        for (i, (src, residual)) in srcs.iter().zip(residuals.iter_mut()).enumerate() {
            self.quantize(src, residual, packed);
            if i == 0 {
                self.dequantize(packed, out);
            } else {
                self.dequantize(packed, scratch);
                for (o, d) in out.iter_mut().zip(scratch.iter()) {
                    *o += *d;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parameters_are_checked_as_mxnet_does() {
        let gc = GradientCompression::from_params(&params(&[("type", "2bit")])).unwrap();
        assert_eq!(gc, GradientCompression { kind: CompressionType::TwoBit, threshold: 0.5 });
        let err = GradientCompression::from_params(&params(&[("type", "2bit"), ("treshold", "1")])).unwrap_err();
        assert!(err.message().contains("unknown gradient compression parameter 'treshold'"), "{err}");
        assert!(GradientCompression::from_params(&params(&[("threshold", "1")])).unwrap_err().message().contains("'type'"));
        let err = GradientCompression::from_params(&params(&[("type", "3bit"), ("threshold", "-1")])).unwrap_err();
        assert!(err.message().contains("threshold must be greater than 0"), "threshold is checked first: {err}");
        assert!(GradientCompression::from_params(&params(&[("type", "3bit")])).unwrap_err().message().contains("Unknown type"));
        assert!(GradientCompression::from_params(&params(&[("type", "1bit"), ("threshold", "0")])).is_err());
        assert_eq!(GradientCompression::from_params(&params(&[("type", "2bit")])).unwrap().packed_bytes(17), 8);
    }

    #[test]
    fn thresholds_must_be_finite_and_positive() {
        for bad in ["inf", "Infinity", "-inf", "nan", "NaN", "1e40", "1e-50", "0", "-0", "-1", "", "0.5x", "0x10"] {
            let err = GradientCompression::from_params(&params(&[("type", "2bit"), ("threshold", bad)])).unwrap_err();
            assert!(err.message().contains("threshold"), "{bad}: {err}");
        }
        for (good, want) in [("0.5", 0.5f32), (" 2", 2.0), ("+2", 2.0), ("2.", 2.0), (".5", 0.5), ("1e3", 1000.0)] {
            assert_eq!(GradientCompression::from_params(&params(&[("type", "1bit"), ("threshold", good)])).unwrap().threshold, want);
        }
    }

    #[test]
    fn a_quantise_dequantise_round_trip_keeps_the_residual_sum() {
        // Whatever is not sent stays in the residual: sent + residual == all gradients so far.
        let gc = GradientCompression { kind: CompressionType::TwoBit, threshold: 0.5 };
        let grads: Vec<f32> = (0..37).map(|i| ((i * 37 % 23) as f32 - 11.0) / 10.0).collect();
        let mut residual = vec![0f32; 37];
        let mut sent = [0f32; 37];
        for _ in 0..5 {
            let mut packed = vec![0u8; gc.packed_bytes(37)];
            gc.quantize(&grads, &mut residual, &mut packed);
            let mut deq = vec![0f32; 37];
            gc.dequantize(&packed, &mut deq);
            for i in 0..37 {
                sent[i] += deq[i];
            }
        }
        for i in 0..37 {
            assert!((sent[i] + residual[i] - 5.0 * grads[i]).abs() < 1e-5, "element {i}");
        }
    }
}
