//! Element-wise casts between dtypes, as C's `static_cast` (MXNet's `CopyFromTo` across types).

use super::element::{convert, Element};
use super::DType;
use super::buffer::{typed, typed_mut};

/// Copies `src` (of `src_dtype`) into `dst` (of `dst_dtype`), casting element-wise, on the
/// calling thread. Kernels split big copies over threads (`reduce::copy_cast`).
pub fn cast(src_dtype: DType, src: &[u8], dst_dtype: DType, dst: &mut [u8]) {
    if src_dtype == dst_dtype {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
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
    use crate::base::buffer::Buffer;

    #[test]
    fn casts_convert_like_static_cast() {
        let mut src = Buffer::zeroed(12).unwrap();
        typed_mut::<f32>(src.bytes_mut()).copy_from_slice(&[1.5, -2.25, 300.0]);
        let mut dst = Buffer::zeroed(24).unwrap();
        cast(DType::Float32, src.bytes(), DType::Float64, dst.bytes_mut());
        assert_eq!(typed::<f64>(dst.bytes()), &[1.5, -2.25, 300.0]);
        let mut ints = Buffer::zeroed(12).unwrap();
        cast(DType::Float32, src.bytes(), DType::Int32, ints.bytes_mut());
        assert_eq!(typed::<i32>(ints.bytes()), &[1, -2, 300]);
    }
}
