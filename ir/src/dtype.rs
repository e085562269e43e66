//! Element types of scalars, tiles and tensors.

use std::fmt;

/// A storage or compute element type. Floats narrower than f32 are stored exactly
/// (values are representable) and every op producing them rounds to nearest even.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    Bf16,
    /// 32-bit two's complement integer.
    I32,
    /// 64-bit two's complement integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean (masks and comparison results).
    I1,
}

impl Dtype {
    /// Every dtype, in declaration order.
    pub const ALL: [Dtype; 7] = [
        Dtype::F32,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
        Dtype::I1,
    ];

    /// The keyword used in text (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I32 => "i32",
            Dtype::I64 => "i64",
            Dtype::U8 => "u8",
            Dtype::I1 => "i1",
        }
    }

    /// Parses a dtype keyword; `None` for anything else.
    pub fn from_name(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == s)
    }

    /// True for f32, f16 and bf16.
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::Bf16)
    }

    /// True for i32, i64 and u8 (not i1).
    pub fn is_int(self) -> bool {
        matches!(self, Dtype::I32 | Dtype::I64 | Dtype::U8)
    }

    /// For a float dtype, the smallest magnitude that rounds to infinity under round to nearest
    /// even: the largest finite value plus half an ulp (f32 2^128 − 2^103, f16 65520, bf16
    /// 2^128 − 2^119). Every smaller magnitude rounds to a finite value. `None` for integer
    /// dtypes.
    pub fn overflow_bound(self) -> Option<f64> {
        let p2 = |e: i32| 2f64.powi(e);
        match self {
            Dtype::F32 => Some(p2(128) - p2(103)),
            Dtype::F16 => Some(65520.0),
            Dtype::Bf16 => Some(p2(128) - p2(119)),
            Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => None,
        }
    }

    /// Size of one element in global memory, in bytes (i1 is stored as one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I64 => 8,
            Dtype::U8 | Dtype::I1 => 1,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
