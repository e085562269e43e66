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
    /// A shared-memory stage buffer (scheduled IR): dims are the stage count, then the shape of
    /// one stage (`smem<2 x 64x128xbf16>` prints as `smem<2x64x128xbf16>`).
    Smem(Vec<Expr>, ElemType),
    /// An array of mbarriers, one per stage (scheduled IR): `mbar<2>`.
    Mbar(Expr),
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

    /// The element type (`i64` for an mbarrier array, whose elements are 8-byte barriers).
    pub fn elem(&self) -> &ElemType {
        const MBAR: ElemType = ElemType::Known(Dtype::I64);
        match self {
            Type::Scalar(e) | Type::Tile(_, e) | Type::Smem(_, e) => e,
            Type::Mbar(_) => &MBAR,
        }
    }

    /// The known dtype, if any.
    pub fn dtype(&self) -> Option<Dtype> {
        self.elem().known()
    }

    /// The shape with every dim a literal; `Some(vec![])` for scalars, `None` while symbolic.
    /// For a stage buffer it is `[stages, stage dims...]`, for an mbarrier array `[stages]`.
    pub fn shape(&self) -> Option<Vec<usize>> {
        let lit = |d: &Expr| d.as_int().and_then(|v| usize::try_from(v).ok());
        match self {
            Type::Scalar(_) => Some(vec![]),
            Type::Tile(dims, _) | Type::Smem(dims, _) => dims.iter().map(lit).collect(),
            Type::Mbar(n) => lit(n).map(|n| vec![n]),
        }
    }

    /// True for the scheduled-IR resource types (`smem<...>`, `mbar<...>`), which only the
    /// scheduling ops produce and consume.
    pub fn is_resource(&self) -> bool {
        matches!(self, Type::Smem(..) | Type::Mbar(_))
    }

    /// For a stage buffer: the stage count and the type of one stage as a tile.
    pub fn stage(&self) -> Option<(&Expr, Type)> {
        match self {
            Type::Smem(dims, e) if dims.len() >= 2 => {
                Some((&dims[0], Type::Tile(dims[1..].to_vec(), e.clone())))
            }
            _ => None,
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
            Type::Smem(dims, e) => {
                f.write_str("smem<")?;
                write_dims(dims, e, f)?;
                f.write_str(">")
            }
            Type::Mbar(n) => match &n.kind {
                ExprKind::Int(v) if *v >= 0 => write!(f, "mbar<{v}>"),
                ExprKind::Ident(s) => write!(f, "mbar<{s}>"),
                _ => write!(f, "mbar<({n})>"),
            },
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
