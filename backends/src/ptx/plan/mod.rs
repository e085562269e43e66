//! The plan layer of the PTX backend: the immutable per-kernel facts every lowering module
//! reads, computed from the kernel and the target before any instruction is emitted — the block
//! ([`block`]), the layout of every value ([`layout`]), which dots use wgmma and which tiles take
//! its swizzled layout ([`wgmma`]), the warp roles ([`roles`]), the row sums a loop keeps as quad
//! partials ([`lazy_sum`]), the facts read off the IR that
//! these share ([`ir`]), and the [`KernelPlan`] that gathers them ([`kernel_plan`]). Imports only
//! [`crate::ptx::emit`] below it (and nothing of the lowering).

pub mod block;
pub mod ir;
pub mod kernel_plan;
pub mod layout;
pub mod lazy_sum;
pub mod roles;
pub mod wgmma;

pub use block::{Block, THREADS, VEC};
pub use kernel_plan::{annotate, plan, KernelPlan};
