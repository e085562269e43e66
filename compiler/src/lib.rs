//! kir-compiler: the passes, the pipeline that orders them, the built-in op library, `.npy`
//! I/O, atomic output files ([`outfile`]) and the on-disk cache ([`cache`]). The `kirc` command
//! line is a crate of its own (kirc/), built on this one.
//!
//! The entry point for frameworks is [`pipeline`]: parse a module (or take a built-in op from
//! [`oplib`]), verify it, specialize it with `-D NAME=VALUE` overrides and verify the result.
//! [`source`] loads a module by path or op name and renders its errors as `kirc` prints them.

pub mod cache;
pub mod compile;
pub mod compiled;
pub mod configs;
pub mod cost;
pub mod egraph;
pub mod limits;
pub mod npy;
pub mod oplib;
pub mod options;
pub mod outfile;
pub mod pass;
pub mod passes;
pub mod pipeline;
pub mod plan;
pub mod search;
pub mod source;
pub mod split;
pub mod structure;
pub mod suggest;
pub mod traffic;
pub mod tune;
