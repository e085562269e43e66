//! The CPU interpreter: runs a specialized module's entry (its program, or its single kernel) on
//! host tensors and returns the final contents of every `out` and `inout` entry param.
//!
//! Semantics follow `docs/ir.md` and the op table (`kir_ir::ops`). Highlights:
//! - Floats narrower than f32 are emulated exactly: every op producing f16/bf16 computes in f32
//!   and rounds to nearest even. Host values convert to the param dtype with a single correct
//!   round-to-nearest-even from f64 or from i64; i64 data ([`HostData::I64`]) never passes
//!   through f64, in or out.
//! - `out` tensors and temps start **poisoned**: NaN for float dtypes, -0x5A5A5A5A for i32/i64,
//!   0xA5 for u8 and 1 (true) for i1, so an element no kernel writes is visible in the result.
//! - Program instances run in parallel (rayon) unless [`RunOptions::parallel`] is false or the
//!   kernel contains `atomic_add`; then they run in order z, y, x with x fastest. Results are
//!   deterministic: a kernel without races gives the same bits either way, and a failing run
//!   reports the error of the first failing instance in that order.
//! - Nothing reachable from user input panics: every failure is an [`InterpError`].
//! - Strided params: element `i` lives at `Σ i_d·stride_d` of the buffer's storage. A kernel
//!   param's strides (C order when not written) must equal those of the buffer bound to it.
//!
//! Layout: `runner` (specialization check, launches, grid), `bind` (entry arguments, temps,
//! launch bindings), `exec` (the op dispatcher) with `memops` (load/store/atomic_add),
//! `math` (elementwise; `erf` has the error function), `reduce` (reduce, dot), `shape` (iota,
//! broadcast, transpose, reshape), `print` (the `print` op's lines), `tile` (runtime values,
//! rounding), `memory` (global buffers, access addressing) and `progress` (how far a run has
//! got, for [`run_observed`]).
//! - `print` writes to standard error ([`run_with`]) or to a writer the caller gives
//!   ([`run_printing`]), each launch's lines in program order.

pub(crate) mod bind;
mod elem_ops;
pub(crate) mod erf;
mod exec;
mod math;
mod memops;
pub(crate) mod memory;
mod print;
pub mod progress;
mod reduce;
pub(crate) mod runner;
mod sched;
mod sched_ops;
mod shape;
pub(crate) mod tile;

#[cfg(test)]
mod tests;

use kir_ir::{Dtype, Module, Span};
use std::collections::BTreeMap;

/// The elements of a host tensor in C order, each held exactly: 64-bit integers as `i64`, so
/// they never pass through f64, and every other value as `f64`, which holds every value of f32,
/// f16, bf16, i32, u8 and i1 exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// Float values, and integers that f64 holds exactly (|x| ≤ 2^53).
    F64(Vec<f64>),
    /// 64-bit integers, exactly.
    I64(Vec<i64>),
}

impl HostData {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F64(v) => v.len(),
            HostData::I64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, when they are held as f64 (every result whose dtype is not i64).
    pub fn as_f64(&self) -> Option<&[f64]> {
        match self {
            HostData::F64(v) => Some(v),
            HostData::I64(_) => None,
        }
    }

    /// The elements, when they are held as i64 (every i64 result).
    pub fn as_i64(&self) -> Option<&[i64]> {
        match self {
            HostData::I64(v) => Some(v),
            HostData::F64(_) => None,
        }
    }
}

impl From<Vec<f64>> for HostData {
    fn from(v: Vec<f64>) -> HostData {
        HostData::F64(v)
    }
}

impl From<Vec<i64>> for HostData {
    fn from(v: Vec<i64>) -> HostData {
        HostData::I64(v)
    }
}

/// A host-side tensor: dtype, shape and data in C order. Values given to [`run`] are converted
/// to the param dtype (one round to nearest even for floats, from f64 or from i64; ints must be
/// integral and in range, and i64 values convert exactly). Values returned by [`run`] are
/// exactly the values of the tensor's dtype (NaN stays NaN): [`HostData::I64`] for an i64
/// tensor, [`HostData::F64`] for every other dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// The element type. For inputs it is informational (values convert to the param's dtype);
    /// for results it is the tensor's dtype.
    pub dtype: Dtype,
    /// The dims, outermost first.
    pub shape: Vec<usize>,
    /// The elements in C order; its length is the product of `shape`.
    pub data: HostData,
}

/// An argument of the entry: a tensor for a tensor param, a number for a scalar param.
#[derive(Clone, Debug, PartialEq)]
pub enum HostArg {
    /// For an `in` or `inout` tensor param (`out` params take no argument).
    Tensor(HostTensor),
    /// For a scalar param; converted like a tensor element (ints integral and in range, i1 0 or 1).
    Scalar(f64),
    /// For a scalar param, an exact integer: an i64 param takes every i64 value; other dtypes
    /// convert like an i64 tensor element.
    Int(i64),
}

/// How to run. `Default` is `parallel: true`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOptions {
    /// Run program instances on the rayon pool (kernels with `atomic_add` always run sequentially).
    pub parallel: bool,
    /// Seed of the scheduled-IR scheduler: each seed is one deterministic interleaving of
    /// `warp_specialize` partitions and copy completions (kernels without scheduling ops ignore it).
    pub seed: u64,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            parallel: true,
            seed: 0,
        }
    }
}

/// Why a run failed: a message (with the kernel and program id for runtime errors), the span of
/// the op, param or expression at fault when there is one, and the kernel's name.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InterpError {
    /// What went wrong; runtime errors start with `kernel `NAME`, program (x, y, z):`.
    pub message: String,
    /// The op, param, launch or expression at fault, when there is one.
    pub span: Option<Span>,
    /// The kernel that was running or being launched, when there is one.
    pub kernel: Option<String>,
}

impl InterpError {
    /// An error with no location.
    pub(crate) fn new(message: impl Into<String>) -> InterpError {
        InterpError {
            message: message.into(),
            span: None,
            kernel: None,
        }
    }

    /// An error at `span`.
    pub(crate) fn at(span: Span, message: impl Into<String>) -> InterpError {
        InterpError {
            message: message.into(),
            span: Some(span),
            kernel: None,
        }
    }
}

/// Runs the entry of `module` with `args` (by entry param name) and default options. Returns the
/// final contents of every `out` and `inout` entry param, by name.
///
/// The module must be specialized (no constants, every type concrete, no `static_if`, no param
/// conditions); anything else, a missing or ill-shaped argument, a failed `requires`, an
/// out-of-bounds access without `other`/`guard`, an integer division by zero or a bad shift is
/// an [`InterpError`].
pub fn run(
    module: &Module,
    args: &BTreeMap<String, HostArg>,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    run_with(module, args, &RunOptions::default())
}

/// [`run`] with explicit options. Parallel and sequential runs give identical results. What
/// `print` ops print goes to standard error.
pub fn run_with(
    module: &Module,
    args: &BTreeMap<String, HostArg>,
    opts: &RunOptions,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    runner::run_module(module, args, opts, &mut std::io::stderr(), None)
}

/// [`run_with`], counting in `progress` each launch as it starts and each program instance as
/// it finishes, so that another thread can show how far the run has got
/// ([`progress::Progress::snapshot`]). Results and errors are those of [`run_with`].
pub fn run_observed(
    module: &Module,
    args: &BTreeMap<String, HostArg>,
    opts: &RunOptions,
    progress: &progress::Progress,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    runner::run_module(module, args, opts, &mut std::io::stderr(), Some(progress))
}

/// [`run_with`], writing what `print` ops print to `out`: after each launch, the lines of its
/// program instances in program order (x fastest), each instance's in the order it printed
/// them (docs/ir.md, "print"). When an instance fails, the lines of the instances before it and
/// its own lines up to the failure are written before the error is returned.
pub fn run_printing(
    module: &Module,
    args: &BTreeMap<String, HostArg>,
    opts: &RunOptions,
    out: &mut dyn std::io::Write,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    runner::run_module(module, args, opts, out, None)
}
