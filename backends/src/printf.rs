//! The text of the `print` op, shared by every backend (docs/ir.md, "print"): one line per
//! element, `(x, y, z) LABEL[i, j]: V` (no brackets for a scalar), where LABEL is the prefix,
//! followed by `#k` when the op prints several values. The interpreter writes the lines itself
//! ([`fmt_g9`] formats floats exactly as C's `%.9g`); CUDA C and PTX call `printf`/`vprintf`
//! with the format string of [`line_format`], so all three print the same text for a value.

use kir_ir::Dtype;

/// How a value is passed to `printf` after the program id and indices (all `int`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrintArg {
    /// A float widened to `double` (`%.9g`).
    F64,
    /// An `int` (`%d`): i32, u8 and i1 (0 or 1).
    I32,
    /// A `long long` (`%lld`).
    I64,
}

/// How an element of dtype `d` is passed.
pub(crate) fn print_arg(d: Dtype) -> PrintArg {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => PrintArg::F64,
        Dtype::I64 => PrintArg::I64,
        Dtype::I32 | Dtype::U8 | Dtype::I1 => PrintArg::I32,
    }
}

/// The label of value `k` of the `n` values a `print` with `prefix` prints.
pub(crate) fn label(prefix: &str, k: usize, n: usize) -> String {
    if n == 1 {
        prefix.to_string()
    } else {
        format!("{prefix}#{k}")
    }
}

/// The `printf` format of one line: the program id, `rank` indices and a value passed as `arg`
/// (`None`: a `print` without values, whose one line is the label). The label's `%` signs are
/// doubled; the caller escapes the result for its source language.
pub(crate) fn line_format(label: &str, rank: usize, arg: Option<PrintArg>) -> String {
    let mut f = format!("(%d, %d, %d) {}", label.replace('%', "%%"));
    if rank > 0 {
        f += &format!("[{}]", vec!["%d"; rank].join(", "));
    }
    match arg {
        Some(PrintArg::F64) => f += ": %.9g",
        Some(PrintArg::I32) => f += ": %d",
        Some(PrintArg::I64) => f += ": %lld",
        None => {}
    }
    f.push('\n');
    f
}

/// The text C's `printf("%.9g", x)` writes for `x` (with `nan` for every NaN: C libraries
/// differ in the sign they show).
pub(crate) fn fmt_g9(x: f64) -> String {
    const P: i32 = 9;
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // The exponent after rounding to P significant digits decides the style (C11 7.21.6.1).
    let sci = format!("{:.*e}", (P - 1) as usize, x);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..P).contains(&exp) {
        let fixed = format!("{:.*}", (P - 1 - exp) as usize, x);
        trim_zeros(&fixed).to_string()
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mant), exp.abs())
    }
}

/// Drops the trailing zeros of a fraction, and its point when nothing follows it.
fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected strings are what C's `printf("%.9g", x)` writes.
    #[test]
    fn g9_matches_c() {
        for (x, want) in [
            (1.0, "1"),
            (0.1f32 as f64, "0.100000001"),
            (0.3f32 as f64, "0.300000012"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (100.0, "100"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.00012345678901, "0.000123456789"),
            (123456789.0, "123456789"),
            (1234567890.0, "1.23456789e+09"),
            (2.5e10f32 as f64, "2.49999995e+10"),
            (3.4028234663852886e38, "3.40282347e+38"),
            (1.401298464324817e-45, "1.40129846e-45"),
            (999999999.5, "1e+09"),
            (-0.0, "-0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(fmt_g9(x), want, "{x:e}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(
            line_format("acc", 2, Some(PrintArg::F64)),
            "(%d, %d, %d) acc[%d, %d]: %.9g\n"
        );
        assert_eq!(
            line_format("100%", 0, Some(PrintArg::I64)),
            "(%d, %d, %d) 100%%: %lld\n"
        );
        assert_eq!(line_format("here", 0, None), "(%d, %d, %d) here\n");
        assert_eq!(label("x", 1, 2), "x#1");
        assert_eq!(label("x", 0, 1), "x");
        assert_eq!(print_arg(Dtype::Bf16), PrintArg::F64);
        assert_eq!(print_arg(Dtype::I1), PrintArg::I32);
    }
}
