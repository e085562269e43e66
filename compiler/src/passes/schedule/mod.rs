//! The scheduling passes, for one target, in pipeline order: `swap_operands` (a dot loop's
//! accumulator computed transposed), `persistent` (a grid of resident
//! programs looping over tiles), `pipelining` (shared-memory rings of async copies),
//! `warp_specialize` (producer and consumer partitions talking through mbarriers) and
//! `dot_overlap` (a loop's dot kept in flight across iterations), then `cluster` (pairs of
//! programs sharing their copies).
//! `crate::pipeline::schedule_observed` orders them.

pub mod cluster;
pub mod dot_overlap;
mod grid;
pub mod persistent;
pub mod pipelining;
pub mod stream_k;
pub mod swap_operands;
pub mod warp_specialize;

pub use cluster::cluster;
pub use dot_overlap::dot_overlap;
pub use persistent::persistent;
pub use pipelining::{pipelining, PipelineConfig};
pub use stream_k::stream_k;
pub use swap_operands::swap_operands;
pub use warp_specialize::{warp_specialize, warp_specialize_each, warp_specialize_within, WsPlan};
