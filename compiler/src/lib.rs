//! kir-compiler: compile kir kernels (the built-in op library, or `.kir` source of your own) to
//! PTX or CUDA C for an NVIDIA target, with the launch metadata a launcher needs.
//!
//! The front door is [`Kernel`]: choose the source ([`Kernel::op`], [`Kernel::path`],
//! [`Kernel::source`]), set the constants, the [`Target`], the [`Backend`] and the lowering
//! flags, then [`Kernel::compile`] returns a [`CompiledKernel`]: the code, its typed launch
//! metadata [`KernelMeta`] (META.json, whose [`KernelMeta::grid`] evaluates the launch grid
//! for the caller's dims) and the configuration report. Every failure is an [`Error`], which
//! keeps the source location and renders the message `kirc` prints.
//!
//! ```
//! use kir_compiler::{Backend, Kernel, Target};
//!
//! let gemm = Kernel::op("gemm")
//!     .target(Target::Sm90a)
//!     .backend(Backend::Ptx)
//!     .cache(false)
//!     .compile()?;
//! assert!(gemm.code().contains(".visible .entry"));
//! let dims = [("Bt", 1), ("M", 1000), ("N", 2048), ("K", 512)];
//! let grid = gemm.meta().grid(&dims)?;
//! assert!(grid.iter().all(|&g| g >= 1));
//! # Ok::<(), kir_compiler::Error>(())
//! ```
//!
//! Everything else is in [`internal`], which kir's own crates (the `kirc` command line, the
//! tests, the Python package) use: it is hidden from the documentation and outside semver
//! (docs/api.md).
#![warn(missing_docs)]

mod api;
#[doc(hidden)]
pub mod internal;

mod configs;
mod flags;
mod fused_plan;
mod search;
mod split;
mod structure;

// The internal modules under the names the crate's own code uses (`crate::plan`, ...).
use internal::{
    cache, compile, compiled, cost, egraph, limits, oplib, options, outfile, pass, passes,
    pipeline, plan, source, suggest, traffic,
};

pub use api::{
    AbiParam, Access, Axis, Backend, CompiledKernel, Dims, Error, Grid, Kernel, KernelEntry,
    KernelMeta, Launch, Location, Param, Temp, Unaligned,
};
pub use internal::options::Fusion;
pub use kir_backends::Target;
