//! Gradient-compression throughput on one core: quantise + dequantise of 16 Mi float32
//! gradients, in GB/s of float input. Run: `cargo bench --bench compression`.

use kvstore::compression::{CompressionType, GradientCompression};
use std::time::Instant;

fn main() {
    let n = 16 << 20;
    let grad: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1201) as f32 - 600.0) / 1000.0).collect();
    let mut residual = vec![0f32; n];
    let mut out = vec![0f32; n];
    for kind in [CompressionType::TwoBit, CompressionType::OneBit] {
        let gc = GradientCompression { kind, threshold: 0.5 };
        let mut packed = vec![0u8; gc.packed_bytes(n)];
        let mut times = Vec::new();
        for _ in 0..7 {
            let start = Instant::now();
            gc.quantize(&grad, &mut residual, &mut packed);
            gc.dequantize(&packed, &mut out);
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let median = times[times.len() / 2];
        let checksum: f64 = out.iter().map(|&x| x as f64).sum();
        println!(
            "{kind:?}: quantise + dequantise of {n} floats: median {:.2} ms, {:.2} GB/s of float input per core (checksum {checksum})",
            median * 1e3,
            (n * 4) as f64 / median / 1e9
        );
    }
}
