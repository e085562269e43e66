//! The op dispatcher: the walk over a block's ops (skipping folded, deferred and lazy ones) and
//! one exhaustive match over opcodes that lowers the scalar sources (program ids, dims, params,
//! constants) and elementwise ops here and sends every other op to its concern. The concerns
//! that hold regions (`control`, `producer`, `ws`) lower them through the dispatcher's
//! [`Regions`] (`region.rs`), so no concern imports this module.

use super::control::{lower_for, lower_if};
use super::ctx::{constant, dtype, place, shape};
use super::ctx::{Ctx, Val};
use super::lazy::lazy_ok;
use super::region::Regions;
use super::values::{elementwise_operands, res_of};
use super::PtxError;
use crate::ptx::emit::{Operand, PtxInst, RegClass};
use crate::ptx::plan::ir::lit;
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Attr, Block, OpData, Opcode, Value};

/// Lowers the kernel body.
pub fn lower_body(c: &mut Ctx) -> Result<(), PtxError> {
    let body = c.k.body;
    block(c, body).map(|_| ())
}

/// The dispatcher as the concerns see it: how they lower the regions of their ops.
struct Dispatcher;

impl Regions for Dispatcher {
    fn block(&self, c: &mut Ctx, b: Block) -> Result<Vec<Value>, PtxError> {
        block(c, b)
    }

    fn op(&self, c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
        lower_op(c, op)
    }
}

/// Lowers the ops of a block; returns the operands of its final `yield`.
fn block(c: &mut Ctx, b: Block) -> Result<Vec<Value>, PtxError> {
    let ops = c.k.dfg.blocks[b].ops.clone();
    super::deferred::enter_block(c);
    // An `async_wait` after the copies that refill the ring is emitted before them (sched.rs).
    let hoist = super::sched::hoisted_wait(c.k, &ops);
    let mut yielded = Vec::new();
    for (i, o) in ops.into_iter().enumerate() {
        let k = c.k;
        let op = &k.dfg.ops[o];
        // Lowered in the consumer partition of a warp-specialized kernel instead (ws.rs).
        if c.asyncs.ws.deferred.contains(&o) {
            continue;
        }
        // Issued earlier, with the dot it pairs with (wgmma_pair.rs).
        if c.values.hoisted.contains(&o) {
            continue;
        }
        if let Some((at, w, n)) = hoist {
            if i == at {
                super::sched::wait(c, n);
            }
            if i == w {
                continue;
            }
        }
        if op.opcode == Opcode::Yield {
            yielded = op.operands.clone();
            continue;
        }
        if super::deferred::alias(c, op) {
            continue;
        }
        super::deferred::before(c, op);
        if super::statics::fold(c, op) {
            continue;
        }
        if let Some(src) = super::mma_store::store_cast(c, &c.k.dfg.blocks[b].ops, i) {
            c.mem.store_casts.insert(op.results[0], src);
            continue;
        }
        if lazy_ok(c, op) {
            if let Some(&r) = op.results.first() {
                c.values.lazy.insert(r, o);
                continue;
            }
        }
        c.mem.next_op = c.k.dfg.blocks[b].ops.get(i + 1).copied();
        lower_op(c, op)?;
        super::semaphore::after_op(c, op);
    }
    super::semaphore::flush(c);
    super::deferred::leave_block(c, &yielded);
    Ok(yielded)
}

fn def(c: &mut Ctx, v: Value, val: Val) {
    c.values.vals.insert(v, val);
}

/// Lowers one op.
fn lower_op(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    super::deferred::before(c, op);
    super::semaphore::before(c, op);
    let sp = op.span;
    c.b.at(sp);
    let res = op.results.first().copied();
    match op.opcode {
        Opcode::ProgramId | Opcode::NumPrograms => {
            let axis = lit(op.lead.as_ref()).unwrap_or(0.0).clamp(0.0, 2.0) as usize;
            let sreg = if op.opcode == Opcode::ProgramId {
                ["%ctaid.x", "%ctaid.y", "%ctaid.z"][axis]
            } else {
                ["%nctaid.x", "%nctaid.y", "%nctaid.z"][axis]
            };
            let r = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("mov.u32").op(r).op(Operand::Special(sreg)));
            def(c, res_of(res, sp)?, Val::Scalar(r));
        }
        Opcode::Dim => {
            let Some(Attr::Name(n, _)) = &op.lead else {
                return Err(PtxError::at(sp, "dim needs a name"));
            };
            let r = *c
                .params
                .dims
                .get(n)
                .ok_or_else(|| PtxError::at(sp, format!("unknown dim `{n}`")))?;
            def(c, res_of(res, sp)?, Val::Scalar(r));
        }
        Opcode::Param => {
            let Some(Attr::Name(n, _)) = &op.lead else {
                return Err(PtxError::at(sp, "param needs a name"));
            };
            let r = *c
                .params
                .scalars
                .get(n)
                .ok_or_else(|| PtxError::at(sp, format!("unknown scalar param `{n}`")))?;
            def(c, res_of(res, sp)?, Val::Scalar(r));
        }
        Opcode::Const => {
            let v = res_of(res, sp)?;
            let d = dtype(c, v);
            let x =
                lit(op.lead.as_ref()).ok_or_else(|| PtxError::at(sp, "const needs a literal"))?;
            let r = constant(c, d, x);
            match place(c, v) {
                Place::Scalar => def(c, v, Val::Scalar(r)),
                Place::Reg(l) => {
                    let s = shape(c, v);
                    let n = crate::ptx::plan::layout::slots(l, &s, c.plan.blk);
                    def(
                        c,
                        v,
                        Val::Tile {
                            layout: l,
                            shape: s,
                            dtype: d,
                            regs: vec![r; n],
                        },
                    );
                }
                Place::Shared => {
                    return Err(PtxError::at(
                        sp,
                        "internal: a constant placed in shared memory",
                    ))
                }
            }
        }
        Opcode::Iota
        | Opcode::Splat
        | Opcode::Broadcast
        | Opcode::Reshape
        | Opcode::Transpose
        | Opcode::Reduce => super::tile::lower_shape_op(c, op)?,
        Opcode::Load | Opcode::Store | Opcode::AtomicAdd => super::memory::lower_memory_op(c, op)?,
        Opcode::SemWait => super::semaphore::lower_wait(c, op)?,
        Opcode::SemSignal => super::semaphore::lower_signal(c, op)?,
        Opcode::Dot | Opcode::DotAsync => super::dot::lower_dot(c, op)?,
        Opcode::DotWait => super::dot::lower_dot_wait(c, op)?,
        kir_ir::elementwise_ops!() => elementwise(c, op)?,
        Opcode::Print => super::print::lower_print(c, op)?,
        Opcode::For => lower_for(c, op, &Dispatcher)?,
        Opcode::If => lower_if(c, op, &Dispatcher)?,
        Opcode::StaticIf => {
            return Err(PtxError::at(
                sp,
                "`static_if` must be removed by specialization before PTX lowering",
            ))
        }
        Opcode::SmemAlloc
        | Opcode::AsyncCopy
        | Opcode::AsyncCommit
        | Opcode::AsyncWait
        | Opcode::SmemRead
        | Opcode::SmemRelease => super::sched::lower_sched_op(c, op)?,
        Opcode::MbarAlloc if c.target.has_mbarrier_tx() => super::tma::lower_alloc(c, op)?,
        Opcode::MbarArrive if c.target.has_mbarrier_tx() => super::tma::lower_arrive(c, op)?,
        Opcode::MbarWait if c.target.has_mbarrier_tx() => super::tma::lower_wait(c, op)?,
        Opcode::WarpSpecialize => super::ws::lower_ws(c, op, &Dispatcher)?,
        // The async-dot ops.
        kir_ir::schedule_ops!() => {
            return Err(PtxError::at(
                sp,
                format!(
                    "`{}` is scheduled IR, which the PTX backend does not lower for {} yet",
                    op.opcode.name(),
                    c.target.name()
                ),
            ))
        }
        Opcode::Yield => {}
    }
    Ok(())
}

fn elementwise(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let v = res_of(op.results.first().copied(), op.span)?;
    let ins = elementwise_operands(c, op)?;
    // An exact no-op rescale of an accumulator tile is skipped behind a warp vote (rescale.rs).
    let skipped = match ins.layout {
        Some(Layout::RowMma) => super::rescale::skip_unit_rescale(c, op, &ins.shape, &ins.ins)?,
        _ => None,
    };
    let val = match skipped {
        Some(val) => val,
        None => ins.apply(c, op)?,
    };
    def(c, v, val);
    Ok(())
}
