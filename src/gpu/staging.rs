//! Pinned staging buffers for host<->device copies of pageable user memory. Pinned memory is
//! expensive to allocate (`cuMemHostAlloc` of 64 MiB: 43 ms), so it is never allocated on the
//! hot path: buffers come in power-of-two size classes, are kept for reuse, and a transfer
//! larger than the largest class goes through a ring of chunks so that copying the next chunk
//! into pinned memory overlaps the DMA of the previous one.

/// The smallest class: below it, one buffer of this size serves.
pub const MIN_CLASS_BYTES: usize = 64 << 10;
/// The largest class, and the chunk size of larger transfers.
pub const MAX_CLASS_BYTES: usize = 64 << 20;
/// Chunks in flight per copy stream for a large transfer.
pub const RING_DEPTH: usize = 2;

/// The size class of a transfer of `bytes`: the smallest power of two at least `bytes`,
/// clamped to [`MIN_CLASS_BYTES`, `MAX_CLASS_BYTES`].
pub fn class_bytes(bytes: usize) -> usize {
    bytes.max(MIN_CLASS_BYTES).checked_next_power_of_two().unwrap_or(MAX_CLASS_BYTES).min(MAX_CLASS_BYTES)
}

/// The index of a class (0 for [`MIN_CLASS_BYTES`]).
pub fn class_index(bytes: usize) -> usize {
    (class_bytes(bytes) / MIN_CLASS_BYTES).trailing_zeros() as usize
}

/// Number of classes.
pub const CLASSES: usize = (MAX_CLASS_BYTES / MIN_CLASS_BYTES).trailing_zeros() as usize + 1;

/// The pieces a transfer of `bytes` is staged in: `(offset, len)`, each at most one class,
/// covering the range in order, and which ring slot each uses.
pub fn chunks(bytes: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < bytes {
        let len = (bytes - offset).min(MAX_CLASS_BYTES);
        out.push((offset, len, out.len() % RING_DEPTH));
        offset += len;
    }
    out
}

/// Free buffers by class: a buffer handed out is returned after its copy's event fired.
/// Generic over the buffer so the bookkeeping is tested without a driver.
#[derive(Debug)]
pub struct Pool<B> {
    free: Vec<Vec<B>>,
    /// Buffers allocated over the pool's life, by class (for the "no allocation on the hot
    /// path" check: after warm-up this stops growing).
    pub allocated: [usize; CLASSES],
}

impl<B> Default for Pool<B> {
    fn default() -> Self {
        Pool { free: (0..CLASSES).map(|_| Vec::new()).collect(), allocated: [0; CLASSES] }
    }
}

impl<B> Pool<B> {
    /// A buffer of `bytes`' class: a free one, or a new one from `alloc(class_bytes)`.
    pub fn take<E>(&mut self, bytes: usize, alloc: impl FnOnce(usize) -> Result<B, E>) -> Result<B, E> {
        let c = class_index(bytes);
        if let Some(b) = self.free[c].pop() {
            return Ok(b);
        }
        let b = alloc(class_bytes(bytes))?;
        self.allocated[c] += 1;
        Ok(b)
    }

    /// Returns a buffer of `bytes`' class for reuse.
    pub fn give_back(&mut self, bytes: usize, buffer: B) {
        self.free[class_index(bytes)].push(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_powers_of_two_within_bounds() {
        assert_eq!(class_bytes(0), MIN_CLASS_BYTES);
        assert_eq!(class_bytes(1), MIN_CLASS_BYTES);
        assert_eq!(class_bytes(MIN_CLASS_BYTES + 1), 2 * MIN_CLASS_BYTES);
        assert_eq!(class_bytes(3 << 20), 4 << 20);
        assert_eq!(class_bytes(MAX_CLASS_BYTES), MAX_CLASS_BYTES);
        assert_eq!(class_bytes(usize::MAX), MAX_CLASS_BYTES);
        assert_eq!(class_index(1), 0);
        assert_eq!(class_index(MAX_CLASS_BYTES), CLASSES - 1);
        assert_eq!(CLASSES, 11);
    }

    #[test]
    fn large_transfers_are_chunked_in_order_over_the_ring() {
        assert!(chunks(0).is_empty());
        assert_eq!(chunks(5), [(0, 5, 0)]);
        let big = 2 * MAX_CLASS_BYTES + 7;
        let c = chunks(big);
        assert_eq!(c, [(0, MAX_CLASS_BYTES, 0), (MAX_CLASS_BYTES, MAX_CLASS_BYTES, 1), (2 * MAX_CLASS_BYTES, 7, 0)]);
        assert_eq!(c.iter().map(|x| x.1).sum::<usize>(), big);
    }

    #[test]
    fn a_warm_pool_allocates_nothing() {
        let mut pool: Pool<Vec<u8>> = Pool::default();
        let mut allocs = 0;
        for _ in 0..3 {
            let a = pool.take(1000, |n| { allocs += 1; Ok::<_, ()>(vec![0; n]) }).unwrap();
            assert_eq!(a.len(), MIN_CLASS_BYTES);
            let b = pool.take(1 << 20, |n| { allocs += 1; Ok::<_, ()>(vec![0; n]) }).unwrap();
            pool.give_back(1000, a);
            pool.give_back(1 << 20, b);
        }
        assert_eq!(allocs, 2, "only the first round allocates");
        assert_eq!(pool.allocated[0], 1);
        assert!(pool.take(10, |_| Err("no memory")).is_ok(), "a free buffer needs no allocation");
        assert_eq!(pool.take(10, |_| Err("no memory")).unwrap_err(), "no memory");
    }
}
