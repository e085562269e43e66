//! Types of values (scalars and static-shape tiles) and of global tensor params.

use crate::dtype::Dtype;
use crate::expr::{Expr, ExprKind};
use crate::span::Span;
use std::fmt;

/// An element type as written: a known dtype, or the name of a dtype-valued constant
/// (`DTYPE`) that specialization replaces.
#[derive(Clone, Debug, PartialEq)]
pub enum ElemType {
    Known(Dtype),
    Named(String, Span),
}

impl ElemType {
    /// The dtype if known (always after specialization).
    pub fn known(&self) -> Option<Dtype> {
        match self {
            ElemType::Known(d) => Some(*d),
            ElemType::Named(..) => None,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElemType::Known(d) => write!(f, "{d}"),
            ElemType::Named(n, _) => f.write_str(n),
        }
    }
}

/// The type of an SSA value: a scalar, or a tile with a static shape (rank ≥ 1).
/// Before specialization tile dims may be constant expressions (`BLOCK_M`).
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    Scalar(ElemType),
    Tile(Vec<Expr>, ElemType),
}

impl Type {
    /// A scalar of a known dtype.
    pub fn scalar(d: Dtype) -> Type {
        Type::Scalar(ElemType::Known(d))
    }

    /// A tile of a known dtype and literal shape.
    pub fn tile(shape: &[usize], d: Dtype) -> Type {
        Type::Tile(
            shape.iter().map(|&n| Expr::int(n as i64)).collect(),
            ElemType::Known(d),
        )
    }

    /// The element type.
    pub fn elem(&self) -> &ElemType {
        match self {
            Type::Scalar(e) | Type::Tile(_, e) => e,
        }
    }

    /// The known dtype, if any.
    pub fn dtype(&self) -> Option<Dtype> {
        self.elem().known()
    }

    /// The shape with every dim a literal; `Some(vec![])` for scalars, `None` while symbolic.
    pub fn shape(&self) -> Option<Vec<usize>> {
        match self {
            Type::Scalar(_) => Some(vec![]),
            Type::Tile(dims, _) => dims
                .iter()
                .map(|d| d.as_int().and_then(|v| usize::try_from(v).ok()))
                .collect(),
        }
    }

    /// True if the type is a scalar.
    pub fn is_scalar(&self) -> bool {
        matches!(self, Type::Scalar(_))
    }

    /// True when the dtype and every dim are known.
    pub fn is_concrete(&self) -> bool {
        self.dtype().is_some() && self.shape().is_some()
    }
}

/// Writes a dim list separated by `x`, compact when every dim is a literal.
fn write_dims(dims: &[Expr], elem: &ElemType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let compact = dims.iter().all(|d| d.as_int().is_some_and(|v| v >= 0));
    for d in dims {
        match &d.kind {
            ExprKind::Int(v) if *v >= 0 => write!(f, "{v}")?,
            ExprKind::Ident(s) => f.write_str(s)?,
            _ => write!(f, "({d})")?,
        }
        f.write_str(if compact { "x" } else { " x " })?;
    }
    write!(f, "{elem}")
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Scalar(e) => write!(f, "{e}"),
            Type::Tile(dims, e) => {
                f.write_str("tile<")?;
                write_dims(dims, e, f)?;
                f.write_str(">")
            }
        }
    }
}

/// The type of a global tensor param: dtype, dims (identifiers bind from the argument's
/// shape; other expressions are checked against it) and optional element strides
/// (default: C-contiguous).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorType {
    pub elem: ElemType,
    pub dims: Vec<Expr>,
    pub strides: Option<Vec<Expr>>,
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tensor<{}>[", self.elem)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")?;
        if let Some(st) = &self.strides {
            f.write_str(" strides [")?;
            for (i, d) in st.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{d}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}
