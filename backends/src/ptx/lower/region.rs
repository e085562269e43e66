//! The dispatcher's face to the concerns that hold regions: a `for` or `if` body, a TMA ring's
//! producer block and the partitions of `warp_specialize` are blocks of ops that the dispatcher
//! lowers, op by op, but the op that holds them is lowered by its concern (`control`,
//! `producer`, `ws`). Such a concern receives a [`Regions`] from the dispatcher and lowers its
//! nested blocks through it, so that no concern imports the dispatcher: the dependency points
//! down, from the dispatcher to its concerns, and the recursion runs through this trait.

use super::ctx::Ctx;
use super::PtxError;
use kir_ir::{Block, OpData, Value};

/// How a concern lowers the ops nested in the op it lowers (the dispatcher implements it).
pub trait Regions {
    /// Lowers the ops of block `b`; returns the operands of its final `yield`.
    fn block(&self, c: &mut Ctx, b: Block) -> Result<Vec<Value>, PtxError>;

    /// Lowers one op outside any block walk (an op deferred to a later point, `ws.rs`).
    fn op(&self, c: &mut Ctx, op: &OpData) -> Result<(), PtxError>;
}
