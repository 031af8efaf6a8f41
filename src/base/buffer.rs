//! Host memory: byte buffers aligned for every element type, viewable as typed slices.

use crate::error::Result;
use bytemuck::Pod;

/// One cache line: the unit buffers are allocated in, so every buffer starts on a line.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Line([u8; 64]);

/// A zero-initialised host buffer starting on a 64-byte cache line, so any element type fits
/// and kernels write whole lines: streaming stores to a line shared with the previous buffer
/// would be split, and wide (AVX2) streaming stores need 32-byte alignment.
#[derive(Debug, Clone, Default)]
pub struct Buffer {
    // Lines give the alignment; `len` is the meaningful number of bytes.
    lines: Vec<Line>,
    len: usize,
}

impl Buffer {
    /// A buffer of `len` zero bytes (zeroed by the allocator: the OS supplies big buffers'
    /// zero pages lazily).
    pub fn zeroed(len: usize) -> Result<Buffer> {
        let lines = bytemuck::allocation::try_zeroed_vec::<Line>(len.div_ceil(64))
            .map_err(|()| crate::Error::new(format!("out of host memory allocating {len} bytes")))?;
        Ok(Buffer { lines, len })
    }

    /// A buffer holding a copy of `bytes`, written once (no zeroing pass before the copy).
    pub fn copied(bytes: &[u8]) -> Result<Buffer> {
        let mut lines = try_with_capacity::<Line>(bytes.len().div_ceil(64))?;
        let (whole, rest) = bytes.as_chunks::<64>();
        lines.extend(whole.iter().map(|c| Line(*c)));
        if !rest.is_empty() {
            let mut last = [0u8; 64];
            last[..rest.len()].copy_from_slice(rest);
            lines.push(Line(last));
        }
        Ok(Buffer { lines, len: bytes.len() })
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
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }

    /// All bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..len]
    }

    /// Start of the buffer, for `MXNDArrayGetData`.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes_mut().as_mut_ptr()
    }
}

/// A copy of `items`, or an "out of host memory" error: for copies whose size a user's input
/// sets, which must fail with -1 rather than abort the process.
pub fn try_copy<T: Clone>(items: &[T]) -> Result<Vec<T>> {
    let mut out = try_with_capacity(items.len())?;
    out.extend_from_slice(items);
    Ok(out)
}

/// An empty vector with room for `n` items, or an "out of host memory" error (see [`try_copy`]).
pub fn try_with_capacity<T>(n: usize) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| crate::Error::new(format!("out of host memory allocating {} bytes", n.saturating_mul(std::mem::size_of::<T>()))))?;
    Ok(out)
}

/// `n` copies of `value`, or an "out of host memory" error (see [`try_copy`]).
pub fn try_filled<T: Clone>(n: usize, value: T) -> Result<Vec<T>> {
    let mut out = try_with_capacity(n)?;
    out.resize(n, value);
    Ok(out)
}

/// `bytes` as a slice of `T`; `bytes` must start at a multiple of `T`'s size in a [`Buffer`].
pub fn typed<T: Pod>(bytes: &[u8]) -> &[T] {
    // Buffers are 64-byte aligned and every view starts at a whole element, so the cast holds;
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
        assert_eq!(b.as_mut_ptr() as usize % 64, 0);
        b.bytes_mut()[12] = 7;
        assert_eq!(b.bytes()[12], 7);
        let mut f = Buffer::zeroed(16).unwrap();
        typed_mut::<f64>(f.bytes_mut())[1] = 2.5;
        assert_eq!(typed::<f64>(f.bytes()), &[0.0, 2.5]);
    }

    #[test]
    fn copied_buffers_hold_exactly_the_bytes_on_a_line() {
        for len in [0, 1, 63, 64, 65, 128, 1000] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut b = Buffer::copied(&bytes).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.bytes(), &bytes[..], "{len} bytes");
            if len > 0 {
                assert_eq!(b.as_mut_ptr() as usize % 64, 0);
            }
        }
    }
}
