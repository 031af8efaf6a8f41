//! MXNet 2.0's 1-bit quantisation (beyond 1.9). Packed layout: 8 elements per byte, bytes in
//! memory order, element j of a byte in bit 7-j. Above the threshold (strictly) sends +1 and
//! takes 1 off the residual; otherwise sends -1 and adds 1.

pub(super) fn quantize(grad: &[f32], residual: &mut [f32], packed: &mut [u8], threshold: f32) {
    packed.fill(0);
    for (m, (g, r)) in grad.chunks(8).zip(residual.chunks_mut(8)).enumerate() {
        let mut byte = 0u8;
        for (j, (g, r)) in g.iter().zip(r.iter_mut()).enumerate() {
            *r += *g;
            if *r > threshold {
                byte |= 0x80 >> j;
                *r -= 1.0;
            } else {
                *r += 1.0;
            }
        }
        packed[m] = byte;
    }
}

pub(super) fn dequantize(packed: &[u8], out: &mut [f32]) {
    for (m, o) in out.chunks_mut(8).enumerate() {
        for (j, o) in o.iter_mut().enumerate() {
            *o = if packed[m] & (0x80 >> j) != 0 { 1.0 } else { -1.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_layout_follow_mxnet_2() {
        let grad = [0.6f32, 0.5, -0.2, 2.0, 0.0, 0.0, 0.0, 0.51, 3.0];
        let mut residual = [0f32; 9];
        let mut packed = [0u8; 4];
        quantize(&grad, &mut residual, &mut packed, 0.5);
        assert_eq!(packed, [0b1001_0001, 0b1000_0000, 0, 0], "0.5 is not strictly above 0.5");
        assert_eq!(residual[..4], [0.6f32 - 1.0, 1.5, 0.8, 1.0]);
        let mut out = [0f32; 9];
        dequantize(&packed, &mut out);
        assert_eq!(out, [1.0, -1.0, -1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 1.0]);
    }
}
