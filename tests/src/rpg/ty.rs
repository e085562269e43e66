//! Types and values as the generator sees them: a scalar or a static-shape tile of one dtype, a
//! named SSA value with a few facts the generator keeps about it (what it may be used for), and
//! the text of literals and types exactly as the kir parser reads them.

use kir_ir::Dtype;

/// The type of a generated value: a scalar or a tile (rank ≥ 1, every dim ≥ 1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A scalar of this dtype.
    Scalar(Dtype),
    /// A tile of this shape and dtype.
    Tile(Vec<usize>, Dtype),
}

impl Ty {
    /// A tile type.
    pub fn tile(shape: &[usize], d: Dtype) -> Ty {
        Ty::Tile(shape.to_vec(), d)
    }

    /// The element type.
    pub fn dt(&self) -> Dtype {
        match self {
            Ty::Scalar(d) | Ty::Tile(_, d) => *d,
        }
    }

    /// The shape (empty for a scalar).
    pub fn shape(&self) -> &[usize] {
        match self {
            Ty::Scalar(_) => &[],
            Ty::Tile(s, _) => s,
        }
    }

    /// True for a scalar.
    pub fn is_scalar(&self) -> bool {
        matches!(self, Ty::Scalar(_))
    }

    /// The same shape with another dtype.
    pub fn with_dt(&self, d: Dtype) -> Ty {
        match self {
            Ty::Scalar(_) => Ty::Scalar(d),
            Ty::Tile(s, _) => Ty::Tile(s.clone(), d),
        }
    }

    /// Elements in a value of this type.
    pub fn count(&self) -> usize {
        self.shape().iter().product()
    }

    /// The type as written in kir text (`f32`, `tile<4x8xbf16>`).
    pub fn text(&self) -> String {
        match self {
            Ty::Scalar(d) => d.name().to_string(),
            Ty::Tile(s, d) => {
                let dims: Vec<String> = s.iter().map(|x| x.to_string()).collect();
                format!("tile<{}x{}>", dims.join("x"), d.name())
            }
        }
    }
}

/// What the generator knows about a value beyond its type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// An i32 scalar known to be ≥ 0 and small (a program id, a tile offset, a loop variable):
    /// usable as a tensor offset that stays near the tensor.
    pub index: bool,
    /// Computed from constants only (the e-graph may fold it to a literal).
    pub constant: bool,
}

/// A named SSA value in scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Val {
    /// The name without `%`.
    pub name: String,
    /// Its type.
    pub ty: Ty,
    /// Facts the generator keeps.
    pub facts: Facts,
}

impl Val {
    /// `%name`.
    pub fn r(&self) -> String {
        format!("%{}", self.name)
    }
}

/// A float literal as kir reads it (`1.5`, `-2.0`, `1.0e30`, `inf`, `-inf`, `nan`).
pub fn float_lit(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x == x.trunc() && x.abs() < 1e15 {
        format!("{x:.1}")
    } else {
        let s = format!("{x:e}");
        // `{:e}` writes `1e30` or `1.5e-3`; the lexer needs a digit after a dot only.
        match s.split_once('e') {
            Some((m, e)) if !m.contains('.') => format!("{m}.0e{e}"),
            _ => s,
        }
    }
}

/// A literal of dtype `d` for value `x` (integers are written as integers, i1 as 0/1).
pub fn lit(d: Dtype, x: f64) -> String {
    if d.is_float() {
        float_lit(x)
    } else {
        format!("{}", x as i64)
    }
}

/// Bits of an integer dtype (i1 counts as 1).
pub fn int_bits(d: Dtype) -> u32 {
    match d {
        Dtype::I64 => 64,
        Dtype::I32 => 32,
        Dtype::U8 => 8,
        _ => 1,
    }
}
