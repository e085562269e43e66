//! Shape ops (iota, splat, broadcast, reshape, transpose; reductions are in `reduce`).
//! Register-only fast paths cover the FlashAttention-2 layout (row reductions with quad
//! shuffles, row broadcasts in place) and, in `rows`, the `Blocked` layout (row reductions
//! with warp shuffles and one exchange, broadcasts within a thread); everything else goes
//! through the scratch region of shared memory (`convert.rs`), reading and writing each element
//! at its row-major position.

use super::convert::{convert, read_scratch, slot_live, spill};
use super::ctx::{Ctx, Val};
use super::values::{iota_val, result_layout};
use super::PtxError;
use crate::ptx::emit::Reg;
use crate::ptx::plan::layout::{self, Layout, Place};
use kir_ir::{Attr, Dtype, ExprKind, OpData, Opcode, Span};

/// Lowers iota, splat, broadcast, reshape, transpose and reduce.
pub fn lower_shape_op(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let v = *op
        .results
        .first()
        .ok_or_else(|| PtxError::at(sp, "missing result"))?;
    let d = c.k.dfg.ty(v).dtype().unwrap_or(Dtype::F32);
    let shape = c.k.dfg.ty(v).shape().unwrap_or_default();
    let axis_attr = |name: &str| match op.attr(name) {
        Some(Attr::Expr(e)) => match e.kind {
            ExprKind::Int(i) => i as usize,
            _ => 0,
        },
        _ => 0,
    };
    // A transpose placed in shared memory (only dots read it) is a view of its operand there:
    // a shared tile as it is, a register tile after one copy (dot.rs, `to_shared`).
    if op.opcode == Opcode::Transpose && c.plan.places.get(&v) == Some(&Place::Shared) {
        if let Some(&a) = op.operands.first() {
            let src = c.val(a, sp)?;
            if let Val::Shared {
                off,
                dyn_off,
                shape: s,
                dtype,
                row_stride,
                col_stride,
            } = super::dot::to_shared(c, &src, sp)?
            {
                let view = Val::Shared {
                    off,
                    dyn_off,
                    shape: [s[1], s[0]],
                    dtype,
                    row_stride: col_stride,
                    col_stride: row_stride,
                };
                c.values.vals.insert(v, view);
                return Ok(());
            }
        }
    }
    let l = result_layout(c, v, sp)?;
    // A row vector into the accumulator layout in a warp-specialized consumer: a few
    // registers a lane, spread at each use (row_compact.rs).
    if op.opcode == Opcode::Broadcast && l == Layout::RowMma {
        if let Some(&a) = op.operands.first() {
            if let Some(cv) = super::row_compact::compact(c, v, a, &shape, sp)? {
                c.values.compact.insert(v, cv);
                super::notes::note_compact_row(c, op);
                return Ok(());
            }
        }
    }
    let n = layout::slots(l, &shape, c.plan.blk);
    let regs: Vec<Reg> = match op.opcode {
        Opcode::Iota => match iota_val(c, op)? {
            Val::Tile { regs, .. } => regs,
            _ => return Err(PtxError::at(sp, "internal: iota")),
        },
        Opcode::Splat => {
            let a = *op
                .operands
                .first()
                .ok_or_else(|| PtxError::at(sp, "splat needs an operand"))?;
            match c.val(a, sp)? {
                Val::Scalar(r) => vec![r; n],
                _ => return Err(PtxError::at(sp, "splat needs a scalar")),
            }
        }
        Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => {
            let a = *op
                .operands
                .first()
                .ok_or_else(|| PtxError::at(sp, "missing operand"))?;
            let src = c.val(a, sp)?;
            let fast = match (&src, op.opcode) {
                (Val::Scalar(r), _) => Some(vec![*r; n]),
                (Val::Tile { .. }, Opcode::Broadcast) if l == Layout::Blocked => {
                    super::rows::blocked_broadcast(c, a, &src, &shape)
                }
                (
                    Val::Tile {
                        layout: Layout::Blocked,
                        regs,
                        ..
                    },
                    Opcode::Reshape,
                ) if l == Layout::Blocked => Some(regs.clone()),
                (
                    Val::Tile {
                        layout: Layout::RowMma,
                        shape: s,
                        regs,
                        ..
                    },
                    Opcode::Reshape,
                ) if l == Layout::RowMma && layout::rows_cols(s) == layout::rows_cols(&shape) => {
                    Some(regs.clone())
                }
                (
                    Val::Tile {
                        layout: Layout::RowMma,
                        shape: s,
                        regs,
                        ..
                    },
                    Opcode::Broadcast,
                ) if l == Layout::RowMma
                    && layout::rows_cols(s).1 == 1
                    && layout::rows_cols(s).0 == layout::rows_cols(&shape).0 =>
                {
                    // [M, 1] → [M, N]: slot (mf, nf, c) takes row slot (mf, c / 2).
                    let nfs = layout::rows_cols(&shape).1 / 8;
                    (0..n)
                        .map(|s| regs[(s / (nfs * 4)) * 2 + (s % 4) / 2])
                        .collect::<Vec<_>>()
                        .into()
                }
                // [1, N] → [M, N] in the accumulator layout from a read-only load: each thread
                // loads the columns it holds (row_reload.rs), no shared memory.
                (Val::Tile { .. }, Opcode::Broadcast) if l == Layout::RowMma => {
                    super::row_reload::reload(c, a, &shape, sp)?
                }
                _ => None,
            };
            match fast {
                Some(r) => r,
                None => generic_shape(c, op, &src, l, &shape, d, sp)?,
            }
        }
        Opcode::Reduce => super::reduce::reduce(c, op, axis_attr("axis"), l, &shape, d)?,
        _ => return Err(PtxError::at(sp, "internal: not a shape op")),
    };
    c.values.vals.insert(
        v,
        Val::Tile {
            layout: l,
            shape,
            dtype: d,
            regs,
        },
    );
    Ok(())
}

/// broadcast / reshape / transpose through the scratch region.
fn generic_shape(
    c: &mut Ctx,
    op: &OpData,
    src: &Val,
    l: Layout,
    shape: &[usize],
    d: Dtype,
    sp: Span,
) -> Result<Vec<Reg>, PtxError> {
    let src = match src {
        Val::Shared { .. } => convert(c, src, Layout::Blocked, sp)?,
        other => other.clone(),
    };
    let Val::Tile {
        layout: sl,
        shape: ss,
        regs: sr,
        ..
    } = src
    else {
        return Err(PtxError::at(sp, "internal: expected a register tile"));
    };
    spill(c, sl, &ss, d, &sr);
    let coords = c.coords(l, shape);
    let perm: Vec<usize> = match op.attr("perm") {
        Some(Attr::List(p)) => p.iter().map(|e| e.as_int().unwrap_or(0) as usize).collect(),
        _ => (0..shape.len()).rev().collect(),
    };
    let mut out = Vec::new();
    for (s, sc) in coords.iter().enumerate() {
        if !slot_live(c, l, shape, s) {
            out.push(super::ctx::constant(c, d, 0.0));
            continue;
        }
        let lin = match op.opcode {
            Opcode::Reshape => c.linear(&sc.idx, shape),
            Opcode::Broadcast => {
                let zero = c.b.imm32(0);
                let idx: Vec<Reg> = sc
                    .idx
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| if ss[i] == 1 { zero } else { r })
                    .collect();
                c.linear(&idx, &ss)
            }
            _ => {
                // Result dim i is source dim perm[i]: source index[perm[i]] = result index[i].
                let mut idx = sc.idx.clone();
                for (i, &p) in perm.iter().enumerate() {
                    if let (Some(slot), Some(&r)) = (idx.get_mut(p), sc.idx.get(i)) {
                        *slot = r;
                    }
                }
                c.linear(&idx, &ss)
            }
        };
        out.push(read_scratch(c, d, lin, sc.valid));
    }
    Ok(out)
}
