//! A random-program generator for kir (in the spirit of Csmith and YARPGen, for tile IR) and
//! the differential checks it drives.
//!
//! A seed gives a well-typed module text ([`module::generate`]) and its inputs
//! ([`inputs::args`]). [`check::check`] runs the module through every pass on the interpreter
//! and compares each pass's result with the one before it, and compiles it for every PTX target
//! (ptxas) and to CUDA C (NVRTC, then ptxas); [`reduce::reduce`] shrinks a failing text while the
//! failure persists. `tests/tests/rpg.rs` runs a fixed seed slice in CI and replays every
//! reduced program saved under `tests/in/rpg/`; the `rpg` binary runs any seed range.
//!
//! Files: `module` (shapes of whole programs), `kernels`, `attention` and `rings` (kernel
//! shapes), `gen`, `gen_ops` and `gen_ctl` (the body builder: values, pure ops, control flow and
//! memory), `ordered` (an `atomic_add` in grid order under a semaphore counter), `ty` (types and
//! literals), `inputs`, `check` and `compare` (the differential check), `bounds` with
//! `bounds_walk` and `bounds_ops` (how far a pass or the GPU may move an output), `reduce`, and
//! `artifacts` (programs for `scripts/gpu_rpg.py`). docs/testing.md describes the
//! whole ("Random programs").

pub mod artifacts;
pub mod attention;
pub mod bound;
pub mod bounds;
mod bounds_ops;
mod bounds_walk;
pub mod check;
pub mod compare;
pub mod gen;
pub mod gen_ctl;
pub mod gen_ops;
pub mod inputs;
pub mod kernels;
pub mod module;
pub mod ordered;
pub mod outcome;
pub mod reduce;
pub mod rings;
pub mod ty;

#[cfg(test)]
mod tests;
