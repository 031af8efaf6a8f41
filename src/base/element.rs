//! The element types as Rust types, with MXNet's arithmetic for each, and the dispatch from a
//! runtime [`DType`](crate::DType) to them.

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};

/// MXNet's `bool` element: one byte, 0 or 1.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable, Default)]
pub struct Bool(pub u8);

/// An element type's arithmetic and conversions.
pub trait Element: Pod + Send + Sync + Default + PartialEq {
    /// `a + b` as MXNet computes it in this type: wrapping for integers, rounded to the type
    /// after every operation for float16 and bfloat16, logical or for bool.
    fn add(self, other: Self) -> Self;
    /// The value as a double (exact for every type but the widest integers).
    fn to_f64(self) -> f64;
    /// The value as a 64-bit integer (floats truncate toward zero).
    fn to_i64(self) -> i64;
    /// C's `static_cast` from a double.
    fn from_f64(v: f64) -> Self;
    /// C's `static_cast` from a 64-bit integer.
    fn from_i64(v: i64) -> Self;
    /// Whether the type is an integer type (bool included).
    const IS_INTEGER: bool;
}

macro_rules! float_element {
    ($t:ty) => {
        impl Element for $t {
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                self + other
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            const IS_INTEGER: bool = false;
        }
    };
}
float_element!(f32);
float_element!(f64);

macro_rules! int_element {
    ($t:ty) => {
        impl Element for $t {
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            const IS_INTEGER: bool = true;
        }
    };
}
int_element!(u8);
int_element!(i8);
int_element!(i32);
int_element!(i64);

/// float32 to bfloat16 as MXNet converts (mshadow's `bf16_t`): the upper 16 bits, so
/// truncated toward zero, not rounded to nearest.
#[inline(always)]
pub fn bf16_from_f32_truncating(v: f32) -> bf16 {
    bf16::from_bits((v.to_bits() >> 16) as u16)
}

macro_rules! half_element {
    ($t:ty, $from_f32:expr) => {
        impl Element for $t {
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                $from_f32(self.to_f32() + other.to_f32())
            }
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            fn to_i64(self) -> i64 {
                self.to_f32() as i64
            }
            fn from_f64(v: f64) -> Self {
                $from_f32(v as f32)
            }
            fn from_i64(v: i64) -> Self {
                $from_f32(v as f32)
            }
            const IS_INTEGER: bool = false;
        }
    };
}
// float16 rounds to nearest (ties to even), as MXNet's `half_t` does.
half_element!(f16, f16::from_f32);
half_element!(bf16, bf16_from_f32_truncating);

impl Element for Bool {
    #[inline(always)]
    fn add(self, other: Self) -> Self {
        Bool(((self.0 | other.0) != 0) as u8)
    }
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    fn to_i64(self) -> i64 {
        (self.0 != 0) as i64
    }
    fn from_f64(v: f64) -> Self {
        Bool((v != 0.0) as u8)
    }
    fn from_i64(v: i64) -> Self {
        Bool((v != 0) as u8)
    }
    const IS_INTEGER: bool = true;
}

/// Runs `$body` with `$t` bound to the Rust type of the runtime dtype `$dtype`.
#[macro_export]
macro_rules! with_element_type {
    ($dtype:expr, $t:ident => $body:expr) => {{
        use $crate::base::DType as D;
        use $crate::base::element::Bool as B;
        match $dtype {
            D::Float32 => { type $t = f32; $body }
            D::Float64 => { type $t = f64; $body }
            D::Float16 => { type $t = half::f16; $body }
            D::Uint8 => { type $t = u8; $body }
            D::Int32 => { type $t = i32; $body }
            D::Int8 => { type $t = i8; $body }
            D::Int64 => { type $t = i64; $body }
            D::Bool => { type $t = B; $body }
            D::Bfloat16 => { type $t = half::bf16; $body }
        }
    }};
}

/// Converts one element as C's `static_cast` would.
#[inline]
pub fn convert<S: Element, T: Element>(v: S) -> T {
    if S::IS_INTEGER && T::IS_INTEGER {
        T::from_i64(v.to_i64())
    } else {
        T::from_f64(v.to_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_follows_mxnet_per_type() {
        assert_eq!(Element::add(250u8, 10u8), 4);
        assert_eq!(Element::add(127i8, 1i8), -128);
        assert_eq!(Element::add(Bool(1), Bool(1)), Bool(1));
        assert_eq!(Element::add(Bool(0), Bool(0)), Bool(0));
        // 2048 + 1 is not representable in f16: rounds back to 2048 at every step.
        let big = f16::from_f32(2048.0);
        assert_eq!(Element::add(big, f16::ONE), big);
        assert_eq!(convert::<f32, i32>(-2.7), -2);
        assert_eq!(convert::<i64, u8>(257), 1);
        assert_eq!(convert::<f32, Bool>(0.5), Bool(1));
        assert_eq!(convert::<bf16, f32>(bf16::from_f32(3.0)), 3.0);
        // bfloat16 truncates as MXNet's bf16_t does: 1 + 2^-8 + 2^-9 would round up to
        // 1 + 2^-7 to nearest, and stays 1 here.
        assert_eq!(convert::<f32, bf16>(1.0 + 1.0 / 256.0 + 1.0 / 512.0), bf16::ONE);
        assert_eq!(Element::add(bf16::ONE, bf16::from_f32(1.0 / 256.0)), bf16::ONE);
        assert_eq!(convert::<f32, bf16>(-2.9), bf16::from_bits(0xc039));
    }
}
