//! How keys are spread over servers: big keys exactly as MXNet 1.9's workers split them
//! (`kvstore_dist.h`, `EncodeDefaultKey`, `EncodeCompressedKey` and `EncodeRowSparseKey`);
//! small dense keys on the least-loaded server ([`Balance`]) instead of MXNet's
//! `(key * 9973) % S`.

/// One server's part of a key: elements `offset..offset + len` of the flattened value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Server rank.
    pub server: usize,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

/// One message of a dense push: elements `at..at + len` of part `part`, which is pushed in
/// chunks of `chunk` elements (0: whole, one message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub part: usize,
    pub at: usize,
    pub len: usize,
    pub chunk: usize,
}

/// The messages of a push of `parts`: a part longer than `chunk` elements in chunks of
/// `chunk` (the last takes the rest), in order; the others whole (`chunk` 0: all whole).
pub fn pieces(parts: &[Part], chunk: usize) -> Vec<Piece> {
    let mut out = Vec::with_capacity(parts.len());
    for (part, p) in parts.iter().enumerate() {
        if chunk == 0 || p.len <= chunk {
            out.push(Piece { part, at: 0, len: p.len, chunk: 0 });
            continue;
        }
        out.extend((0..p.len).step_by(chunk).map(|at| Piece { part, at, len: chunk.min(p.len - at), chunk }));
    }
    out
}

/// `KVSTORE_DIST_CHUNK_BYTES`: the size of the chunks a worker pushes a big part of a sync
/// round in (default 1 MiB; 0: whole parts). Every worker of a job must use the same.
pub fn chunk_bytes() -> usize {
    std::env::var("KVSTORE_DIST_CHUNK_BYTES").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1 << 20)
}

/// MXNet's `MXNET_KVSTORE_BIGARRAY_BOUND` (elements), default 1e6.
pub fn bigarray_bound() -> usize {
    std::env::var("MXNET_KVSTORE_BIGARRAY_BOUND").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1_000_000)
}

/// The server holding a small key: `(key * 9973) % servers` in 32-bit arithmetic as MXNet
/// computes it (the product wraps for keys past 215 000; a negative result, which would index
/// out of MXNet's range table, is taken modulo instead).
pub fn small_key_server(key: i32, servers: usize) -> usize {
    let s = servers.max(1) as i32;
    key.wrapping_mul(9973).rem_euclid(s) as usize
}

/// `round(n / servers * i)`, in double precision as MXNet computes it.
fn boundary(n: usize, servers: usize, i: usize) -> usize {
    (n as f64 / servers as f64 * i as f64).round() as usize
}

/// The parts of a dense key of `n` elements: one part on `(key * 9973) % S` below `bound`,
/// else one contiguous part per server, sized `round(n/S*(i+1)) - round(n/S*i)`.
pub fn dense_parts(key: i32, n: usize, servers: usize, bound: usize) -> Vec<Part> {
    if n < bound {
        return vec![Part { server: small_key_server(key, servers), offset: 0, len: n }];
    }
    (0..servers)
        .map(|i| {
            let offset = boundary(n, servers, i);
            Part { server: i, offset, len: boundary(n, servers, i + 1) - offset }
        })
        .collect()
}

/// The parts of a gradient-compressed key of `n` elements whose packed form is `packed`
/// floats, each holding `factor` elements: big keys are split on the packed size (whole
/// packed floats per server, the last server taking the rest), so that each server can
/// unpack its part alone. Returns `(packed parts, element parts)`, both in server order.
pub fn compressed_parts(key: i32, n: usize, packed: usize, factor: usize, servers: usize, bound: usize) -> (Vec<Part>, Vec<Part>) {
    if n < bound {
        let server = small_key_server(key, servers);
        return (vec![Part { server, offset: 0, len: packed }], vec![Part { server, offset: 0, len: n }]);
    }
    let (mut packed_parts, mut parts) = (Vec::with_capacity(servers), Vec::with_capacity(servers));
    let (mut packed_done, mut done) = (0, 0);
    for i in 0..servers {
        let (p, e) = if i == servers - 1 {
            (packed - packed_done, n - done)
        } else {
            let p = boundary(packed, servers, i + 1) - boundary(packed, servers, i);
            (p, (p * factor).min(n - done))
        };
        packed_parts.push(Part { server: i, offset: packed_done, len: p });
        parts.push(Part { server: i, offset: done, len: e });
        packed_done += p;
        done += e;
    }
    (packed_parts, parts)
}

/// One server's rows of a row_sparse key: rows `start..start + rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowPart {
    /// Server rank.
    pub server: usize,
    /// First row.
    pub start: usize,
    /// Number of rows.
    pub rows: usize,
}

/// The row ranges of a row_sparse key of `rows` rows of `row_len` elements, as MXNet's
/// `EncodeRowSparseKey`: all rows on `(key * 9973) % S` while `rows * row_len` is below
/// `bound`, else one contiguous range per server, sized `round(rows/S*(i+1)) - round(rows/S*i)`.
pub fn row_parts(key: i32, rows: usize, row_len: usize, servers: usize, bound: usize) -> Vec<RowPart> {
    if rows.saturating_mul(row_len) < bound {
        return vec![RowPart { server: small_key_server(key, servers), start: 0, rows }];
    }
    (0..servers)
        .map(|i| {
            let start = boundary(rows, servers, i);
            RowPart { server: i, start, rows: boundary(rows, servers, i + 1) - start }
        })
        .collect()
}

/// How one key of an init call weighs on the servers, for [`Balance::place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Load {
    /// A key split as MXNet splits it: its bytes on each server, by server rank.
    Split(Vec<u64>),
    /// A small dense or compressed key of this many bytes, to place on one server.
    Small(u64),
    /// A key placed by MXNet's rule and not counted (row_sparse: what crosses the links is
    /// the rows pushed and pulled, not its size); the value is its size, for the fingerprint.
    Uncounted(u64),
}

/// Where small keys go: each on the server holding the fewest bytes so far, counting the
/// parts of big keys, which stay exactly where MXNet puts them (server-side updaters see
/// the same parts). MXNet's `(key * 9973) % S` ignores sizes: ResNet-50's small keys put
/// 53.3 MB of 102.2 MB on one of 2 servers, whose link then carries 4 % more than an even
/// share. A small key is whole on one server, so its values do not depend on which.
///
/// Every worker must place every key on the same server, and the servers receive the keys
/// from worker 0: the placement is a function of the keys of the init calls alone (within
/// a call, in an order that does not depend on the order they were given in), and the
/// [`fingerprint`](Balance::fingerprint) of all placements so far travels with each worker
/// barrier, where server 0 refuses workers that disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    loads: Vec<u64>,
    fingerprint: u64,
    /// MXNet's placement for small keys too (`KVSTORE_DIST_BALANCE=0`).
    mxnet: bool,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Balance {
    /// No keys yet, on `servers` servers; `mxnet`: small keys on `(key * 9973) % S` as MXNet.
    pub fn new(servers: usize, mxnet: bool) -> Balance {
        Balance { loads: vec![0; servers.max(1)], fingerprint: FNV_OFFSET, mxnet }
    }

    /// `KVSTORE_DIST_BALANCE=0` keeps MXNet's placement of small keys; anything else (or
    /// unset) balances them.
    pub fn from_env(servers: usize) -> Balance {
        let mxnet = std::env::var("KVSTORE_DIST_BALANCE").is_ok_and(|v| v.trim() == "0");
        Balance::new(servers, mxnet)
    }

    /// Bytes held per server, by server rank.
    pub fn loads(&self) -> &[u64] {
        &self.loads
    }

    /// A digest of every key placed so far, with its size and servers; never 0 (a barrier
    /// that carries 0 checks nothing) nor `wire::INIT_REFUSED` (u64::MAX).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint.clamp(1, u64::MAX - 1)
    }

    fn mix(&mut self, word: u64) {
        for b in word.to_le_bytes() {
            self.fingerprint = (self.fingerprint ^ b as u64).wrapping_mul(FNV_PRIME);
        }
    }

    /// Places the keys of one init call: returns, in the call's order, the server of each
    /// [`Load::Small`] key (`None` for the others). Big keys' parts are counted first, then
    /// small keys go largest first (ties: smaller key first) each to the least-loaded server
    /// (ties: the lowest rank), so the result does not depend on the order of the call.
    pub fn place(&mut self, keys: &[(i32, Load)]) -> Vec<Option<usize>> {
        let servers = self.loads.len();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by_key(|&i| {
            let big = !matches!(keys[i].1, Load::Small(_));
            let size = match &keys[i].1 {
                Load::Split(parts) => parts.iter().sum(),
                Load::Small(b) | Load::Uncounted(b) => *b,
            };
            (!big, std::cmp::Reverse(size), keys[i].0)
        });
        let mut out = vec![None; keys.len()];
        for i in order {
            let (key, load) = &keys[i];
            self.mix(*key as u32 as u64);
            match load {
                Load::Split(parts) => {
                    self.mix(1);
                    for (s, b) in parts.iter().enumerate() {
                        if let Some(l) = self.loads.get_mut(s) {
                            *l += b;
                        }
                        self.mix(*b);
                    }
                }
                Load::Small(b) => {
                    let server = if self.mxnet {
                        small_key_server(*key, servers)
                    } else {
                        (0..servers).min_by_key(|&s| (self.loads[s], s)).unwrap_or(0)
                    };
                    self.loads[server] += b;
                    self.mix(2);
                    self.mix(*b);
                    self.mix(server as u64);
                    out[i] = Some(server);
                }
                Load::Uncounted(b) => {
                    self.mix(3);
                    self.mix(*b);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MXNet's formulas, written out independently of the code above.
    fn mxnet_part_size(n: usize, s: usize, i: usize) -> usize {
        let r = |x: f64| x.round() as usize;
        r(n as f64 / s as f64 * (i + 1) as f64) - r(n as f64 / s as f64 * i as f64)
    }

    #[test]
    fn parts_longer_than_a_chunk_go_in_chunks() {
        let parts = [Part { server: 0, offset: 0, len: 10 }, Part { server: 1, offset: 10, len: 4 }];
        let at = |v: Vec<Piece>| v.iter().map(|p| (p.part, p.at, p.len, p.chunk)).collect::<Vec<_>>();
        assert_eq!(at(pieces(&parts, 4)), vec![(0, 0, 4, 4), (0, 4, 4, 4), (0, 8, 2, 4), (1, 0, 4, 0)]);
        assert_eq!(at(pieces(&parts, 0)), vec![(0, 0, 10, 0), (1, 0, 4, 0)]);
        assert_eq!(at(pieces(&parts, 5)), vec![(0, 0, 5, 5), (0, 5, 5, 5), (1, 0, 4, 0)]);
    }

    #[test]
    fn small_keys_go_to_key_times_9973_mod_servers() {
        for s in 1..=5 {
            for key in [0, 1, 2, 3, 7, 9, 100, 9973, 215_000] {
                let parts = dense_parts(key, 10, s, 1000);
                assert_eq!(parts, vec![Part { server: ((key as i64 * 9973) % s as i64) as usize, offset: 0, len: 10 }]);
            }
        }
        // Concrete values: 3 servers, keys 0..6 -> 0, 1, 2, 0, 1, 2 (9973 % 3 == 1).
        let servers: Vec<usize> = (0..6).map(|k| small_key_server(k, 3)).collect();
        assert_eq!(servers, vec![0, 1, 2, 0, 1, 2]);
        // 2 servers: 9973 is odd, so the parity of the key decides.
        assert_eq!(small_key_server(4, 2), 0);
        assert_eq!(small_key_server(5, 2), 1);
        // The bound itself is already big (MXNet: `num_arr_elems < bigarray_bound_`).
        assert_eq!(dense_parts(1, 1000, 2, 1000).len(), 2);
        assert_eq!(dense_parts(1, 999, 2, 1000).len(), 1);
    }

    #[test]
    fn big_keys_split_into_rounded_contiguous_parts() {
        for s in 1..=4 {
            for n in [1000, 1001, 1003, 4097, 1_000_000, 1_234_567] {
                let parts = dense_parts(5, n, s, 1000);
                assert_eq!(parts.len(), s);
                let mut offset = 0;
                for (i, p) in parts.iter().enumerate() {
                    assert_eq!(p.server, i);
                    assert_eq!(p.offset, offset);
                    assert_eq!(p.len, mxnet_part_size(n, s, i), "n={n} s={s} i={i}");
                    offset += p.len;
                }
                assert_eq!(offset, n);
            }
        }
        // Concrete: 1001 over 3 servers: round(333.67)=334, round(667.33)=667, 1001.
        let lens: Vec<usize> = dense_parts(0, 1001, 3, 1000).iter().map(|p| p.len).collect();
        assert_eq!(lens, vec![334, 333, 334]);
    }

    #[test]
    fn compressed_keys_split_on_whole_packed_floats() {
        // 2bit: 16 elements per packed float. 1000 elements -> 63 floats, 2 servers.
        let (packed, parts) = compressed_parts(3, 1000, 63, 16, 2, 100);
        assert_eq!(packed.iter().map(|p| p.len).collect::<Vec<_>>(), vec![32, 31]);
        assert_eq!(parts.iter().map(|p| p.len).collect::<Vec<_>>(), vec![512, 488]);
        assert_eq!(parts[1].offset, 512);
        // Small: one server, as for dense keys.
        let (packed, parts) = compressed_parts(3, 50, 4, 16, 2, 100);
        assert_eq!((packed[0].server, parts[0].server, parts[0].len), (1, 1, 50));
    }

    #[test]
    fn row_sparse_keys_split_by_rows_at_the_bound() {
        // 6 rows of 2: 12 elements; below a bound of 13 one server, at 12 split.
        assert_eq!(row_parts(3, 6, 2, 2, 13), vec![RowPart { server: 1, start: 0, rows: 6 }]);
        let parts = row_parts(3, 6, 2, 2, 12);
        assert_eq!(parts, vec![RowPart { server: 0, start: 0, rows: 3 }, RowPart { server: 1, start: 3, rows: 3 }]);
        // 1001 rows over 3 servers: llround(333.67)=334, llround(667.33)=667.
        let rows: Vec<usize> = row_parts(0, 1001, 1, 3, 10).iter().map(|p| p.rows).collect();
        assert_eq!(rows, vec![334, 333, 334]);
        for s in 1..=4 {
            for n in [1usize, 7, 100, 12345] {
                let parts = row_parts(1, n, 3, s, 1);
                assert_eq!(parts.iter().map(|p| p.rows).sum::<usize>(), n);
                for (i, p) in parts.iter().enumerate() {
                    assert_eq!(p.rows, mxnet_part_size(n, s, i));
                }
            }
        }
    }

    /// ResNet-50's 161 gradient sizes (elements), in model order (benches/distbench.c).
    fn resnet50() -> Vec<usize> {
        let mut v = vec![64 * 3 * 7 * 7, 64, 64];
        let mut inp = 64;
        for (s, blocks) in [3, 4, 6, 3].into_iter().enumerate() {
            let (mid, out) = (64 << s, (64 << s) * 4);
            for b in 0..blocks {
                v.extend([mid * inp, mid, mid, mid * mid * 9, mid, mid, out * mid, out, out]);
                if b == 0 {
                    v.extend([out * inp, out, out]);
                }
                inp = out;
            }
        }
        v.extend([1000 * 2048, 1000]);
        v
    }

    /// The loads of ResNet-50 (float32) on `servers` servers, all keys in one init call, or
    /// one call per key (as Gluon's trainer inits).
    fn resnet_loads(servers: usize, mxnet: bool, one_call: bool) -> (Balance, Vec<Vec<Part>>) {
        let bound = 1_000_000;
        let sizes = resnet50();
        let mut b = Balance::new(servers, mxnet);
        let mut parts: Vec<Vec<Part>> = sizes.iter().enumerate().map(|(k, &n)| dense_parts(k as i32, n, servers, bound)).collect();
        let loads: Vec<(i32, Load)> = sizes
            .iter()
            .zip(&parts)
            .enumerate()
            .map(|(k, (&n, p))| {
                let load = if n < bound {
                    Load::Small(4 * n as u64)
                } else {
                    let mut per = vec![0; servers];
                    p.iter().for_each(|p| per[p.server] += 4 * p.len as u64);
                    Load::Split(per)
                };
                (k as i32, load)
            })
            .collect();
        let placed: Vec<Option<usize>> = if one_call { b.place(&loads) } else { loads.iter().flat_map(|l| b.place(std::slice::from_ref(l))).collect() };
        for (p, s) in parts.iter_mut().zip(placed) {
            if let Some(s) = s {
                p[0].server = s;
            }
        }
        (b, parts)
    }

    #[test]
    fn small_keys_even_out_the_servers_bytes() {
        let total: u64 = resnet50().iter().map(|&n| 4 * n as u64).sum();
        assert_eq!(total, 102_228_128);
        // MXNet's rule: 53.3 MB on server 1 of 2 (4 % over an even share).
        let (mx, mx_parts) = resnet_loads(2, true, true);
        assert_eq!(mx.loads().iter().sum::<u64>(), total);
        assert!(mx.loads()[1] > 53_000_000, "{:?}", mx.loads());
        for (k, p) in mx_parts.iter().enumerate() {
            assert_eq!(p, &dense_parts(k as i32, resnet50()[k], 2, 1_000_000), "MXNet's placement kept with KVSTORE_DIST_BALANCE=0");
        }
        for servers in [2, 3, 4] {
            for one_call in [true, false] {
                let (b, parts) = resnet_loads(servers, false, one_call);
                let loads = b.loads();
                assert_eq!(loads.iter().sum::<u64>(), total);
                let (max, min) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
                // The largest small key is 2.36 MB (512*512*9 floats); largest first in one
                // call evens out to within a small key's few KB, key by key to within one key.
                let slack = if one_call { 50_000 } else { 2_400_000 };
                assert!(max - min <= slack, "{servers} servers, one call {one_call}: {loads:?}");
                // Big keys keep MXNet's split exactly.
                for (k, p) in parts.iter().enumerate() {
                    let n = resnet50()[k];
                    if n >= 1_000_000 {
                        assert_eq!(p, &dense_parts(k as i32, n, servers, 1_000_000));
                    } else {
                        assert_eq!((p.len(), p[0].offset, p[0].len), (1, 0, n));
                    }
                }
            }
        }
        let (b, _) = resnet_loads(2, false, true);
        assert!(b.loads()[0].max(b.loads()[1]) < 51_150_000, "{:?}", b.loads());
    }

    #[test]
    fn placement_is_a_function_of_the_keys_not_of_their_order_in_a_call() {
        let keys: Vec<(i32, Load)> = vec![
            (7, Load::Small(400)),
            (3, Load::Split(vec![1000, 1000, 1004])),
            (9, Load::Small(400)),
            (1, Load::Small(2000)),
            (4, Load::Uncounted(64)),
            (2, Load::Small(100)),
        ];
        let mut a = Balance::new(3, false);
        let placed = a.place(&keys);
        // Split first (1000, 1000, 1004); then 2000 (key 1) on server 0, 400 (key 7, the
        // smaller key of the tie) on 1, 400 (key 9) on 2, 100 (key 2) on 1.
        assert_eq!(placed, vec![Some(1), None, Some(2), Some(0), None, Some(1)]);
        assert_eq!(a.loads(), &[3000, 1500, 1404]);
        let mut reversed: Vec<(i32, Load)> = keys.iter().rev().cloned().collect();
        let mut b = Balance::new(3, false);
        let mut placed_b = b.place(&reversed);
        placed_b.reverse();
        assert_eq!(placed_b, placed);
        assert_eq!(b, a, "same loads and fingerprint whatever the order");
        // A later call continues from the loads so far; both sides stay equal.
        assert_eq!(a.place(&[(11, Load::Small(10))]), vec![Some(2)]);
        assert_eq!(b.place(&[(11, Load::Small(10))]), vec![Some(2)]);
        assert_eq!(a.fingerprint(), b.fingerprint());
        // Another key set, size, or split gives another fingerprint.
        let fp = |keys: &[(i32, Load)]| {
            let mut b = Balance::new(3, false);
            b.place(keys);
            b.fingerprint()
        };
        let base = fp(&keys);
        reversed[0] = (2, Load::Small(104));
        assert_ne!(fp(&reversed), base);
        assert_ne!(fp(&keys[1..]), base);
        let mut other = keys.clone();
        other[4] = (4, Load::Uncounted(65));
        assert_ne!(fp(&other), base);
        // The same keys in two calls are not the same placement as in one.
        let mut two = Balance::new(3, false);
        two.place(&keys[..3]);
        two.place(&keys[3..]);
        assert_ne!(two.fingerprint(), base);
        // MXNet's rule, and the fingerprint tells the two apart.
        let mut mx = Balance::new(3, true);
        let placed = mx.place(&keys);
        assert_eq!(placed, vec![Some(small_key_server(7, 3)), None, Some(small_key_server(9, 3)), Some(small_key_server(1, 3)), None, Some(small_key_server(2, 3))]);
        assert_ne!(mx.fingerprint(), base);
    }
}
