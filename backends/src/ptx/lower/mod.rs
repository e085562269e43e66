//! The lowering layer of the PTX backend: one module per concern, each turning the ops of a
//! specialized kernel into [`crate::ptx::emit::PtxInst`]s on the kernel's builder, reading the
//! kernel's [`crate::ptx::plan`]. `kernel` lowers one `.entry`; `dispatch` sends each op to its
//! concern: `arith`/`special`/`lazy`/`statics`/`divide`/`sign` (scalar and elementwise work;
//! `erf` and `pow`; division by powers of two, and which i32 scalars are never negative),
//! `print` (`vprintf`), `memory`/`cp_rows`/`vector`/
//! `mma_store`/`bulk_reduce`/`store_order`/`tile`/`rows` (global and shared memory, shape ops;
//! `deferred`: the late conversion of 16-bit loads; `bulk_reduce`: tile atomics as one TMA
//! reduction), `dot`/`wgmma`
//! (with ping-pong)/`rescale` (dots), `reduce` (reductions), `control` (loops and ifs), `sched`
//! (the cp.async stage rings of scheduled IR), `tma`/`tma_rows`/`producer` (TMA rings, mbarriers
//! and the blocks one thread runs), `ws`/`consumers` (warp specialization, with one consumer or
//! several), and `report` (the decisions, for
//! `--report`). Every concern reads values through `values` (`Ctx::val`, `regs_in`, lazy tiles)
//! and `convert` (layout conversions); the concerns that hold regions lower them through
//! `region`'s `Regions`, which `dispatch` implements. The files import each other in layers,
//! never in a cycle (`layers_test.rs`).

mod arith;
mod bulk_reduce;
mod cluster;
mod consumers;
mod control;
mod convert;
mod cp_rows;
mod ctx;
mod deferred;
mod dispatch;
mod divide;
mod dot;
mod elem;
pub mod kernel;
mod lazy;
mod memory;
mod mma_store;
mod notes;
pub(crate) mod print;
mod producer;
mod reduce;
mod region;
pub mod report;
mod rescale;
mod row_compact;
mod row_reload;
mod rows;
mod sched;
mod semaphore;
mod sign;
mod special;
mod stages;
mod state;
mod statics;
mod store_order;
mod tile;
pub mod tma;
mod tma_rows;
mod values;
mod vector;
mod wgmma;
mod wgmma_pair;
mod writer;
mod ws;
mod ws_fallback;

use kir_ir::Span;

/// A lowering failure: names the op (by span) or the kernel, and the target.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct PtxError {
    pub message: String,
    pub span: Option<Span>,
    /// The kernel needs more shared memory than a block may use (a shallower ring may fit).
    pub over_shared: bool,
}

impl PtxError {
    /// An error at an op.
    pub fn at(span: Span, message: impl Into<String>) -> PtxError {
        PtxError {
            message: message.into(),
            span: Some(span),
            over_shared: false,
        }
    }

    /// An error without a location.
    pub fn plain(message: impl Into<String>) -> PtxError {
        PtxError {
            message: message.into(),
            span: None,
            over_shared: false,
        }
    }
}
