//! Compiler passes: free functions, one per file, sequenced only by `crate::pipeline`.

pub mod specialize;

pub use specialize::{const_values, specialize};
