//! Evaluating a kernel's launch grid for the caller's dims: [`KernelEntry::grid`] and
//! [`KernelMeta::grid`] parse each META.json formula with the module grammar's expression
//! parser and evaluate it as the interpreter and the GPU runtime do (`Expr::eval_int`: checked
//! 64-bit arithmetic, `/` and `%` flooring, `cdiv` rounding up), then check each axis against
//! CUDA's limits (x < 2^31, y and z ≤ 65535). [`Dims`] is what a caller may pass the dims as.

use super::error::{Axis, Error};
use super::meta::{KernelEntry, KernelMeta};
use kir_ir::{EvalError, EvalVal};
use std::collections::{BTreeMap, HashMap};

/// The values of a kernel's dims by name (`M = 4096`): a slice, array or `Vec` of
/// `(name, value)` pairs, or a `BTreeMap`/`HashMap` from names to values.
pub trait Dims {
    /// The value of `name`, if given.
    fn dim(&self, name: &str) -> Option<i64>;
    /// The names given, for messages.
    fn names(&self) -> Vec<String>;
}

impl<S: AsRef<str>> Dims for [(S, i64)] {
    fn dim(&self, name: &str) -> Option<i64> {
        // The last pair of a name wins, as with `-D`.
        self.iter()
            .rev()
            .find(|(n, _)| n.as_ref() == name)
            .map(|p| p.1)
    }
    fn names(&self) -> Vec<String> {
        self.iter().map(|(n, _)| n.as_ref().to_string()).collect()
    }
}

impl<S: AsRef<str>, const N: usize> Dims for [(S, i64); N] {
    fn dim(&self, name: &str) -> Option<i64> {
        self.as_slice().dim(name)
    }
    fn names(&self) -> Vec<String> {
        self.as_slice().names()
    }
}

impl<S: AsRef<str>> Dims for Vec<(S, i64)> {
    fn dim(&self, name: &str) -> Option<i64> {
        self.as_slice().dim(name)
    }
    fn names(&self) -> Vec<String> {
        self.as_slice().names()
    }
}

impl<S: AsRef<str> + Ord> Dims for BTreeMap<S, i64> {
    fn dim(&self, name: &str) -> Option<i64> {
        self.iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| *v)
    }
    fn names(&self) -> Vec<String> {
        self.keys().map(|n| n.as_ref().to_string()).collect()
    }
}

impl<S: AsRef<str> + std::hash::Hash + Eq, H: std::hash::BuildHasher> Dims for HashMap<S, i64, H> {
    fn dim(&self, name: &str) -> Option<i64> {
        self.iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| *v)
    }
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.keys().map(|n| n.as_ref().to_string()).collect();
        names.sort();
        names
    }
}

/// CUDA's grid limits per axis (x < 2^31, y and z ≤ 65535), the verifier's and the runtime's.
const MAX_GRID: [i64; 3] = kir_ir::verifier::limits::MAX_GRID;

impl KernelEntry {
    /// The launch grid for `dims`: each axis's formula evaluated over the dims, in
    /// `[0, 2^31 − 1]` for x and `[0, 65535]` for y and z. An axis of 0 means there is nothing
    /// to launch.
    ///
    /// Errors: [`Error::MissingDim`] when a formula names a dim `dims` does not give,
    /// [`Error::GridOverflow`] when the arithmetic overflows 64 bits, [`Error::GridOutOfRange`]
    /// when an axis falls outside CUDA's limits, [`Error::GridExpr`] for a formula that does not
    /// evaluate (a division by zero, or text that is not a formula).
    ///
    /// ```
    /// use kir_compiler::{Error, Kernel, Target};
    ///
    /// let k = Kernel::op("gemm").target(Target::Sm80).cache(false).compile()?;
    /// let gemm = &k.meta().kernels[0];
    /// let grid = gemm.grid(&[("Bt", 1), ("M", 1000), ("N", 300), ("K", 64)])?;
    /// assert!(grid.iter().all(|&g| g >= 1));
    /// // A dim the formulas need and the caller did not give is a typed error.
    /// match gemm.grid(&[("Bt", 1), ("N", 300), ("K", 64)]) {
    ///     Err(Error::MissingDim { dim, .. }) => assert_eq!(dim, "M"),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn grid(&self, dims: &(impl Dims + ?Sized)) -> Result<[u32; 3], Error> {
        let mut out = [0u32; 3];
        let formulas = [&self.grid.x, &self.grid.y, &self.grid.z];
        for (i, (slot, formula)) in out.iter_mut().zip(formulas).enumerate() {
            let axis = Axis::ALL[i];
            let fail = |message: String| Error::GridExpr {
                kernel: self.name.clone(),
                axis,
                expr: formula.clone(),
                message,
            };
            let expr = kir_ir::text::parse_expr(formula).map_err(|d| {
                let first = d.0.first().map(|d| d.message.clone()).unwrap_or_default();
                fail(format!("not a grid formula: {first}"))
            })?;
            let lookup = |n: &str| dims.dim(n).map(EvalVal::Int);
            let value = expr.eval_int(&lookup).map_err(|e| match e {
                EvalError::Unknown(dim, _) => Error::MissingDim {
                    kernel: self.name.clone(),
                    axis,
                    expr: formula.clone(),
                    dim,
                    given: dims.names(),
                },
                EvalError::Overflow(_) => Error::GridOverflow {
                    kernel: self.name.clone(),
                    axis,
                    expr: formula.clone(),
                },
                other => fail(other.to_string()),
            })?;
            if !(0..=MAX_GRID[i]).contains(&value) {
                return Err(Error::GridOutOfRange {
                    kernel: self.name.clone(),
                    axis,
                    expr: formula.clone(),
                    value,
                    max: MAX_GRID[i],
                });
            }
            // In range: at most 2^31 − 1, so it fits.
            *slot = u32::try_from(value).unwrap_or(u32::MAX);
        }
        Ok(out)
    }
}

impl KernelMeta {
    /// The launch grid of the first kernel (the single-kernel view of META.json) for `dims`:
    /// see [`KernelEntry::grid`]; [`Error::NoKernel`] for a module with no kernel. A program of
    /// several kernels takes each launch's grid from its kernel's entry in [`KernelMeta::kernels`].
    ///
    /// ```
    /// use kir_compiler::{Kernel, Target};
    /// use std::collections::BTreeMap;
    ///
    /// let k = Kernel::op("attention_fwd").target(Target::Sm90a).cache(false).compile()?;
    /// let dims = BTreeMap::from([("B", 2), ("Hq", 8), ("Hkv", 8), ("Sq", 1000), ("Skv", 1000)]);
    /// let [x, y, z] = k.meta().grid(&dims)?;
    /// assert!(x >= 1 && y >= 1 && z >= 1);
    /// # Ok::<(), kir_compiler::Error>(())
    /// ```
    pub fn grid(&self, dims: &(impl Dims + ?Sized)) -> Result<[u32; 3], Error> {
        match self.kernels.first() {
            Some(k) => k.grid(dims),
            None => Err(Error::NoKernel {
                module: self.name.clone(),
            }),
        }
    }
}
