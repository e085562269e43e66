//! Integer/symbolic expressions used by constants, tile shapes, grids, tensor dims and requirements.
//!
//! An expression may name specialization constants (folded by specialization) and tensor dims
//! (known only when a program runs). Evaluation is total: every failure is an [`EvalError`].

use crate::span::Span;
use std::fmt;

/// A binary operator of the expression language (C precedence, integer semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Floor division (rounds toward −∞); division by zero is an error.
    Div,
    /// Remainder with the sign of the divisor (pairs with floor division).
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    /// The operator's token.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// Binding power; higher binds tighter.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne => 3,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
            BinOp::Add | BinOp::Sub => 5,
            BinOp::Mul | BinOp::Div | BinOp::Rem => 6,
        }
    }
}

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

/// A built-in function of the expression language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    /// `cdiv(a, b)`: ceiling division of non-negative `a` by positive `b`.
    Cdiv,
    /// `min(a, b)`.
    Min,
    /// `max(a, b)`.
    Max,
    /// `select(c, a, b)`: `a` if `c` else `b`.
    Select,
}

impl Func {
    /// The function's name in text.
    pub fn name(self) -> &'static str {
        match self {
            Func::Cdiv => "cdiv",
            Func::Min => "min",
            Func::Max => "max",
            Func::Select => "select",
        }
    }

    /// Looks a function up by name.
    pub fn from_name(s: &str) -> Option<Func> {
        [Func::Cdiv, Func::Min, Func::Max, Func::Select]
            .into_iter()
            .find(|f| f.name() == s)
    }

    /// Number of arguments the function takes.
    pub fn arity(self) -> usize {
        match self {
            Func::Cdiv | Func::Min | Func::Max => 2,
            Func::Select => 3,
        }
    }
}

/// An f64 literal compared by bit pattern, so NaN literals round-trip and compare equal.
#[derive(Clone, Copy, Debug)]
pub struct F64Bits(pub f64);

impl PartialEq for F64Bits {
    fn eq(&self, o: &F64Bits) -> bool {
        self.0.to_bits() == o.0.to_bits()
    }
}

/// The shape of an expression node.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// Integer literal.
    Int(i64),
    /// Float literal (`1.5`, `inf`, `nan`); only meaningful as an op literal.
    Float(F64Bits),
    /// A constant, a tensor dim, or an enum variant / dtype name (resolved by context).
    Ident(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
}

/// An expression with its source span.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// The value of an evaluated expression.
#[derive(Clone, Debug, PartialEq)]
pub enum EvalVal {
    Int(i64),
    Float(f64),
    Bool(bool),
    /// An enum variant or dtype name.
    Sym(String),
}

impl fmt::Display for EvalVal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalVal::Int(i) => write!(f, "{i}"),
            EvalVal::Float(x) => write!(f, "{}", fmt_float(*x)),
            EvalVal::Bool(b) => write!(f, "{}", *b as i32),
            EvalVal::Sym(s) => f.write_str(s),
        }
    }
}

/// Why an expression could not be evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("unknown name `{0}`")]
    Unknown(String, Span),
    #[error("{0}")]
    Type(String, Span),
    #[error("division by zero")]
    DivZero(Span),
    #[error("integer overflow")]
    Overflow(Span),
}

impl EvalError {
    /// Where the failure happened.
    pub fn span(&self) -> Span {
        match self {
            EvalError::Unknown(_, s) | EvalError::Type(_, s) => *s,
            EvalError::DivZero(s) | EvalError::Overflow(s) => *s,
        }
    }
}

/// Formats a float literal canonically: shortest round-trip digits, always with a `.` or exponent,
/// and `inf` / `nan` by name.
pub fn fmt_float(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else {
        let s = format!("{x:?}");
        if s.contains('.') || s.contains('e') || s.contains("inf") {
            s
        } else {
            format!("{s}.0")
        }
    }
}

impl Expr {
    /// An integer literal with no source span.
    pub fn int(v: i64) -> Expr {
        Expr {
            kind: ExprKind::Int(v),
            span: Span::default(),
        }
    }

    /// An identifier with no source span.
    pub fn ident(s: &str) -> Expr {
        Expr {
            kind: ExprKind::Ident(s.to_string()),
            span: Span::default(),
        }
    }

    /// The literal integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self.kind {
            ExprKind::Int(v) => Some(v),
            _ => None,
        }
    }

    /// Calls `f` on every identifier in the expression.
    pub fn for_each_ident(&self, f: &mut dyn FnMut(&str, Span)) {
        match &self.kind {
            ExprKind::Int(_) | ExprKind::Float(_) => {}
            ExprKind::Ident(s) => f(s, self.span),
            ExprKind::Unary(_, a) => a.for_each_ident(f),
            ExprKind::Binary(_, a, b) => {
                a.for_each_ident(f);
                b.for_each_ident(f);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| a.for_each_ident(f)),
        }
    }

    /// Evaluates with `lookup` resolving identifiers. `lookup` returns `None` for a name it
    /// does not know; such a name evaluates to `Sym(name)` if `syms_ok`, else it is an error.
    pub fn eval(
        &self,
        lookup: &dyn Fn(&str) -> Option<EvalVal>,
        syms_ok: bool,
    ) -> Result<EvalVal, EvalError> {
        let sp = self.span;
        let as_i = |v: EvalVal| -> Result<i64, EvalError> {
            match v {
                EvalVal::Int(i) => Ok(i),
                EvalVal::Bool(b) => Ok(b as i64),
                other => Err(EvalError::Type(
                    format!("expected an integer, found `{other}`"),
                    sp,
                )),
            }
        };
        let as_b = |v: EvalVal| -> Result<bool, EvalError> {
            match v {
                EvalVal::Bool(b) => Ok(b),
                EvalVal::Int(i) => Ok(i != 0),
                other => Err(EvalError::Type(
                    format!("expected a condition, found `{other}`"),
                    sp,
                )),
            }
        };
        Ok(match &self.kind {
            ExprKind::Int(i) => EvalVal::Int(*i),
            ExprKind::Float(x) => EvalVal::Float(x.0),
            ExprKind::Ident(s) => match lookup(s) {
                Some(v) => v,
                None if syms_ok => EvalVal::Sym(s.clone()),
                None => return Err(EvalError::Unknown(s.clone(), sp)),
            },
            ExprKind::Unary(UnOp::Neg, a) => match a.eval(lookup, syms_ok)? {
                EvalVal::Float(x) => EvalVal::Float(-x),
                v => EvalVal::Int(as_i(v)?.checked_neg().ok_or(EvalError::Overflow(sp))?),
            },
            ExprKind::Unary(UnOp::Not, a) => EvalVal::Bool(!as_b(a.eval(lookup, syms_ok)?)?),
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (a.eval(lookup, syms_ok)?, b.eval(lookup, syms_ok)?);
                eval_binary(*op, x, y, sp)?
            }
            ExprKind::Call(f, args) => {
                if args.len() != f.arity() {
                    return Err(EvalError::Type(
                        format!(
                            "`{}` takes {} arguments, found {}",
                            f.name(),
                            f.arity(),
                            args.len()
                        ),
                        sp,
                    ));
                }
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(a.eval(lookup, syms_ok)?);
                }
                match f {
                    Func::Select => {
                        let c = as_b(vals[0].clone())?;
                        vals.swap_remove(if c { 1 } else { 2 })
                    }
                    Func::Cdiv => {
                        let (x, y) = (as_i(vals[0].clone())?, as_i(vals[1].clone())?);
                        if y == 0 {
                            return Err(EvalError::DivZero(sp));
                        }
                        // Checked: `cdiv(i64::MIN, -1)` overflows like `i64::MIN / -1`.
                        let q = x.checked_div_euclid(y).ok_or(EvalError::Overflow(sp))?;
                        let up = x.checked_rem_euclid(y).ok_or(EvalError::Overflow(sp))? != 0;
                        EvalVal::Int(q.checked_add(up as i64).ok_or(EvalError::Overflow(sp))?)
                    }
                    Func::Min | Func::Max => {
                        let (x, y) = (as_i(vals[0].clone())?, as_i(vals[1].clone())?);
                        EvalVal::Int(if *f == Func::Min { x.min(y) } else { x.max(y) })
                    }
                }
            }
        })
    }

    /// Evaluates to an integer, or fails.
    pub fn eval_int(&self, lookup: &dyn Fn(&str) -> Option<EvalVal>) -> Result<i64, EvalError> {
        match self.eval(lookup, false)? {
            EvalVal::Int(i) => Ok(i),
            EvalVal::Bool(b) => Ok(b as i64),
            v => Err(EvalError::Type(
                format!("expected an integer, found `{v}`"),
                self.span,
            )),
        }
    }

    /// Replaces every identifier for which `subst` returns a value by that value as a literal,
    /// then folds constant subexpressions. Identifiers left unresolved stay symbolic.
    pub fn substitute(&self, subst: &dyn Fn(&str) -> Option<EvalVal>) -> Result<Expr, EvalError> {
        let sp = self.span;
        let lit = |v: EvalVal| -> Expr {
            let kind = match v {
                EvalVal::Int(i) => ExprKind::Int(i),
                EvalVal::Bool(b) => ExprKind::Int(b as i64),
                EvalVal::Float(x) => ExprKind::Float(F64Bits(x)),
                EvalVal::Sym(s) => ExprKind::Ident(s),
            };
            Expr { kind, span: sp }
        };
        let e = match &self.kind {
            ExprKind::Int(_) | ExprKind::Float(_) => return Ok(self.clone()),
            ExprKind::Ident(s) => return Ok(subst(s).map(lit).unwrap_or_else(|| self.clone())),
            ExprKind::Unary(op, a) => Expr {
                kind: ExprKind::Unary(*op, Box::new(a.substitute(subst)?)),
                span: sp,
            },
            ExprKind::Binary(op, a, b) => Expr {
                kind: ExprKind::Binary(
                    *op,
                    Box::new(a.substitute(subst)?),
                    Box::new(b.substitute(subst)?),
                ),
                span: sp,
            },
            ExprKind::Call(f, args) => Expr {
                kind: ExprKind::Call(
                    *f,
                    args.iter()
                        .map(|a| a.substitute(subst))
                        .collect::<Result<_, _>>()?,
                ),
                span: sp,
            },
        };
        // A constant side that decides `&&`, `||` or `select` folds the expression even when the
        // rest still names dims: with MASK = 0, `MASK == 0 || P == 1` is true for every P.
        if let Some(folded) = e.short_circuit() {
            return Ok(folded);
        }
        // Fold when nothing symbolic is left.
        let mut closed = true;
        e.for_each_ident(&mut |_, _| closed = false);
        if closed {
            Ok(lit(e.eval(&|_| None, false)?))
        } else {
            Ok(e)
        }
    }
}

impl Expr {
    /// The folded form of `&&`, `||` or `select` whose literal operand decides it: `0 && x` is 0,
    /// `1 || x` is 1, `select(1, a, b)` is `a`; a neutral literal next to a condition leaves the
    /// condition (`0 || P == 1` is `P == 1`). `None` when nothing folds.
    fn short_circuit(&self) -> Option<Expr> {
        match &self.kind {
            ExprKind::Binary(op @ (BinOp::And | BinOp::Or), a, b) => {
                for (lit, other) in [(a, b), (b, a)] {
                    let Some(v) = lit.as_int() else {
                        continue;
                    };
                    if (v != 0) == (*op == BinOp::Or) {
                        return Some(Expr {
                            kind: ExprKind::Int((v != 0) as i64),
                            span: self.span,
                        });
                    }
                    if other.is_condition() {
                        return Some((**other).clone());
                    }
                }
                None
            }
            ExprKind::Call(Func::Select, args) if args.len() == 3 => args[0]
                .as_int()
                .map(|c| if c != 0 { &args[1] } else { &args[2] }.clone()),
            _ => None,
        }
    }

    /// Whether the expression's value is a condition (a comparison or logical operator).
    fn is_condition(&self) -> bool {
        matches!(
            self.kind,
            ExprKind::Unary(UnOp::Not, _)
                | ExprKind::Binary(
                    BinOp::Eq
                        | BinOp::Ne
                        | BinOp::Lt
                        | BinOp::Le
                        | BinOp::Gt
                        | BinOp::Ge
                        | BinOp::And
                        | BinOp::Or,
                    ..
                )
        )
    }
}

/// Floor division; `None` on overflow. `b` must be non-zero.
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

fn eval_binary(op: BinOp, x: EvalVal, y: EvalVal, sp: Span) -> Result<EvalVal, EvalError> {
    use EvalVal::*;
    if let (Sym(a), Sym(b)) = (&x, &y) {
        return match op {
            BinOp::Eq => Ok(Bool(a == b)),
            BinOp::Ne => Ok(Bool(a != b)),
            _ => Err(EvalError::Type(
                format!("`{}` does not apply to names", op.symbol()),
                sp,
            )),
        };
    }
    if matches!(x, Sym(_)) || matches!(y, Sym(_)) {
        return Err(EvalError::Type(
            format!("cannot compare `{x}` with `{y}`"),
            sp,
        ));
    }
    if matches!(x, Float(_)) || matches!(y, Float(_)) {
        // Comparisons of a float scalar param (`requires [scale > 0.0]`) are the one float use:
        // in f64, where NaN compares false (so `x > 0.0` fails for NaN). No float arithmetic.
        // (Names were handled above; an integer or a condition compares as its value.)
        let to_f = |v: &EvalVal| match v {
            Int(i) => *i as f64,
            Float(f) => *f,
            Bool(b) => *b as i64 as f64,
            Sym(_) => f64::NAN,
        };
        let (a, b) = (to_f(&x), to_f(&y));
        return match op {
            BinOp::Eq => Ok(Bool(a == b)),
            BinOp::Ne => Ok(Bool(a != b)),
            BinOp::Lt => Ok(Bool(a < b)),
            BinOp::Le => Ok(Bool(a <= b)),
            BinOp::Gt => Ok(Bool(a > b)),
            BinOp::Ge => Ok(Bool(a >= b)),
            _ => Err(EvalError::Type(
                "float arithmetic is not allowed in expressions (only comparisons)".into(),
                sp,
            )),
        };
    }
    let to_i = |v: &EvalVal| match v {
        Int(i) => *i,
        Bool(b) => *b as i64,
        Float(_) | Sym(_) => 0,
    };
    let (a, b) = (to_i(&x), to_i(&y));
    let ovf = EvalError::Overflow(sp);
    Ok(match op {
        BinOp::Add => Int(a.checked_add(b).ok_or(ovf)?),
        BinOp::Sub => Int(a.checked_sub(b).ok_or(ovf)?),
        BinOp::Mul => Int(a.checked_mul(b).ok_or(ovf)?),
        BinOp::Div | BinOp::Rem if b == 0 => return Err(EvalError::DivZero(sp)),
        BinOp::Div => Int(floor_div(a, b).ok_or(ovf)?),
        BinOp::Rem => Int(a - b * floor_div(a, b).ok_or(ovf)?),
        BinOp::Eq => Bool(a == b),
        BinOp::Ne => Bool(a != b),
        BinOp::Lt => Bool(a < b),
        BinOp::Le => Bool(a <= b),
        BinOp::Gt => Bool(a > b),
        BinOp::Ge => Bool(a >= b),
        BinOp::And => Bool(a != 0 && b != 0),
        BinOp::Or => Bool(a != 0 || b != 0),
    })
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(self, 0, f)
    }
}

fn write_expr(e: &Expr, min_prec: u8, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match &e.kind {
        ExprKind::Int(i) if *i < 0 && min_prec > 0 => write!(f, "({i})"),
        ExprKind::Int(i) => write!(f, "{i}"),
        ExprKind::Float(x) if x.0.is_sign_negative() && !x.0.is_nan() && min_prec > 0 => {
            write!(f, "({})", fmt_float(x.0))
        }
        ExprKind::Float(x) => f.write_str(&fmt_float(x.0)),
        ExprKind::Ident(s) => f.write_str(s),
        ExprKind::Unary(op, a) => {
            f.write_str(if *op == UnOp::Neg { "-" } else { "!" })?;
            write_expr(a, 7, f)
        }
        ExprKind::Binary(op, a, b) => {
            let p = op.precedence();
            if p < min_prec {
                f.write_str("(")?;
            }
            write_expr(a, p, f)?;
            write!(f, " {} ", op.symbol())?;
            write_expr(b, p + 1, f)?;
            if p < min_prec {
                f.write_str(")")?;
            }
            Ok(())
        }
        ExprKind::Call(func, args) => {
            write!(f, "{}(", func.name())?;
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_expr(a, 0, f)?;
            }
            f.write_str(")")
        }
    }
}

#[cfg(test)]
#[path = "expr_tests.rs"]
mod tests;
