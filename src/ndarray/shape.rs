//! An array's shape, stored inline for up to [`INLINE_DIMS`] dimensions.
//!
//! Views are cloned and compared for every value of every call (a `small` push of 2000 keys
//! clones and checks 8000 of them): a shape behind its own allocation costs a shared
//! refcount update per clone and drop and a cache miss per comparison. Nearly every real
//! shape has at most 4 dimensions, so those live in the view itself.

use std::sync::Arc;

const INLINE_DIMS: usize = 4;

#[derive(Clone)]
pub(crate) enum Shape {
    Inline { len: u8, dims: [usize; INLINE_DIMS] },
    Shared(Arc<[usize]>),
}

impl std::ops::Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        match self {
            Shape::Inline { len, dims } => &dims[..*len as usize],
            Shape::Shared(dims) => dims,
        }
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Shape {
        if dims.len() <= INLINE_DIMS {
            let mut inline = [0; INLINE_DIMS];
            inline[..dims.len()].copy_from_slice(dims);
            Shape::Inline { len: dims.len() as u8, dims: inline }
        } else {
            Shape::Shared(dims.into())
        }
    }
}

impl From<Vec<usize>> for Shape {
    fn from(dims: Vec<usize>) -> Shape {
        Shape::from(&dims[..])
    }
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_shapes_are_inline_and_long_ones_shared_both_reading_the_same() {
        for dims in [&[][..], &[7], &[2, 3], &[1, 2, 3, 4], &[1, 2, 3, 4, 5, 6]] {
            let shape = Shape::from(dims);
            assert_eq!(&*shape, dims);
            assert_eq!(matches!(shape, Shape::Inline { .. }), dims.len() <= INLINE_DIMS);
            assert_eq!(&*shape.clone(), dims);
        }
    }
}
