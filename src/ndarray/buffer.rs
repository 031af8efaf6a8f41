//! Host memory: byte buffers aligned for every element type, viewable as typed slices.

use crate::error::Result;
use bytemuck::Pod;

/// A zero-initialised host buffer whose start is 8-byte aligned, so any element type fits.
#[derive(Debug, Clone, Default)]
pub struct Buffer {
    // u64 words give the alignment; `len` is the meaningful number of bytes.
    words: Vec<u64>,
    len: usize,
}

impl Buffer {
    /// A buffer of `len` zero bytes (the OS supplies the zero pages lazily).
    pub fn zeroed(len: usize) -> Result<Buffer> {
        let n_words = len.div_ceil(8);
        let mut words = Vec::new();
        crate::ensure!(
            words.try_reserve_exact(n_words).is_ok(),
            "out of host memory allocating {len} bytes"
        );
        words.resize(n_words, 0u64);
        Ok(Buffer { words, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    /// All bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut bytemuck::cast_slice_mut(&mut self.words)[..len]
    }

    /// Start of the buffer, for `MXNDArrayGetData`.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes_mut().as_mut_ptr()
    }
}

/// `bytes` as a slice of `T`; `bytes` must start at a multiple of `T`'s size in a [`Buffer`].
pub fn typed<T: Pod>(bytes: &[u8]) -> &[T] {
    // Buffers are 8-byte aligned and every view starts at a whole element, so the cast holds;
    // an empty slice is returned rather than panicking should that ever be violated.
    bytemuck::try_cast_slice(bytes).unwrap_or(&[])
}

/// `bytes` as a writable slice of `T`; see [`typed`].
pub fn typed_mut<T: Pod>(bytes: &mut [u8]) -> &mut [T] {
    bytemuck::try_cast_slice_mut(bytes).unwrap_or(&mut [])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_exact_length() {
        let mut b = Buffer::zeroed(13).unwrap();
        assert_eq!(b.len(), 13);
        assert!(b.bytes().iter().all(|&x| x == 0));
        assert_eq!(b.as_mut_ptr() as usize % 8, 0);
        b.bytes_mut()[12] = 7;
        assert_eq!(b.bytes()[12], 7);
        let mut f = Buffer::zeroed(16).unwrap();
        typed_mut::<f64>(f.bytes_mut())[1] = 2.5;
        assert_eq!(typed::<f64>(f.bytes()), &[0.0, 2.5]);
    }
}
