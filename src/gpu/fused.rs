//! Keys, fused: the descriptor table of `kernels/fused.cu`. One launch per device per batch
//! sums its keys: the host packs, per key, its output, its sources and its run of blocks; the
//! table goes in the launch's parameters or is uploaded ahead of it (`src/gpu/sums.rs`), and
//! the kernel finds each block's key by binary search over `block_start`.

use crate::base::DType;
use crate::reduce::SumOrder;

/// One key's entry, laid out as `struct KeyDesc` in `kernels/fused.cu` (48 bytes; both
/// sides check the layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KeyDesc {
    /// Device address of the output.
    pub dst: u64,
    /// Byte offset, from the table's start, of `n_src` u64 source addresses.
    pub srcs_offset: u64,
    /// Elements.
    pub n: u64,
    /// The key's first block.
    pub block_start: u64,
    /// Number of sources (at least 1).
    pub n_src: u32,
    /// MXNet's dtype code.
    pub dtype: u32,
    /// 0 left fold (CommDevice), 1 CommCPU's grouping.
    pub order: u32,
    /// Zero.
    pub reserved: u32,
}

/// One small key of a call: where its sum goes and what it sums.
#[derive(Debug, Clone)]
pub struct SmallKey {
    /// Device address of the output.
    pub dst: u64,
    /// Device addresses of the values, in push order.
    pub srcs: Sources,
    /// Elements.
    pub n: u64,
    /// Element type (not bool: the store refuses bool sums).
    pub dtype: DType,
    /// Association.
    pub order: SumOrder,
}

/// A key's source addresses: a copy's one inline (a pull of thousands of keys would
/// otherwise allocate a vector per output), a sum's in a vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sources {
    /// One source.
    One(u64),
    /// Any number of sources.
    Many(Vec<u64>),
}

impl Sources {
    /// The addresses, in order.
    pub fn as_slice(&self) -> &[u64] {
        match self {
            Sources::One(addr) => std::slice::from_ref(addr),
            Sources::Many(addrs) => addrs,
        }
    }
}

impl FromIterator<u64> for Sources {
    fn from_iter<I: IntoIterator<Item = u64>>(addrs: I) -> Sources {
        Sources::Many(addrs.into_iter().collect())
    }
}

/// A packed table, ready to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTable {
    /// The bytes: the descriptors, then the source addresses, 8-byte aligned.
    pub bytes: Vec<u8>,
    /// Descriptors in the table.
    pub n_desc: u32,
    /// Blocks to launch.
    pub n_blocks: u64,
    /// Elements per block (the kernel's `elems_per_block`).
    pub elems_per_block: u32,
}

/// Which keys of a call go into the fused launch: those of at most `max_elems` elements
/// (the rest get a vectorised launch each). Returns the indices of the small ones.
pub fn small_key_indices(sizes: &[u64], max_elems: u64) -> Vec<usize> {
    sizes.iter().enumerate().filter(|(_, s)| **s > 0 && **s <= max_elems).map(|(i, _)| i).collect()
}

/// Packs `keys` (in call order) into one table; keys of zero elements are skipped, as they
/// need no block.
pub fn pack(keys: &[SmallKey], elems_per_block: u32) -> crate::Result<PackedTable> {
    crate::ensure!(elems_per_block > 0, "elems_per_block must be positive");
    let live: Vec<&SmallKey> = keys.iter().filter(|k| k.n > 0).collect();
    for k in &live {
        crate::ensure!(!k.srcs.as_slice().is_empty(), "a fused key needs at least one source");
        crate::ensure!(k.dtype != DType::Bool, "bool values cannot be summed");
    }
    let desc_bytes = live.len() * std::mem::size_of::<KeyDesc>();
    let mut descs = Vec::with_capacity(live.len());
    let mut pointers: Vec<u64> = Vec::with_capacity(live.iter().map(|k| k.srcs.as_slice().len()).sum());
    let mut block = 0u64;
    for k in &live {
        descs.push(KeyDesc {
            dst: k.dst,
            srcs_offset: (desc_bytes + pointers.len() * 8) as u64,
            n: k.n,
            block_start: block,
            n_src: u32::try_from(k.srcs.as_slice().len()).map_err(|_| crate::Error::new("too many sources for one key"))?,
            dtype: k.dtype as u32,
            order: match k.order {
                SumOrder::Serial => 0,
                SumOrder::CpuComm => 1,
            },
            reserved: 0,
        });
        pointers.extend_from_slice(k.srcs.as_slice());
        block += k.n.div_ceil(elems_per_block as u64);
    }
    let mut bytes = Vec::with_capacity(desc_bytes + pointers.len() * 8);
    bytes.extend_from_slice(bytemuck::cast_slice(&descs));
    bytes.extend_from_slice(bytemuck::cast_slice(&pointers));
    Ok(PackedTable { bytes, n_desc: descs.len() as u32, n_blocks: block, elems_per_block })
}

/// What the kernel does for block `b` of a packed table: the key index and its element
/// range, found the way `fused_sum` finds them (for tests and for debugging a table).
pub fn block_range(table: &PackedTable, b: u64) -> Option<(usize, u64, u64)> {
    let descs: &[KeyDesc] =
        bytemuck::try_cast_slice(&table.bytes[..table.n_desc as usize * std::mem::size_of::<KeyDesc>()]).ok()?;
    if b >= table.n_blocks || descs.is_empty() {
        return None;
    }
    let (mut lo, mut hi) = (0usize, descs.len());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if descs[mid].block_start <= b {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let d = descs[lo];
    let begin = (b - d.block_start) * table.elems_per_block as u64;
    Some((lo, begin, (begin + table.elems_per_block as u64).min(d.n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_kernels() {
        assert_eq!(std::mem::size_of::<KeyDesc>(), 48);
        assert_eq!(std::mem::offset_of!(KeyDesc, srcs_offset), 8);
        assert_eq!(std::mem::offset_of!(KeyDesc, block_start), 24);
        assert_eq!(std::mem::offset_of!(KeyDesc, n_src), 32);
        assert_eq!(std::mem::offset_of!(KeyDesc, order), 40);
    }

    fn key(n: u64, srcs: &[u64], dtype: DType) -> SmallKey {
        let srcs = match srcs {
            [one] => Sources::One(*one),
            _ => Sources::Many(srcs.to_vec()),
        };
        SmallKey { dst: 0x1000 + n, srcs, n, dtype, order: SumOrder::Serial }
    }

    #[test]
    fn every_element_of_every_key_is_covered_once_by_exactly_its_blocks() {
        let keys = vec![
            key(1, &[1, 2], DType::Float32),
            key(0, &[3], DType::Float32),
            key(1000, &[4, 5, 6, 7], DType::Float16),
            key(256, &[8], DType::Int64),
            key(257, &[9, 10, 11], DType::Bfloat16),
        ];
        let t = pack(&keys, 256).unwrap();
        assert_eq!(t.n_desc, 4, "the empty key gets no descriptor");
        assert_eq!(t.n_blocks, 1 + 4 + 1 + 2);
        let live: Vec<&SmallKey> = keys.iter().filter(|k| k.n > 0).collect();
        let mut covered: Vec<Vec<u64>> = live.iter().map(|k| vec![0; k.n as usize]).collect();
        for b in 0..t.n_blocks {
            let (k, begin, end) = block_range(&t, b).unwrap();
            assert!(begin < end, "block {b} is empty");
            for i in begin..end {
                covered[k][i as usize] += 1;
            }
        }
        assert!(covered.iter().all(|c| c.iter().all(|x| *x == 1)));
        assert_eq!(block_range(&t, t.n_blocks), None);
        // Each descriptor's sources are its key's, in push order, where srcs_offset says.
        let descs: &[KeyDesc] = bytemuck::cast_slice(&t.bytes[..4 * 48]);
        for (d, k) in descs.iter().zip(&live) {
            let at = d.srcs_offset as usize;
            let ptrs: &[u64] = bytemuck::cast_slice(&t.bytes[at..at + 8 * d.n_src as usize]);
            assert_eq!(ptrs, k.srcs.as_slice());
            assert_eq!(d.dst, k.dst);
            assert_eq!(d.dtype, k.dtype as u32);
            assert_eq!(d.srcs_offset % 8, 0);
        }
        assert_eq!(t.bytes.len(), 4 * 48 + 8 * (2 + 4 + 1 + 3));
    }

    #[test]
    fn bad_tables_are_refused() {
        assert!(pack(&[key(4, &[], DType::Float32)], 256).is_err());
        assert!(pack(&[key(4, &[1], DType::Bool)], 256).is_err());
        assert!(pack(&[key(4, &[1], DType::Float32)], 0).is_err());
        assert_eq!(small_key_indices(&[10, 0, 5000, 4096], 4096), [0, 3]);
    }
}
