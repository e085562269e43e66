//! kir-backends: the targets that execute or lower kir modules: [`interp`], the CPU interpreter
//! that runs the IR as written; the launch ABI and metadata shared by the GPU backends
//! ([`abi`], [`meta`]), the encoding of the ABI's tensor maps ([`tensor_map`]) and the GPU
//! [`target`]s; which ptxas assembles cubins ([`ptxas_path`]); the text of the `print` op that
//! every backend writes (`printf`); with the feature `cuda`, the `runtime` that loads PTX and
//! runs programs on a GPU.

pub mod abi;
pub mod backend;
pub mod cuda_c;
pub mod interp;
pub mod meta;
pub mod nvrtc;
mod printf;
pub mod ptx;
pub mod ptxas_path;
#[cfg(feature = "cuda")]
pub mod runtime;
pub mod target;
pub mod tensor_map;

pub use target::{Feature, Target};
