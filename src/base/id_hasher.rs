//! Hashing of integer ids, cheaply: maps keyed by a key's id are looked up for every value of
//! every call, and the ids are the user's ints (or small string-key ids), not input an
//! attacker shapes to collide, so SipHash's protection buys nothing there.

use std::hash::Hasher;

/// Multiplicative hashing of one integer (Fibonacci hashing). The map picks a bucket from the
/// low bits, which an odd multiplier permutes (distinct low bits of ids stay distinct), and a
/// tag from the high bits, which depend on every bit of the id.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i32(&mut self, id: i32) {
        self.0 = (u64::from(id as u32) ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    #[test]
    fn nearby_ids_get_distinct_buckets_and_spread_tags() {
        let build = BuildHasherDefault::<super::IdHasher>::default();
        let buckets: std::collections::HashSet<u64> = (0..64i32).map(|id| build.hash_one(id) & 63).collect();
        assert_eq!(buckets.len(), 64);
        let tags: std::collections::HashSet<u64> = (0..64i32).map(|id| build.hash_one(id) >> 58).collect();
        assert!(tags.len() > 32, "{} distinct top-6-bit tags for 64 ids", tags.len());
        assert_ne!(build.hash_one(-1i32), build.hash_one(1i32));
    }
}
