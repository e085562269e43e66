//! The front-end passes, in pipeline order: `specialize` (constants and `static_if`), `egraph`
//! (per-kernel rewriting and extraction by cost), `fusion` (kernel-graph fusion over the
//! program) and `mask_split` (masked block loops split into full and partial blocks). Each
//! runs for every target; `crate::pipeline::run_observed` orders them.

pub mod egraph;
pub mod fusion;
pub mod mask_split;
pub mod specialize;

pub use egraph::{egraph, egraph_explained, egraph_with};
pub use fusion::{fusion, fusion_with_report, FusionReport, NOMINAL_DIM};
pub use mask_split::mask_split;
pub use specialize::{const_values, specialize};
