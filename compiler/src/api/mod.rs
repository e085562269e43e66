//! The public API (re-exported at the crate root, docs/api.md): [`Kernel`] (the settings of a
//! compilation and [`Kernel::compile`]), [`CompiledKernel`] (the code and what launching it
//! needs), [`KernelMeta`] (the typed META.json, with [`KernelMeta::grid`]) and [`Error`].
//! Everything here is built on the internal compile path that `kirc compile` takes, so the two
//! produce the same bytes (tests/tests/api_parity.rs).

mod compiled;
mod error;
mod grid;
mod kernel;
mod meta;

pub use compiled::{Backend, CompiledKernel};
pub use error::{Axis, Error, Location};
pub use grid::Dims;
pub use kernel::Kernel;
pub use meta::{AbiParam, Access, Grid, KernelEntry, KernelMeta, Launch, Param, Temp, Unaligned};
