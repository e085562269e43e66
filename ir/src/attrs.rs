//! Attributes of ops (the keyword arguments of the op table, ops.rs): how each kind is written
//! ([`AttrKind`]) and the stored value ([`Attr`]), with the two keyword enums they name: the
//! predicate of `cmp` ([`CmpPred`]) and the kind of `reduce` ([`ReduceKind`]). The op table
//! re-exports them, so `kir_ir::ops::Attr` and `kir_ir::Attr` are these.

use crate::entities::Value;
use crate::expr::Expr;
use crate::span::Span;

/// How an attribute is written and stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// A constant expression (`0`, `BLOCK_M`, `-inf`).
    Expr,
    /// A bare name (`sum`, `lt`, a dim or scalar-param name).
    Name,
    /// An SSA value (`mask %m`).
    Value,
    /// A bracketed list of constant expressions (`perm [1, 0]`).
    List,
    /// A keyword with no value (`guard`).
    Flag,
    /// A comparison predicate written as its name (`lt`).
    Cmp,
    /// A reduction kind written as its name (`sum`).
    Reduce,
    /// A double-quoted string of printable ASCII (`"acc"`), with `\"` and `\\` escapes.
    Str,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Expr(Expr),
    /// A bare name; also a `cmp` predicate or `reduce` kind that is not one of the known ones,
    /// kept (with its span) for the verifier to report.
    Name(String, Span),
    Value(Value),
    List(Vec<Expr>),
    Flag,
    /// The predicate of `cmp`.
    Cmp(CmpPred),
    /// The kind of `reduce`.
    Reduce(ReduceKind),
    /// A string (the prefix of `print`), unescaped.
    Str(String),
}

/// Declares a keyword enum with its text names, `ALL`, `name()` and `from_name()`.
macro_rules! named_enum {
    ($(#[$m:meta])* $ty:ident { $( $(#[$vm:meta])* $v:ident = $n:literal, )* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $ty { $( $(#[$vm])* $v, )* }

        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[ $( $ty::$v, )* ];

            /// The name written in text.
            pub fn name(self) -> &'static str {
                match self { $( $ty::$v => $n, )* }
            }

            /// Looks a value up by its text name.
            pub fn from_name(s: &str) -> Option<$ty> {
                match s { $( $n => Some($ty::$v), )* _ => None }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum! {
    /// The predicate of `cmp` (`cmp lt %x, %y`). Float comparisons are false when a NaN is
    /// involved, except `ne`, which is true.
    CmpPred {
        Eq = "eq",
        Ne = "ne",
        Lt = "lt",
        Le = "le",
        Gt = "gt",
        Ge = "ge",
    }
}

named_enum! {
    /// The kind of `reduce` (`reduce sum %x axis 1`).
    ReduceKind {
        Sum = "sum",
        Max = "max",
        Min = "min",
    }
}

impl CmpPred {
    /// Whether `a PRED b` holds (for floats, `PartialOrd` gives the IR's NaN rule).
    pub fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpPred::Eq => a == b,
            CmpPred::Ne => a != b,
            CmpPred::Lt => a < b,
            CmpPred::Le => a <= b,
            CmpPred::Gt => a > b,
            CmpPred::Ge => a >= b,
        }
    }
}
