//! How a dense sum is cut into launches of `sum_<dtype>` (`kernels/sum.cu`), which folds at
//! most [`MAX_SOURCES`] values per launch. Later launches continue the fold from the output,
//! cut at a block boundary of the order, so the association is exactly the CPU loop's.

use crate::reduce::SumOrder;
use std::ops::Range;

/// `MAX_SOURCES` of `kernels/prelude.cuh`.
pub const MAX_SOURCES: usize = 16;

/// One launch: the sources it folds and whether it continues from the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SumLaunch {
    /// Indices into the key's values.
    pub sources: Range<usize>,
    /// The kernel's `acc_in_dst`.
    pub acc_in_dst: bool,
}

/// The launches summing `n_src` values (at least one) in `order`.
pub fn sum_launches(n_src: usize, order: SumOrder) -> Vec<SumLaunch> {
    let mut out = Vec::new();
    if n_src == 0 {
        return out;
    }
    // The first launch takes the head plus whole blocks (of 4 for CommCPU's grouping).
    let block = match order {
        SumOrder::CpuComm => 4,
        SumOrder::Serial => 1,
    };
    let first_len = 1 + (MAX_SOURCES - 1) / block * block;
    let mut start = 0;
    let mut acc = false;
    while start < n_src {
        let len = if acc { MAX_SOURCES / block * block } else { first_len };
        let end = (start + len).min(n_src);
        out.push(SumLaunch { sources: start..end, acc_in_dst: acc });
        start = end;
        acc = true;
    }
    out
}

/// Grid size for a grid-stride kernel over `n` items with `threads` per block: enough blocks
/// to fill `sms` multiprocessors a few times over, and no more than the items need.
pub fn grid_blocks(n: u64, threads: u32, sms: u32) -> u32 {
    let needed = n.div_ceil(threads as u64).max(1);
    needed.min(sms as u64 * 8).min(u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays the launches as the kernel associates and compares with the CPU sum.
    fn replay(values: &[f32], order: SumOrder) -> f32 {
        let mut dst = 0f32;
        for l in sum_launches(values.len(), order) {
            let s = &values[l.sources.clone()];
            let (mut acc, mut k) = if l.acc_in_dst { (dst, 0) } else { (s[0], 1) };
            match order {
                SumOrder::Serial => {
                    for v in &s[k..] {
                        acc += v;
                    }
                }
                SumOrder::CpuComm => {
                    while k < s.len() {
                        let end = (k + 4).min(s.len());
                        let mut block = s[k];
                        for v in &s[k + 1..end] {
                            block += v;
                        }
                        acc += block;
                        k = end;
                    }
                }
            }
            dst = acc;
        }
        dst
    }

    #[test]
    fn launches_keep_the_association_of_every_order() {
        for n in 1..=70usize {
            // Values whose sum depends on the grouping.
            let values: Vec<f32> = (0..n).map(|i| if i % 3 == 0 { 1.0e8 } else { 1.0 + i as f32 * 0.37 }).collect();
            for order in [SumOrder::Serial, SumOrder::CpuComm] {
                let launches = sum_launches(n, order);
                assert!(launches.iter().all(|l| l.sources.len() <= MAX_SOURCES));
                assert_eq!(launches[0].sources.start, 0);
                assert!(!launches[0].acc_in_dst && launches[1..].iter().all(|l| l.acc_in_dst));
                let mut cpu = vec![0u8; 4];
                let bufs: Vec<Vec<u8>> = values.iter().map(|v| v.to_ne_bytes().to_vec()).collect();
                let srcs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
                crate::reduce::sum_into(crate::DType::Float32, order, &mut cpu, &srcs, 1);
                let cpu = f32::from_ne_bytes([cpu[0], cpu[1], cpu[2], cpu[3]]);
                assert_eq!(replay(&values, order).to_bits(), cpu.to_bits(), "n={n} {order:?}");
            }
        }
        assert!(sum_launches(0, SumOrder::Serial).is_empty());
    }

    #[test]
    fn grids_are_bounded() {
        assert_eq!(grid_blocks(0, 256, 132), 1);
        assert_eq!(grid_blocks(1000, 256, 132), 4);
        assert_eq!(grid_blocks(1 << 30, 256, 132), 132 * 8);
    }
}
