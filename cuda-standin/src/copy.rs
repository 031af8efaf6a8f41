//! The work of copies and memsets, run on a stream's thread over translated [`Span`]s.

use crate::memory::Span;
use crate::result::CUresult;
use crate::stream::Work;

/// Where a copy reads from.
pub enum Source {
    Memory(Span),
    /// Pageable host memory read when the copy was enqueued (the driver's staging copy).
    Staged(Vec<u8>),
}

pub fn copy(dst: Span, src: Source, len: usize) -> Work {
    Box::new(move || -> Result<(), CUresult> {
        let to = dst.get()?;
        let from = match &src {
            Source::Memory(span) => span.get()?.cast_const(),
            Source::Staged(bytes) => bytes.as_ptr(),
        };
        // SAFETY: both ranges were checked to hold `len` bytes (device spans against their
        // allocation, host pointers by the caller's contract); `copy` allows overlap.
        unsafe { std::ptr::copy(from, to, len) };
        Ok(())
    })
}

/// Fills `count` elements of `width` bytes (1 or 4) with the low `width` bytes of `value`.
pub fn fill(dst: Span, value: u32, width: usize, count: usize) -> Work {
    Box::new(move || -> Result<(), CUresult> {
        let to = dst.get()?;
        let pattern = &value.to_ne_bytes()[..width];
        // SAFETY: the span was checked to hold `count * width` bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(to, count * width) };
        for chunk in bytes.chunks_exact_mut(width) {
            chunk.copy_from_slice(pattern);
        }
        Ok(())
    })
}
