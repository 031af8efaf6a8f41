//! A value alone on its cache lines, so that threads writing neighbouring values do not
//! contend for one line.

/// `T` aligned (and so padded) to 128 bytes: two 64-byte lines, since x86_64 CPUs fetch lines
/// in adjacent pairs.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(T);

impl<T> CachePadded<T> {
    /// Pads `value`.
    pub const fn new(value: T) -> CachePadded<T> {
        CachePadded(value)
    }
}

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_values_start_on_their_own_lines() {
        let pair = [CachePadded::new(1u8), CachePadded::new(2u8)];
        assert_eq!(std::mem::size_of_val(&pair[0]), 128);
        assert_eq!(&*pair[1] as *const u8 as usize % 128, 0);
        assert_eq!(*pair[0] + *pair[1], 3);
    }
}
