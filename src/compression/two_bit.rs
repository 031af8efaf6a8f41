//! MXNet 1.9's 2-bit quantisation. Packed layout: 4 elements per byte, bytes in memory order
//! (element i is in byte i / 4), element j of a byte in bits (7-2j, 6-2j): `11` = +threshold,
//! `10` = -threshold, `00` = nothing sent. Only one threshold leaves the residual per step.

const POS: [u8; 4] = [0xc0, 0x30, 0x0c, 0x03];
const NEG: [u8; 4] = [0x80, 0x20, 0x08, 0x02];

pub(super) fn quantize(grad: &[f32], residual: &mut [f32], packed: &mut [u8], threshold: f32) {
    let neg_threshold = -threshold;
    packed.fill(0);
    for (b, (g, r)) in grad.chunks(4).zip(residual.chunks_mut(4)).enumerate() {
        let mut byte = 0u8;
        for (j, (g, r)) in g.iter().zip(r.iter_mut()).enumerate() {
            *r += *g;
            if *r >= threshold {
                byte |= POS[j];
                *r -= threshold;
            } else if *r <= neg_threshold {
                byte |= NEG[j];
                *r += threshold;
            }
        }
        packed[b] = byte;
    }
}

pub(super) fn dequantize(packed: &[u8], out: &mut [f32], threshold: f32) {
    for (b, o) in out.chunks_mut(4).enumerate() {
        let byte = packed[b];
        for (j, o) in o.iter_mut().enumerate() {
            let code = byte & POS[j];
            *o = if code == POS[j] {
                threshold
            } else if code == NEG[j] {
                -threshold
            } else {
                0.0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_layout_follow_mxnet() {
        // t = 0.5: +, -, 0, + | 0, -, 0, 0 | + (the 9th element starts byte 2)
        let grad = [0.6f32, -0.6, 0.1, 0.5, 0.0, -0.5, -0.4, 0.49, 0.7];
        let mut residual = [0f32; 9];
        let mut packed = [0xffu8; 4];
        quantize(&grad, &mut residual, &mut packed, 0.5);
        assert_eq!(packed, [0b1110_0011, 0b0010_0000, 0b1100_0000, 0]);
        assert_eq!(residual[0], 0.6f32 - 0.5);
        assert_eq!(residual[2], 0.1);
        assert_eq!(residual[5], 0.0);
        let mut out = [9f32; 9];
        dequantize(&packed, &mut out, 0.5);
        assert_eq!(out, [0.5, -0.5, 0.0, 0.5, 0.0, -0.5, 0.0, 0.0, 0.5]);
    }

    #[test]
    fn the_residual_carries_over_as_in_mxnets_nightly_test() {
        // 0.4 sends nothing; 0.2 more crosses the threshold; only one threshold per step.
        let mut residual = [0f32];
        let mut packed = [0u8; 4];
        let mut sent = Vec::new();
        for g in [0.4f32, 0.2, 0.2, 0.2, 1.7] {
            quantize(&[g], &mut residual, &mut packed, 0.5);
            let mut out = [0f32];
            dequantize(&packed, &mut out, 0.5);
            sent.push(out[0]);
        }
        assert_eq!(sent, [0.0, 0.5, 0.0, 0.5, 0.5]);
        assert!((residual[0] - 1.2).abs() < 1e-6);
    }
}
