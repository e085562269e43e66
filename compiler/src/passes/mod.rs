//! Compiler passes: free functions sequenced only by `crate::pipeline`, grouped by the
//! pipeline's two phases. The front end ([`frontend`]: `specialize`, `egraph`, `fusion`,
//! `mask_split`) rewrite a module for every target; the scheduling passes ([`schedule`]:
//! `swap_operands`, `persistent`, `pipelining`, `warp_specialize`, `dot_overlap`) rewrite it for
//! one target.
//! Every pass and the types the pipeline uses are re-exported here.

pub mod frontend;
pub mod schedule;

pub use frontend::{
    const_values, egraph, egraph_explained, egraph_with, fusion, fusion_with_report, mask_split,
    specialize, FusionReport, NOMINAL_DIM,
};
pub use schedule::{
    cluster, dot_overlap, persistent, pipelining, stream_k, swap_operands, warp_specialize,
    warp_specialize_each, warp_specialize_within, PipelineConfig, WsPlan,
};
