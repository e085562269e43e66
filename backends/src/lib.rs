//! kir-backends: the targets that execute or lower kir modules: [`interp`], the CPU interpreter
//! that runs the IR as written; the launch ABI and metadata shared by the GPU backends
//! ([`abi`], [`meta`]) and the GPU [`target`]s.

pub mod abi;
pub mod cuda_c;
pub mod interp;
pub mod meta;
pub mod nvrtc;
pub mod ptx;
pub mod target;

pub use target::Target;
