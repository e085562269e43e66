//! Elementwise kernels on runtime tiles: unary and binary math, cmp, select, fma, cast, bitcast
//! and nf4 (the dispatcher's arms that call them are in `elem_ops.rs`).
//!
//! Every function is total: a dtype or shape that does not fit, a division by zero or a bad
//! shift is an `Err(message)` that the dispatcher wraps with the op's span and program id.
//! Float results are computed in f32 and rounded to the result dtype (nearest even); `erf` and
//! `pow` are computed in f64 (`erf.rs`; the C library's `pow`) and rounded once to f32, so
//! they are correctly rounded but for rare halfway cases, and `fma` rounds once in f32.

use super::tile::{convert, int_bits, round_f32, type_name, wrap_int, Data, Scalar, Tile};
use kir_ir::{Dtype, NF4_TABLE};

// The op table's unary and binary ops and `cmp` predicates; `unary` and `binary` below match
// them exhaustively, so a new table row lands here.
pub(crate) use kir_ir::{BinaryOp as Bin, CmpPred as Pred, UnaryOp as Un};

/// max with NaN propagation; +0 is greater than -0.
pub(crate) fn fmax(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else if a > b {
        a
    } else {
        b
    }
}

/// min with NaN propagation; -0 is less than +0.
pub(crate) fn fmin(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else if a < b {
        a
    } else {
        b
    }
}

/// Applies `f` elementwise to two slices, broadcasting a one-element side (a scalar).
fn zip<T: Copy, R>(
    a: &[T],
    b: &[T],
    mut f: impl FnMut(T, T) -> Result<R, String>,
) -> Result<Vec<R>, String> {
    if a.len() == b.len() {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    } else if a.len() == 1 {
        b.iter().map(|&y| f(a[0], y)).collect()
    } else {
        a.iter().map(|&x| f(x, b[0])).collect()
    }
}

/// The result shape of an elementwise op on `a` and `b`: equal shapes, or one side a scalar.
fn common_shape(a: &Tile, b: &Tile) -> Result<Vec<usize>, String> {
    if a.shape == b.shape || b.is_scalar() {
        Ok(a.shape.clone())
    } else if a.is_scalar() {
        Ok(b.shape.clone())
    } else {
        Err(format!(
            "operand shapes differ: `{}` and `{}`",
            a.type_name(),
            b.type_name()
        ))
    }
}

/// An elementwise unary op. Float ops need a float operand; neg/abs also take ints (wrapping);
/// not is logical on i1 and bitwise on ints.
pub(crate) fn unary(op: Un, t: &Tile) -> Result<Tile, String> {
    let d = t.dtype;
    let bad = || Err(format!("`{op:?}` does not apply to `{}`", t.type_name()).to_lowercase());
    let data = match &t.data {
        Data::F(v) => {
            let f: fn(f32) -> f32 = match op {
                Un::Neg => |x| -x,
                Un::Abs => f32::abs,
                Un::Exp => f32::exp,
                Un::Exp2 => f32::exp2,
                Un::Log => f32::ln,
                Un::Log2 => f32::log2,
                Un::Sqrt => f32::sqrt,
                Un::Rsqrt => |x| 1.0 / x.sqrt(),
                Un::Tanh => f32::tanh,
                Un::Sigmoid => |x| 1.0 / (1.0 + (-x).exp()),
                Un::Silu => |x| x * (1.0 / (1.0 + (-x).exp())),
                Un::Recip => |x| 1.0 / x,
                Un::Floor => f32::floor,
                Un::Erf => |x| super::erf::erf(x as f64) as f32,
                Un::Not => return bad(),
            };
            Data::F(v.iter().map(|&x| round_f32(d, f(x))).collect())
        }
        Data::I(v) => {
            let f: fn(i64) -> i64 = match op {
                Un::Neg => i64::wrapping_neg,
                Un::Abs => i64::wrapping_abs,
                Un::Not => |x| !x,
                Un::Exp
                | Un::Exp2
                | Un::Log
                | Un::Log2
                | Un::Sqrt
                | Un::Rsqrt
                | Un::Tanh
                | Un::Sigmoid
                | Un::Silu
                | Un::Recip
                | Un::Floor
                | Un::Erf => return bad(),
            };
            Data::I(v.iter().map(|&x| wrap_int(d, f(x))).collect())
        }
        Data::B(v) => match op {
            Un::Not => Data::B(v.iter().map(|&x| !x).collect()),
            Un::Neg
            | Un::Abs
            | Un::Exp
            | Un::Exp2
            | Un::Log
            | Un::Log2
            | Un::Sqrt
            | Un::Rsqrt
            | Un::Tanh
            | Un::Sigmoid
            | Un::Silu
            | Un::Recip
            | Un::Floor
            | Un::Erf => return bad(),
        },
    };
    Ok(Tile {
        dtype: d,
        shape: t.shape.clone(),
        data,
    })
}

/// An elementwise binary op on operands of one dtype (a scalar broadcasts over a tile).
pub(crate) fn binary(op: Bin, a: &Tile, b: &Tile) -> Result<Tile, String> {
    if a.dtype != b.dtype {
        return Err(format!(
            "operand types differ: `{}` and `{}`",
            a.type_name(),
            b.type_name()
        ));
    }
    let d = a.dtype;
    let shape = common_shape(a, b)?;
    let bad = || {
        format!(
            "`{}` does not apply to `{}`",
            format!("{op:?}").to_lowercase(),
            a.type_name()
        )
    };
    let data = match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => {
            let f: fn(f32, f32) -> f32 = match op {
                Bin::Add => |a, b| a + b,
                Bin::Sub => |a, b| a - b,
                Bin::Mul => |a, b| a * b,
                Bin::Div => |a, b| a / b,
                Bin::Max => fmax,
                Bin::Min => fmin,
                Bin::Pow => |a, b| (a as f64).powf(b as f64) as f32,
                Bin::Rem | Bin::And | Bin::Or | Bin::Xor | Bin::Shl | Bin::Shr => return Err(bad()),
            };
            Data::F(zip(x, y, |a, b| Ok(round_f32(d, f(a, b))))?)
        }
        (Data::I(x), Data::I(y)) => {
            let bits = int_bits(d);
            let shift_ok = |s: i64| {
                if (0..bits).contains(&s) {
                    Ok(s as u32)
                } else {
                    Err(format!("shift amount {s} is outside [0, {bits}) for {d}"))
                }
            };
            Data::I(zip(x, y, |a, b| {
                let r = match op {
                    Bin::Add => a.wrapping_add(b),
                    Bin::Sub => a.wrapping_sub(b),
                    Bin::Mul => a.wrapping_mul(b),
                    Bin::Div | Bin::Rem if b == 0 => return Err("integer division by zero".into()),
                    Bin::Div => a.wrapping_div(b),
                    Bin::Rem => a.wrapping_rem(b),
                    Bin::Max => a.max(b),
                    Bin::Min => a.min(b),
                    Bin::And => a & b,
                    Bin::Or => a | b,
                    Bin::Xor => a ^ b,
                    Bin::Shl => a.wrapping_shl(shift_ok(b)?),
                    Bin::Shr => a >> shift_ok(b)?,
                    Bin::Pow => return Err(bad()),
                };
                Ok(wrap_int(d, r))
            })?)
        }
        (Data::B(x), Data::B(y)) => {
            let f: fn(bool, bool) -> bool = match op {
                Bin::And => |a, b| a & b,
                Bin::Or => |a, b| a | b,
                Bin::Xor => |a, b| a ^ b,
                Bin::Add
                | Bin::Sub
                | Bin::Mul
                | Bin::Div
                | Bin::Rem
                | Bin::Max
                | Bin::Min
                | Bin::Shl
                | Bin::Shr
                | Bin::Pow => return Err(bad()),
            };
            Data::B(zip(x, y, |a, b| Ok(f(a, b)))?)
        }
        _ => return Err("internal error: tile data does not match its dtype".into()),
    };
    Ok(Tile {
        dtype: d,
        shape,
        data,
    })
}

/// Elementwise comparison giving i1; any comparison with NaN is false except `ne`.
pub(crate) fn cmp(p: Pred, a: &Tile, b: &Tile) -> Result<Tile, String> {
    if a.dtype != b.dtype {
        return Err(format!(
            "operand types differ: `{}` and `{}`",
            a.type_name(),
            b.type_name()
        ));
    }
    let shape = common_shape(a, b)?;
    let data = match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => zip(x, y, |a, b| Ok(p.test(a, b)))?,
        (Data::I(x), Data::I(y)) => zip(x, y, |a, b| Ok(p.test(a, b)))?,
        (Data::B(x), Data::B(y)) => zip(x, y, |a, b| Ok(p.test(a, b)))?,
        _ => return Err("internal error: tile data does not match its dtype".into()),
    };
    Ok(Tile {
        dtype: Dtype::I1,
        shape,
        data: Data::B(data),
    })
}

/// `c ? x : y` elementwise; `c` is i1, each operand a scalar or a tile of the common shape.
pub(crate) fn select(c: &Tile, x: &Tile, y: &Tile) -> Result<Tile, String> {
    if c.dtype != Dtype::I1 {
        return Err(format!(
            "the condition must be i1, found `{}`",
            c.type_name()
        ));
    }
    if x.dtype != y.dtype {
        return Err(format!(
            "operand types differ: `{}` and `{}`",
            x.type_name(),
            y.type_name()
        ));
    }
    let shape = common_shape(x, y)?;
    if !c.is_scalar() && c.shape != shape && !shape.is_empty() {
        return Err(format!(
            "condition `{}` does not match operands `{}`",
            c.type_name(),
            x.type_name()
        ));
    }
    let shape = if shape.is_empty() {
        c.shape.clone()
    } else {
        shape
    };
    let n: usize = shape.iter().product();
    let pick = |t: &Tile, i: usize| if t.len() == 1 { 0 } else { i };
    let Data::B(cv) = &c.data else {
        return Err("internal error: i1 tile without bool data".into());
    };
    let idx: Vec<(bool, usize)> = (0..n).map(|i| (cv[pick(c, i)], i)).collect();
    let data = match (&x.data, &y.data) {
        (Data::F(a), Data::F(b)) => Data::F(
            idx.iter()
                .map(|&(k, i)| if k { a[pick(x, i)] } else { b[pick(y, i)] })
                .collect(),
        ),
        (Data::I(a), Data::I(b)) => Data::I(
            idx.iter()
                .map(|&(k, i)| if k { a[pick(x, i)] } else { b[pick(y, i)] })
                .collect(),
        ),
        (Data::B(a), Data::B(b)) => Data::B(
            idx.iter()
                .map(|&(k, i)| if k { a[pick(x, i)] } else { b[pick(y, i)] })
                .collect(),
        ),
        _ => return Err("internal error: tile data does not match its dtype".into()),
    };
    Ok(Tile {
        dtype: x.dtype,
        shape,
        data,
    })
}

/// `a·b + c` elementwise with one rounding in f32 (then to the dtype); the operands share one
/// float dtype, and a scalar broadcasts over the tiles, which share one shape.
pub(crate) fn fma(a: &Tile, b: &Tile, c: &Tile) -> Result<Tile, String> {
    if a.dtype != b.dtype || a.dtype != c.dtype {
        return Err(format!(
            "operand types differ: `{}`, `{}` and `{}`",
            a.type_name(),
            b.type_name(),
            c.type_name()
        ));
    }
    let tiles = [a, b, c].into_iter().filter(|t| !t.is_scalar());
    let shape = tiles.clone().next().map_or(vec![], |t| t.shape.clone());
    if let Some(t) = tiles.clone().find(|t| t.shape != shape) {
        return Err(format!(
            "operand shapes differ: `{}` and `{}`",
            type_name(a.dtype, &shape),
            t.type_name()
        ));
    }
    let (Data::F(x), Data::F(y), Data::F(z)) = (&a.data, &b.data, &c.data) else {
        return Err(format!("`fma` needs floats, found `{}`", a.type_name()));
    };
    let n: usize = shape.iter().product();
    let at = |v: &[f32], i: usize| if v.len() == 1 { v[0] } else { v[i] };
    let d = a.dtype;
    let data = (0..n)
        .map(|i| round_f32(d, at(x, i).mul_add(at(y, i), at(z, i))))
        .collect();
    Ok(Tile {
        dtype: d,
        shape,
        data: Data::F(data),
    })
}

/// Converts every element to `to` (see [`convert`] for the rules).
pub(crate) fn cast(t: &Tile, to: Dtype) -> Tile {
    let n = t.len();
    let mut out = Tile::filled(to, t.shape.clone(), Scalar::I(0));
    match (&t.data, &mut out.data) {
        (Data::F(a), Data::F(b)) => b
            .iter_mut()
            .zip(a)
            .for_each(|(o, &x)| *o = round_f32(to, x)),
        _ => {
            for i in 0..n {
                if let Some(s) = t.data.get(i) {
                    match (convert(s, to), &mut out.data) {
                        (Scalar::F(x), Data::F(b)) => b[i] = x,
                        (Scalar::I(x), Data::I(b)) => b[i] = x,
                        (Scalar::B(x), Data::B(b)) => b[i] = x,
                        _ => {}
                    }
                }
            }
        }
    }
    out
}

/// The raw bits of one element of dtype `d` (`None` for i1, which has no bit pattern).
fn bits_of(d: Dtype, s: Scalar) -> Option<u64> {
    match (d, s) {
        (Dtype::F32, Scalar::F(x)) => Some(x.to_bits() as u64),
        (Dtype::F16, Scalar::F(x)) => Some(half::f16::from_f32(x).to_bits() as u64),
        (Dtype::Bf16, Scalar::F(x)) => Some(half::bf16::from_f32(x).to_bits() as u64),
        (Dtype::I32, Scalar::I(x)) => Some(x as u32 as u64),
        (Dtype::I64, Scalar::I(x)) => Some(x as u64),
        (Dtype::U8, Scalar::I(x)) => Some(x as u8 as u64),
        _ => None,
    }
}

/// The element of dtype `d` whose bit pattern is the low bits of `b` (`None` for i1).
fn from_bits(d: Dtype, b: u64) -> Option<Scalar> {
    match d {
        Dtype::F32 => Some(Scalar::F(f32::from_bits(b as u32))),
        Dtype::F16 => Some(Scalar::F(half::f16::from_bits(b as u16).to_f32())),
        Dtype::Bf16 => Some(Scalar::F(half::bf16::from_bits(b as u16).to_f32())),
        Dtype::I32 => Some(Scalar::I(b as u32 as i32 as i64)),
        Dtype::I64 => Some(Scalar::I(b as i64)),
        Dtype::U8 => Some(Scalar::I(b as u8 as i64)),
        Dtype::I1 => None,
    }
}

/// Reinterprets every element's bits as dtype `to` of the same width (f32↔i32, f16↔bf16, or a
/// dtype to itself); anything else, and i1, is an error.
pub(crate) fn bitcast(t: &Tile, to: Dtype) -> Result<Tile, String> {
    let from = t.dtype;
    if from == Dtype::I1 || to == Dtype::I1 || from.size_bytes() != to.size_bytes() {
        return Err(format!(
            "cannot reinterpret `{}` as {to}: bitcast needs two non-i1 dtypes of one width",
            t.type_name()
        ));
    }
    let mut out = Tile::filled(to, t.shape.clone(), super::tile::poison(to));
    for i in 0..t.len() {
        let s = t
            .data
            .get(i)
            .and_then(|s| bits_of(from, s))
            .and_then(|b| from_bits(to, b))
            .ok_or_else(|| format!("element {i} of `{}` has no {from} bits", t.type_name()))?;
        match (s, &mut out.data) {
            (Scalar::F(x), Data::F(v)) => v[i] = x,
            (Scalar::I(x), Data::I(v)) => v[i] = x,
            (Scalar::B(x), Data::B(v)) => v[i] = x,
            _ => return Err(format!("bitcast to {to}: storage class mismatch")),
        }
    }
    Ok(out)
}

/// NF4 lookup: each u8 code's low 4 bits index [`NF4_TABLE`], giving f32.
pub(crate) fn nf4(t: &Tile) -> Result<Tile, String> {
    match (&t.data, t.dtype) {
        (Data::I(v), Dtype::U8) => Ok(Tile {
            dtype: Dtype::F32,
            shape: t.shape.clone(),
            data: Data::F(v.iter().map(|&c| NF4_TABLE[(c & 15) as usize]).collect()),
        }),
        _ => Err(format!("nf4 needs u8 codes, found `{}`", t.type_name())),
    }
}
