//! Element types, with MXNet's (mshadow's) frozen type codes.

use crate::error::Result;

/// An element type. The discriminants are mshadow's `TypeFlag` codes and are part of the ABI.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `kFloat32`
    Float32 = 0,
    /// `kFloat64`
    Float64 = 1,
    /// `kFloat16`
    Float16 = 2,
    /// `kUint8`
    Uint8 = 3,
    /// `kInt32`
    Int32 = 4,
    /// `kInt8`
    Int8 = 5,
    /// `kInt64`
    Int64 = 6,
    /// `kBool` (one byte per element)
    Bool = 7,
    /// `kBfloat16`
    Bfloat16 = 12,
}

/// Every supported element type.
pub const ALL_DTYPES: [DType; 9] = [
    DType::Float32,
    DType::Float64,
    DType::Float16,
    DType::Uint8,
    DType::Int32,
    DType::Int8,
    DType::Int64,
    DType::Bool,
    DType::Bfloat16,
];

impl DType {
    /// The type with this MXNet code.
    pub fn from_code(code: i32) -> Result<DType> {
        match ALL_DTYPES.iter().find(|d| **d as i32 == code) {
            Some(d) => Ok(*d),
            None => match code {
                8..=11 => crate::bail!(
                    "dtype {code} ({}) is not supported by libkvstore",
                    ["int16", "uint16", "uint32", "uint64"][(code - 8) as usize]
                ),
                _ => crate::bail!("unknown dtype code {code}"),
            },
        }
    }

    /// MXNet's code for this type.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Float64 | DType::Int64 => 8,
            DType::Float32 | DType::Int32 => 4,
            DType::Float16 | DType::Bfloat16 => 2,
            DType::Uint8 | DType::Int8 | DType::Bool => 1,
        }
    }

    /// MXNet's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Float16 => "float16",
            DType::Uint8 => "uint8",
            DType::Int32 => "int32",
            DType::Int8 => "int8",
            DType::Int64 => "int64",
            DType::Bool => "bool",
            DType::Bfloat16 => "bfloat16",
        }
    }

    /// Whether the type holds integers (bool included).
    pub fn is_integer(self) -> bool {
        !matches!(self, DType::Float32 | DType::Float64 | DType::Float16 | DType::Bfloat16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_mshadow_type_flags() {
        let expected = [
            (DType::Float32, 0),
            (DType::Float64, 1),
            (DType::Float16, 2),
            (DType::Uint8, 3),
            (DType::Int32, 4),
            (DType::Int8, 5),
            (DType::Int64, 6),
            (DType::Bool, 7),
            (DType::Bfloat16, 12),
        ];
        for (d, code) in expected {
            assert_eq!(d.code(), code);
            assert_eq!(DType::from_code(code).unwrap(), d);
        }
        assert!(DType::from_code(9).unwrap_err().message().contains("uint16"));
        assert!(DType::from_code(99).is_err());
        assert!(DType::from_code(-1).is_err());
    }
}
