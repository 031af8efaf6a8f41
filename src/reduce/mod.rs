//! Reduction kernels: the element-wise sum of a key's pushed values, and copies with casts.
//! Every kernel reads and writes plain slices; the store decides what, the engine decides when.

pub mod element;
mod parallel;
mod sum;

pub use parallel::ReduceConfig;
pub use sum::{sum_into, SumOrder};

use crate::ndarray::buffer::{typed, typed_mut};
use crate::ndarray::DType;
use element::{convert, Element};

/// Copies `src` (of `src_dtype`) into `dst` (of `dst_dtype`), casting element-wise.
pub fn copy_cast(src_dtype: DType, src: &[u8], dst_dtype: DType, dst: &mut [u8]) {
    if src_dtype == dst_dtype {
        parallel::copy(src, dst, src_dtype.size());
        return;
    }
    crate::with_element_type!(src_dtype, S => {
        crate::with_element_type!(dst_dtype, T => cast_slice::<S, T>(typed::<S>(src), typed_mut::<T>(dst)))
    })
}

fn cast_slice<S: Element, T: Element>(src: &[S], dst: &mut [T]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = convert::<S, T>(*s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndarray::buffer::Buffer;

    #[test]
    fn copy_cast_converts_like_static_cast() {
        let mut src = Buffer::zeroed(12).unwrap();
        typed_mut::<f32>(src.bytes_mut()).copy_from_slice(&[1.5, -2.25, 300.0]);
        let mut dst = Buffer::zeroed(24).unwrap();
        copy_cast(DType::Float32, src.bytes(), DType::Float64, dst.bytes_mut());
        assert_eq!(typed::<f64>(dst.bytes()), &[1.5, -2.25, 300.0]);
        let mut ints = Buffer::zeroed(12).unwrap();
        copy_cast(DType::Float32, src.bytes(), DType::Int32, ints.bytes_mut());
        assert_eq!(typed::<i32>(ints.bytes()), &[1, -2, 300]);
    }
}
