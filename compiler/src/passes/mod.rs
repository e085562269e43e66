//! Compiler passes: free functions, one per file, sequenced only by `crate::pipeline`.

pub mod dot_overlap;
pub mod egraph;
pub mod fusion;
mod fusion_norm;
mod fusion_norm_match;
pub mod mask_split;
mod mask_split_emit;
mod mask_split_range;
mod mask_split_read;
pub mod persistent;
pub mod pipelining;
mod pipelining_hold;
mod pipelining_tma;
pub mod specialize;
pub mod warp_spec;
mod warp_spec_grid;
mod warp_spec_loops;
mod warp_spec_persist;
mod warp_spec_split;
mod warp_spec_stage;

pub use dot_overlap::dot_overlap;
pub use egraph::{egraph, egraph_explained, egraph_with};
pub use fusion::{fusion, fusion_with_report, FusionReport};
pub use mask_split::mask_split;
pub use persistent::persistent;
pub use pipelining::{pipelining, PipelineConfig};
pub use specialize::{const_values, specialize};
pub use warp_spec::{warp_specialize, warp_specialize_within, WsPlan};
