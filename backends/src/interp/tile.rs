//! Runtime values of the interpreter: scalars and row-major tiles, and the exact rounding rules
//! that keep every stored value representable in its dtype.
//!
//! Floats (f32, f16, bf16) are held as `f32`, ints (i32, i64, u8) as `i64` wrapped to the width,
//! and i1 as `bool`. A scalar is a tile of shape `[]` holding one element.

use kir_ir::Dtype;

/// The elements of a tile, by storage class. The variant always matches the tile's dtype:
/// `F` for f32/f16/bf16, `I` for i32/i64/u8, `B` for i1.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    F(Vec<f32>),
    I(Vec<i64>),
    B(Vec<bool>),
}

impl Data {
    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
            Data::B(v) => v.len(),
        }
    }

    /// The elements at `idx`, in order (indices must be in range; callers build them from the shape).
    pub(crate) fn gather(&self, idx: &[usize]) -> Data {
        match self {
            Data::F(v) => Data::F(idx.iter().map(|&i| v[i]).collect()),
            Data::I(v) => Data::I(idx.iter().map(|&i| v[i]).collect()),
            Data::B(v) => Data::B(idx.iter().map(|&i| v[i]).collect()),
        }
    }

    /// One element.
    pub(crate) fn get(&self, i: usize) -> Option<Scalar> {
        match self {
            Data::F(v) => v.get(i).map(|&x| Scalar::F(x)),
            Data::I(v) => v.get(i).map(|&x| Scalar::I(x)),
            Data::B(v) => v.get(i).map(|&x| Scalar::B(x)),
        }
    }
}

/// One element value, by storage class (see [`Data`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scalar {
    F(f32),
    I(i64),
    B(bool),
}

impl Scalar {
    /// The value as f64 (exact for floats, i1 and ints of magnitude ≤ 2^53).
    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Scalar::F(x) => x as f64,
            Scalar::I(x) => x as f64,
            Scalar::B(b) => b as i64 as f64,
        }
    }
}

/// The storage class of a dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Float,
    Int,
    Bool,
}

/// The storage class of `d`.
pub(crate) fn class(d: Dtype) -> Class {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => Class::Float,
        Dtype::I32 | Dtype::I64 | Dtype::U8 => Class::Int,
        Dtype::I1 => Class::Bool,
    }
}

/// Rounds an f32 to the nearest value of float dtype `d` (ties to even). Identity for f32 and for
/// non-float dtypes.
pub(crate) fn round_f32(d: Dtype, x: f32) -> f32 {
    match d {
        Dtype::F16 => half::f16::from_f32(x).to_f32(),
        Dtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => x,
    }
}

/// Rounds an f64 to float dtype `d` with one correct round-to-nearest-even.
///
/// `half`'s `from_f64` is not used: it drops the low 32 mantissa bits before rounding (and with
/// F16C goes through f32), so it can round a value just above a tie the wrong way. Here the f64
/// is first rounded to f32 *to odd* (truncate, then set the last bit if inexact), which is exact
/// enough (24 ≥ 11 + 2 bits) for the second, nearest-even rounding to be correct.
pub(crate) fn round_f64(d: Dtype, x: f64) -> f32 {
    if d == Dtype::F32 {
        return x as f32;
    }
    round_f32(d, f64_to_f32_odd(x))
}

/// f64 → f32 rounding to odd.
fn f64_to_f32_odd(x: f64) -> f32 {
    let t = x as f32;
    if x.is_nan() || t as f64 == x {
        return t;
    }
    // Truncate toward zero: step t one ulp toward zero if rounding went away from zero.
    let mut bits = t.to_bits();
    if t.is_infinite() || (t as f64).abs() > x.abs() {
        bits -= 1; // magnitude one ulp smaller (inf → f32::MAX)
    }
    f32::from_bits(bits | 1)
}

/// Wraps an integer to the width of int dtype `d` (i32 sign-extends, u8 zero-extends).
/// Identity for i64 and non-int dtypes.
pub(crate) fn wrap_int(d: Dtype, x: i64) -> i64 {
    match d {
        Dtype::I32 => x as i32 as i64,
        Dtype::U8 => x as u8 as i64,
        Dtype::I64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::I1 => x,
    }
}

/// Bit width of an int dtype (for shift checks).
pub(crate) fn int_bits(d: Dtype) -> i64 {
    match d {
        Dtype::U8 | Dtype::I1 => 8,
        Dtype::I32 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 => 32,
        Dtype::I64 => 64,
    }
}

/// The poison value that fills freshly allocated `out` tensors and temps: NaN for floats,
/// -0x5A5A5A5A for i32/i64, 0xA5 for u8 and true for i1.
pub(crate) fn poison(d: Dtype) -> Scalar {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => Scalar::F(f32::NAN),
        Dtype::I32 | Dtype::I64 => Scalar::I(-0x5A5A_5A5A),
        Dtype::U8 => Scalar::I(0xA5),
        Dtype::I1 => Scalar::B(true),
    }
}

/// Converts an f64 (a host value or a scalar argument) to dtype `d`: floats round to nearest
/// even (a finite value that rounds to infinity is an error, an infinity stays one); ints and
/// i1 must be integral and in range, else the error says why.
pub(crate) fn scalar_from_f64(d: Dtype, x: f64) -> Result<Scalar, String> {
    let (lo, hi) = match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => {
            return finite_float(d, x.is_finite(), || format!("{x:e}"), round_f64(d, x))
        }
        Dtype::I32 => (i32::MIN as f64, i32::MAX as f64),
        Dtype::I64 => (i64::MIN as f64, i64::MAX as f64),
        Dtype::U8 => (0.0, 255.0),
        Dtype::I1 => (0.0, 1.0),
    };
    if x.fract() != 0.0 || !x.is_finite() {
        return Err(format!("{x} is not an integer (for {d})"));
    }
    // i64::MAX is not representable in f64: 2^63 itself is out of range.
    if x < lo || x > hi || (d == Dtype::I64 && x >= (1u64 << 63) as f64) {
        return Err(format!("{x} is not in the range of {d}"));
    }
    Ok(if d == Dtype::I1 {
        Scalar::B(x != 0.0)
    } else {
        Scalar::I(x as i64)
    })
}

/// Converts a host integer (an i64 tensor element or an exact scalar argument) to dtype `d`
/// without passing through f64: integer dtypes take it when it fits, i1 takes 0 or 1, and
/// floats round to nearest even once (from the integer, through f64 rounded to odd).
pub(crate) fn scalar_from_int(d: Dtype, x: i64) -> Result<Scalar, String> {
    match class(d) {
        Class::Float => finite_float(d, true, || x.to_string(), round_f64(d, i64_to_f64_odd(x))),
        Class::Int if wrap_int(d, x) == x => Ok(Scalar::I(x)),
        Class::Bool if x == 0 || x == 1 => Ok(Scalar::B(x == 1)),
        Class::Int | Class::Bool => Err(format!("{x} is not in the range of {d}")),
    }
}

/// `rounded`, a host value (`shown`) rounded to float dtype `d`, unless a finite one rounded to
/// an infinity (`1e39` for f32, `70000` for f16): an error naming the value and the largest
/// finite value of `d`. An infinity or NaN given as such stays one.
fn finite_float(
    d: Dtype,
    finite: bool,
    shown: impl FnOnce() -> String,
    rounded: f32,
) -> Result<Scalar, String> {
    if rounded.is_infinite() && finite {
        let x = shown();
        let max = match d {
            Dtype::F16 => 65504.0,
            Dtype::Bf16 => f32::from_bits(0x7f7f_0000),
            _ => f32::MAX,
        };
        return Err(format!(
            "{x} is out of range for {d} (it would round to infinity; the largest finite {d} is {max:e}; give `inf` for infinity)"
        ));
    }
    Ok(Scalar::F(rounded))
}

/// i64 → f64 rounding to odd: exact up to 2^53; beyond, the low bits are truncated and the
/// last kept bit is set if any dropped bit was, so one later nearest-even rounding to 24 bits
/// or fewer is correct.
fn i64_to_f64_odd(x: i64) -> f64 {
    let m = x.unsigned_abs();
    let bits = 64 - m.leading_zeros();
    let v = if bits <= 53 {
        m as f64
    } else {
        let shift = bits - 53;
        let sticky = (m & ((1u64 << shift) - 1) != 0) as u64;
        ((m >> shift) | sticky) as f64 * 2f64.powi(shift as i32)
    };
    if x < 0 {
        -v
    } else {
        v
    }
}

/// Converts an integer literal to dtype `d`: floats round (via f32, as every op producing
/// f16/bf16 computes in f32), ints must fit, i1 takes 0 or 1.
pub(crate) fn scalar_from_i64(d: Dtype, x: i64) -> Result<Scalar, String> {
    match class(d) {
        Class::Float => Ok(Scalar::F(round_f32(d, x as f32))),
        Class::Int if wrap_int(d, x) == x => Ok(Scalar::I(x)),
        Class::Bool if x == 0 || x == 1 => Ok(Scalar::B(x == 1)),
        Class::Int | Class::Bool => Err(format!("{x} is not in the range of {d}")),
    }
}

/// A runtime tile (or a scalar: shape `[]`). Invariants: `data.len()` is the product of `shape`,
/// the data variant matches `dtype`'s class, and every element is exactly representable in
/// `dtype` (rounded floats, wrapped ints).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tile {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Tile {
    /// A scalar holding `s` (which must already be valid for `dtype`).
    pub(crate) fn scalar(dtype: Dtype, s: Scalar) -> Tile {
        Tile::filled(dtype, vec![], s)
    }

    /// A tile of `shape` with every element `s`. If `s` does not match the class of `dtype`
    /// it is converted (floats round, ints wrap, i1 is `!= 0`).
    pub(crate) fn filled(dtype: Dtype, shape: Vec<usize>, s: Scalar) -> Tile {
        let n: usize = shape.iter().product();
        let s = convert(s, dtype);
        let data = match s {
            Scalar::F(x) => Data::F(vec![x; n]),
            Scalar::I(x) => Data::I(vec![x; n]),
            Scalar::B(x) => Data::B(vec![x; n]),
        };
        Tile { dtype, shape, data }
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// True for shape `[]`.
    pub(crate) fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    /// The single element of a scalar (or of a one-element tile).
    pub(crate) fn only(&self) -> Option<Scalar> {
        if self.len() == 1 {
            self.data.get(0)
        } else {
            None
        }
    }

    /// The value of an integer scalar (i32/i64/u8).
    pub(crate) fn int_scalar(&self) -> Option<i64> {
        match (self.is_scalar(), self.only()) {
            (true, Some(Scalar::I(x))) => Some(x),
            _ => None,
        }
    }

    /// The value of an i1 scalar.
    pub(crate) fn bool_scalar(&self) -> Option<bool> {
        match (self.is_scalar(), self.only()) {
            (true, Some(Scalar::B(x))) => Some(x),
            _ => None,
        }
    }

    /// `dtype` written as a type (`f32` or `tile<4x8xf32>`), for messages.
    pub(crate) fn type_name(&self) -> String {
        type_name(self.dtype, &self.shape)
    }
}

/// A dtype and shape written as a type (`f32` or `tile<4x8xf32>`), for messages.
pub(crate) fn type_name(d: Dtype, shape: &[usize]) -> String {
    if shape.is_empty() {
        d.to_string()
    } else {
        let dims: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
        format!("tile<{}x{d}>", dims.join("x"))
    }
}

/// Converts one element to dtype `to` with the `cast` rules: float→float rounds to nearest
/// even; float→int truncates toward zero, saturating, NaN → 0; int→float rounds to nearest even
/// (exact through f64 for |x| ≤ 2^53); int→int wraps; i1 → 0/1; anything → i1 is `x != 0`.
pub(crate) fn convert(s: Scalar, to: Dtype) -> Scalar {
    match (s, class(to)) {
        (Scalar::F(x), Class::Float) => Scalar::F(round_f32(to, x)),
        (Scalar::F(x), Class::Int) => Scalar::I(match to {
            Dtype::I32 => x as i32 as i64,
            Dtype::U8 => x as u8 as i64,
            Dtype::I64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::I1 => x as i64,
        }),
        (Scalar::F(x), Class::Bool) => Scalar::B(x != 0.0),
        (Scalar::I(x), Class::Float) => Scalar::F(round_f64(to, x as f64)),
        (Scalar::I(x), Class::Int) => Scalar::I(wrap_int(to, x)),
        (Scalar::I(x), Class::Bool) => Scalar::B(x != 0),
        (Scalar::B(b), Class::Float) => Scalar::F(b as i32 as f32),
        (Scalar::B(b), Class::Int) => Scalar::I(b as i64),
        (Scalar::B(b), Class::Bool) => Scalar::B(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_rounding_is_single() {
        // 1 + 2^-8 + 2^-40: just above the bf16 tie between 1 and 1 + 2^-7, so it rounds up.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(round_f64(Dtype::Bf16, x), 1.0 + 2f32.powi(-7));
        // The exact tie rounds to even (down).
        assert_eq!(round_f64(Dtype::Bf16, 1.0 + 2f64.powi(-8)), 1.0);
        // f16: 1 + 2^-11 + 2^-40 rounds up to 1 + 2^-10.
        assert_eq!(
            round_f64(Dtype::F16, 1.0 + 2f64.powi(-11) + 2f64.powi(-40)),
            1.0 + 2f32.powi(-10)
        );
        assert_eq!(round_f64(Dtype::F16, -(1.0 + 2f64.powi(-11))), -1.0);
        assert_eq!(round_f64(Dtype::F16, 1e6), f32::INFINITY);
        assert_eq!(round_f64(Dtype::Bf16, 1e300), f32::INFINITY);
        assert!(round_f64(Dtype::Bf16, f64::NAN).is_nan());
        assert_eq!(round_f64(Dtype::F32, 0.1), 0.1f32);
    }

    #[test]
    fn host_int_conversion_checks_range() {
        assert_eq!(scalar_from_f64(Dtype::U8, 255.0), Ok(Scalar::I(255)));
        assert!(scalar_from_f64(Dtype::U8, 256.0).is_err());
        assert!(scalar_from_f64(Dtype::I32, 1.5).is_err());
        assert!(scalar_from_f64(Dtype::I64, (1u64 << 63) as f64).is_err());
        assert_eq!(scalar_from_f64(Dtype::I1, 1.0), Ok(Scalar::B(true)));
        assert!(scalar_from_f64(Dtype::I1, 2.0).is_err());
    }

    #[test]
    fn cast_rules() {
        assert_eq!(convert(Scalar::F(f32::NAN), Dtype::I32), Scalar::I(0));
        assert_eq!(
            convert(Scalar::F(-1e20), Dtype::I32),
            Scalar::I(i32::MIN as i64)
        );
        assert_eq!(convert(Scalar::F(-2.7), Dtype::I32), Scalar::I(-2));
        assert_eq!(convert(Scalar::F(300.0), Dtype::U8), Scalar::I(255));
        assert_eq!(convert(Scalar::I(300), Dtype::U8), Scalar::I(44));
        assert_eq!(convert(Scalar::F(f32::NAN), Dtype::I1), Scalar::B(true));
        assert_eq!(convert(Scalar::B(true), Dtype::Bf16), Scalar::F(1.0));
    }
}
