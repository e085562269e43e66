//! The error bound the generated-program checker compares outputs under ([`Bound`]: a
//! relative error and whether a zero's sign may differ) and whose deviations a bound describes
//! ([`Model`]). A leaf: the bound analysis (`bounds.rs`, `bounds_walk.rs`, `bounds_ops.rs`) and
//! the comparison (`compare.rs`) all read it.

/// One f32 unit in the last place, relative (2⁻²³).
pub const ULP: f64 = 1.1920928955078125e-7;

/// An error bound on a value or an output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// Relative error bound: 0 exact, `f64::INFINITY` unbounded.
    pub rel: f64,
    /// May differ in the sign of a zero.
    pub zero_sign: bool,
}

impl Bound {
    /// Bit-identical.
    pub const EXACT: Bound = Bound {
        rel: 0.0,
        zero_sign: false,
    };
    /// No bound.
    pub const UNBOUNDED: Bound = Bound {
        rel: f64::INFINITY,
        zero_sign: false,
    };

    /// The larger of two bounds.
    pub fn join(self, o: Bound) -> Bound {
        Bound {
            rel: self.rel.max(o.rel),
            zero_sign: self.zero_sign || o.zero_sign,
        }
    }

    /// True when nothing may differ (the sign of a zero included).
    pub fn is_exact(self) -> bool {
        self.rel == 0.0 && !self.zero_sign
    }

    /// True when there is no usable bound.
    pub fn is_unbounded(self) -> bool {
        self.rel.is_infinite()
    }

    /// A relative bound (not exact, not unbounded unless `rel` is infinite).
    pub(super) fn rel(rel: f64) -> Bound {
        Bound {
            rel,
            zero_sign: false,
        }
    }
}

/// Whose deviations from the interpreter a bound describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// The `egraph` pass; `sites: false` means its exact rules only.
    Egraph {
        /// Whether the inexact rules run.
        sites: bool,
    },
    /// The GPU running the backends' code (PTX or CUDA C) against the interpreter running the
    /// same module: see `gpu_bounds` in bounds.rs, which builds on this module.
    Gpu,
}
