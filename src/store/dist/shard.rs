//! How keys are spread over servers, exactly as MXNet 1.9's workers do it
//! (`kvstore_dist.h`, `EncodeDefaultKey` and `EncodeCompressedKey`).

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

#[cfg(test)]
mod tests {
    use super::*;

    /// MXNet's formulas, written out independently of the code above.
    fn mxnet_part_size(n: usize, s: usize, i: usize) -> usize {
        let r = |x: f64| x.round() as usize;
        r(n as f64 / s as f64 * (i + 1) as f64) - r(n as f64 / s as f64 * i as f64)
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
}
