//! C expressions for one element of the compute ops: literals, poison, unary and binary math,
//! comparisons, casts and the conversions between registers and global memory. Each mirrors the
//! interpreter's rule for the op (docs/ir.md); float results narrower than f32 are rounded to
//! nearest even right where the interpreter rounds them.

use kir_ir::{BinaryOp, CmpPred, Dtype, EvalVal, UnaryOp};

/// An f32 constant as a C literal that parses back to exactly `x`.
pub(crate) fn f32_literal(x: f32) -> String {
    if x.is_nan() {
        "KIR_NAN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "KIR_INF" } else { "(-KIR_INF)" }.into()
    } else {
        let s = format!("{x:?}");
        if x.is_sign_negative() {
            format!("({s}f)")
        } else {
            format!("{s}f")
        }
    }
}

/// Rounds an f32 to a float dtype the way the interpreter stores it.
fn round_host(d: Dtype, x: f32) -> f32 {
    match d {
        Dtype::F16 => half::f16::from_f32(x).to_f32(),
        Dtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => x,
    }
}

/// An integer constant of dtype `d` as a C literal.
fn int_literal(d: Dtype, i: i64) -> Result<String, String> {
    let fits = match d {
        Dtype::I32 => i32::try_from(i).is_ok(),
        Dtype::U8 => u8::try_from(i).is_ok(),
        Dtype::I1 => i == 0 || i == 1,
        Dtype::I64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 => true,
    };
    if !fits {
        return Err(format!("{i} is not in the range of {d}"));
    }
    Ok(match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => f32_literal(round_host(d, i as f32)),
        Dtype::I32 if i == i32::MIN as i64 => "(-2147483647 - 1)".into(),
        Dtype::I32 if i < 0 => format!("({i})"),
        Dtype::I32 => i.to_string(),
        Dtype::I64 if i == i64::MIN => "(-9223372036854775807LL - 1)".into(),
        Dtype::I64 if i < 0 => format!("({i}LL)"),
        Dtype::I64 => format!("{i}LL"),
        Dtype::U8 => format!("(unsigned char){i}"),
        Dtype::I1 => (if i == 1 { "true" } else { "false" }).into(),
    })
}

/// A literal (`const`, `other`) converted to dtype `d` with the interpreter's rules: floats go
/// through f32 and round to the dtype; integers must fit; i1 takes 0 or 1.
pub(crate) fn literal(d: Dtype, v: &EvalVal) -> Result<String, String> {
    match v {
        EvalVal::Int(i) => int_literal(d, *i),
        EvalVal::Bool(b) => int_literal(d, *b as i64),
        EvalVal::Float(x) if d.is_float() => Ok(f32_literal(round_host(d, *x as f32))),
        EvalVal::Float(x) if x.fract() == 0.0 && x.abs() < 9.2e18 => int_literal(d, *x as i64),
        v => Err(format!("`{v}` cannot be a {d} literal")),
    }
}

/// The value a masked-off load without `other` reads (the interpreter's poison).
pub(crate) fn poison(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => "KIR_NAN",
        Dtype::I32 => "(-0x5A5A5A5A)",
        Dtype::I64 => "(-0x5A5A5A5ALL)",
        Dtype::U8 => "(unsigned char)0xA5",
        Dtype::I1 => "true",
    }
}

/// `x` (an f32 expression) rounded to float dtype `d`.
pub(crate) fn round_to(d: Dtype, x: String) -> String {
    match d {
        Dtype::F16 => format!("kir_round_f16({x})"),
        Dtype::Bf16 => format!("kir_round_bf16({x})"),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => x,
    }
}

/// The value of an element of global memory of dtype `d` in its register type.
pub(crate) fn from_storage(d: Dtype, x: String) -> String {
    match d {
        Dtype::Bf16 => format!("kir_bf16_to_f32({x})"),
        Dtype::F16 => format!("kir_f16_to_f32({x})"),
        Dtype::I1 => format!("({x} != 0)"),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 => x,
    }
}

/// A register value of dtype `d` in its global-memory encoding.
pub(crate) fn to_storage(d: Dtype, x: String) -> String {
    match d {
        Dtype::Bf16 => format!("kir_f32_to_bf16({x})"),
        Dtype::F16 => format!("kir_f32_to_f16({x})"),
        Dtype::I1 => format!("(unsigned char)({x} ? 1 : 0)"),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 => x,
    }
}

/// An element coordinate (an `int`) as a value of dtype `d` (for `iota`).
pub(crate) fn from_index(d: Dtype, c: &str) -> Result<String, String> {
    Ok(match d {
        Dtype::I32 => c.to_string(),
        Dtype::I64 => format!("(long long){c}"),
        Dtype::U8 => format!("(unsigned char){c}"),
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => round_to(d, format!("(float){c}")),
        Dtype::I1 => return Err("iota cannot make an i1 tile".into()),
    })
}

fn bad(name: &str, d: Dtype) -> Result<String, String> {
    Err(format!("`{name}` does not apply to {d}"))
}

/// One element of an elementwise unary op on dtype `d`.
pub(crate) fn unary(op: UnaryOp, d: Dtype, x: &str) -> Result<String, String> {
    if d.is_float() {
        let f = match op {
            UnaryOp::Neg => format!("(-{x})"),
            UnaryOp::Abs => format!("fabsf({x})"),
            UnaryOp::Exp => format!("expf({x})"),
            UnaryOp::Exp2 => format!("exp2f({x})"),
            UnaryOp::Log => format!("logf({x})"),
            UnaryOp::Log2 => format!("log2f({x})"),
            UnaryOp::Sqrt => format!("__fsqrt_rn({x})"),
            UnaryOp::Rsqrt => format!("kir_rsqrt({x})"),
            UnaryOp::Tanh => format!("tanhf({x})"),
            UnaryOp::Sigmoid => format!("kir_sigmoid({x})"),
            UnaryOp::Silu => format!("kir_silu({x})"),
            UnaryOp::Recip => format!("__fdiv_rn(1.0f, {x})"),
            UnaryOp::Floor => format!("floorf({x})"),
            UnaryOp::Erf => format!("erff({x})"),
            UnaryOp::Not => return bad(op.name(), d),
        };
        return Ok(round_to(d, f));
    }
    match (op, d) {
        (UnaryOp::Not, Dtype::I1) => Ok(format!("(!{x})")),
        (UnaryOp::Not, _) if d.is_int() => Ok(format!("(({})~{x})", super::ctype(d))),
        (UnaryOp::Neg, _) if d.is_int() => Ok(format!("kir_neg({x})")),
        (UnaryOp::Abs, _) if d.is_int() => Ok(format!("kir_abs({x})")),
        _ => bad(op.name(), d),
    }
}

/// One element of an elementwise binary op on dtype `d`.
pub(crate) fn binary(op: BinaryOp, d: Dtype, a: &str, b: &str) -> Result<String, String> {
    if d.is_float() {
        let f = match op {
            BinaryOp::Add => "__fadd_rn",
            BinaryOp::Sub => "__fsub_rn",
            BinaryOp::Mul => "__fmul_rn",
            BinaryOp::Div => "__fdiv_rn",
            BinaryOp::Max => "kir_fmax",
            BinaryOp::Min => "kir_fmin",
            BinaryOp::Pow => "powf",
            BinaryOp::Rem
            | BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
            | BinaryOp::Shl
            | BinaryOp::Shr => return bad(op.name(), d),
        };
        return Ok(round_to(d, format!("{f}({a}, {b})")));
    }
    if d == Dtype::I1 {
        return match op {
            BinaryOp::And => Ok(format!("({a} && {b})")),
            BinaryOp::Or => Ok(format!("({a} || {b})")),
            BinaryOp::Xor => Ok(format!("({a} != {b})")),
            _ => bad(op.name(), d),
        };
    }
    let t = super::ctype(d);
    Ok(match op {
        BinaryOp::Add => format!("kir_add({a}, {b})"),
        BinaryOp::Sub => format!("kir_sub({a}, {b})"),
        BinaryOp::Mul => format!("kir_mul({a}, {b})"),
        BinaryOp::Div => format!("kir_div({a}, {b})"),
        BinaryOp::Rem => format!("kir_rem({a}, {b})"),
        BinaryOp::Max => format!("kir_max({a}, {b})"),
        BinaryOp::Min => format!("kir_min({a}, {b})"),
        BinaryOp::And => format!("({t})({a} & {b})"),
        BinaryOp::Or => format!("({t})({a} | {b})"),
        BinaryOp::Xor => format!("({t})({a} ^ {b})"),
        BinaryOp::Shl => format!("kir_shl({a}, {b})"),
        BinaryOp::Shr => format!("kir_shr({a}, {b})"),
        BinaryOp::Pow => return bad(op.name(), d),
    })
}

/// A comparison `eq|ne|lt|le|gt|ge` (C comparisons are false on NaN except `!=`, as the IR's);
/// `None` is a predicate the parser did not know (the verifier reports it).
pub(crate) fn cmp(pred: Option<CmpPred>, a: &str, b: &str) -> Result<String, String> {
    let sym = match pred {
        Some(CmpPred::Eq) => "==",
        Some(CmpPred::Ne) => "!=",
        Some(CmpPred::Lt) => "<",
        Some(CmpPred::Le) => "<=",
        Some(CmpPred::Gt) => ">",
        Some(CmpPred::Ge) => ">=",
        None => return Err("`cmp` needs a predicate (eq, ne, lt, le, gt or ge)".into()),
    };
    Ok(format!("({a} {sym} {b})"))
}

/// `cast` from `from` to `to`: float→float rounds to nearest even; float→int truncates toward
/// zero, saturating, NaN → 0; int→float rounds to nearest even; int→int wraps; i1 → 0/1;
/// anything → i1 is `x != 0`.
pub(crate) fn cast(from: Dtype, to: Dtype, x: &str) -> String {
    if from == to {
        return x.to_string();
    }
    match (from, to) {
        (_, Dtype::I1) if from.is_float() => format!("({x} != 0.0f)"),
        (_, Dtype::I1) => format!("({x} != 0)"),
        (Dtype::I1, _) if to.is_float() => format!("({x} ? 1.0f : 0.0f)"),
        (Dtype::I1, _) => format!("({})({x} ? 1 : 0)", super::ctype(to)),
        _ if from.is_float() && to.is_float() => round_to(to, x.to_string()),
        (_, Dtype::I32) if from.is_float() => format!("kir_f32_to_i32({x})"),
        (_, Dtype::I64) if from.is_float() => format!("kir_f32_to_i64({x})"),
        (_, Dtype::U8) if from.is_float() => format!("kir_f32_to_u8({x})"),
        (Dtype::I64, Dtype::F32) => format!("(float)(double){x}"),
        (_, Dtype::F32) => format!("(float){x}"),
        (_, Dtype::F16 | Dtype::Bf16) => round_to(to, format!("kir_f64_to_f32_odd((double){x})")),
        (Dtype::I64, Dtype::I32) => format!("kir_to_i32({x})"),
        _ => format!("({}){x}", super::ctype(to)),
    }
}

/// Same-width bit reinterpretation: f32↔i32 (and a dtype to itself); 16-bit float pairs are
/// refused with a clear error (the parity backend keeps 16-bit floats widened to f32).
pub fn bitcast(from: Dtype, to: Dtype, a: &str) -> Result<String, String> {
    match (from, to) {
        (f, t) if f == t => Ok(a.to_string()),
        (Dtype::F32, Dtype::I32) => Ok(format!("__float_as_int({a})")),
        (Dtype::I32, Dtype::F32) => Ok(format!("__int_as_float({a})")),
        (f, t) => Err(format!(
            "bitcast from {f} to {t} is not supported by the CUDA-C backend"
        )),
    }
}
