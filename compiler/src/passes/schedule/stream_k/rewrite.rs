//! The stream-K rewrite of one kernel (the module doc of `stream_k`): the unit decode at the
//! top, the unit loop around the prologue and the K loop, the seed of a split tile's finisher,
//! and the partial store and signal of the program holding its first iterations.

use super::super::persistent::{bin_expr, grid_query, replace_grid_queries, tile_coords, un};
use super::program::Names;
use super::shape::Shape;
use kir_ir::edit::{self, iconst, op2, simple};
use kir_ir::{
    Access, Attr, BinOp, Block, CmpPred, Dtype, Expr, ExprKind, Func, Kernel, Offset, Op, Opcode,
    Span, TensorRef, Type, Value,
};

/// Appends scalar ops to one block.
struct At<'k> {
    k: &'k mut Kernel,
    b: Block,
}

impl At<'_> {
    fn c32(&mut self, v: i64) -> Value {
        iconst(self.k, self.b, v)
    }
    fn c64(&mut self, v: i64) -> Value {
        let op = simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(v))));
        let id = self
            .k
            .dfg
            .append_op(self.b, op, vec![(Type::scalar(Dtype::I64), None)]);
        self.k.dfg.ops[id].results[0]
    }
    fn bin(&mut self, opc: Opcode, x: Value, y: Value, d: Dtype) -> Value {
        op2(self.k, self.b, opc, None, x, y, d)
    }
    fn cmp(&mut self, p: CmpPred, x: Value, y: Value) -> Value {
        op2(self.k, self.b, Opcode::Cmp, Some(p), x, y, Dtype::I1)
    }
    fn sel(&mut self, c: Value, x: Value, y: Value, d: Dtype) -> Value {
        let id = self.k.dfg.append_op(
            self.b,
            simple(Opcode::Select, vec![c, x, y], None),
            vec![(Type::scalar(d), None)],
        );
        self.k.dfg.ops[id].results[0]
    }
    fn cast(&mut self, x: Value, d: Dtype) -> Value {
        un(self.k, self.b, Opcode::Cast, x, d)
    }
}

/// A memory op on `param` at offsets (`v`, 0, 0, …) with `rank` offsets.
fn mem_op(
    opc: Opcode,
    param: &str,
    first: Value,
    rank: usize,
    operands: Vec<Value>,
) -> kir_ir::OpData {
    let mut op = simple(opc, operands, None);
    let mut offsets = vec![Offset::Value(first)];
    offsets.extend((1..rank).map(|_| Offset::Expr(Expr::int(0))));
    op.tensor = Some(TensorRef {
        param: param.to_string(),
        offsets,
        span: Span::default(),
    });
    op
}

/// Rewrites `k` (whose K loop is `s`) as the module doc says.
pub(super) fn rewrite(k: &mut Kernel, programs: u32, s: &Shape, names: &Names) {
    let p_count = i64::from(programs);
    let body = k.body;
    let mut old = std::mem::take(&mut k.dfg.blocks[body].ops);
    let yield_op = old.pop().expect("a body ends with yield");
    let epilogue: Vec<Op> = old.split_off(s.pos + 1);
    let prologue_and_loop = old;
    let grid = k.grid.clone();
    let (lo, hi, step) = {
        let d = &k.dfg.ops[s.lp];
        (d.operands[0], d.operands[1], d.operands[2])
    };
    // The loop's bounds once more, at the top: the unit decode needs its trip count I before
    // the prologue (which needs the unit's tile) runs.
    let cl_src = k.dfg.clone();
    let bound_ops: Vec<Op> = prologue_and_loop[..s.pos]
        .iter()
        .copied()
        .filter(|&o| {
            let r = &k.dfg.ops[o].results;
            r.len() == 1 && [lo, hi, step].iter().any(|&b| feeds(k, r[0], b))
        })
        .collect();
    let mut cl = edit::Cloner::new(&cl_src);
    for &o in &bound_ops {
        cl.op(&mut k.dfg, body, o);
    }
    let map = |v: Value| cl.vmap.get(&v).copied().unwrap_or(v);
    let (lo0, hi0, step0) = (map(lo), map(hi), map(step));

    let mut a = At { k, b: body };
    // T, the tile count, and I, the loop's trip count.
    let mut g = vec![];
    for e in &grid {
        let wide = super::super::grid::expr_value(a.k, body, e);
        g.push(a.cast(wide, Dtype::I32));
    }
    let g01 = a.bin(Opcode::Mul, g[0], g[1], Dtype::I32);
    let total = a.bin(Opcode::Mul, g01, g[2], Dtype::I32);
    let one = a.c32(1);
    let zero = a.c32(0);
    let span_ = a.bin(Opcode::Sub, hi0, lo0, Dtype::I32);
    let step_m1 = a.bin(Opcode::Sub, step0, one, Dtype::I32);
    let up = a.bin(Opcode::Add, span_, step_m1, Dtype::I32);
    let trips_raw = a.bin(Opcode::Div, up, step0, Dtype::I32);
    let has_trips = a.cmp(CmpPred::Gt, hi0, lo0);
    let trips = a.sel(has_trips, trips_raw, zero, Dtype::I32);
    let pid = grid_query(a.k, body, Opcode::ProgramId, 0);
    let pc = a.c32(p_count);
    let rem = a.bin(Opcode::Rem, total, pc, Dtype::I32);
    let pm1 = a.c32(p_count - 1);
    let one64 = a.c64(1);
    let trips64 = a.cast(trips, Dtype::I64);
    // S = R + P stream-K tiles when T ≥ 2P, R = T mod P > 0 and I ≥ 1; else 0.
    let two_p = a.c32(2 * p_count);
    let big = a.cmp(CmpPred::Ge, total, two_p);
    let ragged = a.cmp(CmpPred::Gt, rem, zero);
    let any = a.cmp(CmpPred::Ge, trips, one);
    let on1 = a.bin(Opcode::And, big, ragged, Dtype::I1);
    let on = a.bin(Opcode::And, on1, any, Dtype::I1);
    let r_plus_p = a.bin(Opcode::Add, rem, pc, Dtype::I32);
    let sk_tiles = a.sel(on, r_plus_p, zero, Dtype::I32);
    let dp_tiles = a.bin(Opcode::Sub, total, sk_tiles, Dtype::I32);
    // Whole tiles of program p: p, p + P, … below dp_tiles.
    let dp_left = a.bin(Opcode::Sub, dp_tiles, pid, Dtype::I32);
    let dp_up = a.bin(Opcode::Add, dp_left, pm1, Dtype::I32);
    let dp_units = a.bin(Opcode::Div, dp_up, pc, Dtype::I32);
    // Its stream-K iterations [start, end) (i64: S·I·P may pass 2³¹).
    let pc64 = a.c64(p_count);
    let sk64 = a.cast(sk_tiles, Dtype::I64);
    let iters = a.bin(Opcode::Mul, sk64, trips64, Dtype::I64);
    let pid64 = a.cast(pid, Dtype::I64);
    let s0 = a.bin(Opcode::Mul, pid64, iters, Dtype::I64);
    let start = a.bin(Opcode::Div, s0, pc64, Dtype::I64);
    let pid1 = a.bin(Opcode::Add, pid64, one64, Dtype::I64);
    let e0 = a.bin(Opcode::Mul, pid1, iters, Dtype::I64);
    let end = a.bin(Opcode::Div, e0, pc64, Dtype::I64);
    let trips1 = a.bin(Opcode::Max, trips64, one64, Dtype::I64);
    let first_t = a.bin(Opcode::Div, start, trips1, Dtype::I64);
    let end_m1 = a.bin(Opcode::Sub, end, one64, Dtype::I64);
    let last_t = a.bin(Opcode::Div, end_m1, trips1, Dtype::I64);
    let has_sk = a.cmp(CmpPred::Gt, end, start);
    let span_t = a.bin(Opcode::Sub, last_t, first_t, Dtype::I64);
    let n_sk64 = a.bin(Opcode::Add, span_t, one64, Dtype::I64);
    let n_sk32 = a.cast(n_sk64, Dtype::I32);
    let sk_units = a.sel(has_sk, n_sk32, zero, Dtype::I32);
    let n_units = a.bin(Opcode::Add, dp_units, sk_units, Dtype::I32);

    // The unit loop's body.
    let ub = a.k.dfg.new_block();
    let u = a.k.dfg.add_block_arg(
        ub,
        Type::scalar(Dtype::I32),
        Some("unit".into()),
        Span::default(),
    );
    let mut a = At { k: a.k, b: ub };
    let is_dp = a.cmp(CmpPred::Lt, u, dp_units);
    // Whole tile: p + u·P, iterations [0, I).
    let up_ = a.bin(Opcode::Mul, u, pc, Dtype::I32);
    let dp_tile = a.bin(Opcode::Add, pid, up_, Dtype::I32);
    // Stream-K tile, backwards from the range's last: tl = last_t − (u − dp_units).
    let j = a.bin(Opcode::Sub, u, dp_units, Dtype::I32);
    let j64 = a.cast(j, Dtype::I64);
    let tl = a.bin(Opcode::Sub, last_t, j64, Dtype::I64);
    let t_lo = a.bin(Opcode::Mul, tl, trips64, Dtype::I64);
    let tl1 = a.bin(Opcode::Add, tl, one64, Dtype::I64);
    let t_hi = a.bin(Opcode::Mul, tl1, trips64, Dtype::I64);
    let lo_g = a.bin(Opcode::Max, start, t_lo, Dtype::I64);
    let hi_g = a.bin(Opcode::Min, end, t_hi, Dtype::I64);
    let seg_lo64 = a.bin(Opcode::Sub, lo_g, t_lo, Dtype::I64);
    let seg_hi64 = a.bin(Opcode::Sub, hi_g, t_lo, Dtype::I64);
    let seg_lo_sk = a.cast(seg_lo64, Dtype::I32);
    let seg_hi_sk = a.cast(seg_hi64, Dtype::I32);
    let tl32 = a.cast(tl, Dtype::I32);
    let sk_tile = a.bin(Opcode::Add, dp_tiles, tl32, Dtype::I32);
    let tile = a.sel(is_dp, dp_tile, sk_tile, Dtype::I32);
    let zero_u = a.c32(0);
    let seg_lo = a.sel(is_dp, zero_u, seg_lo_sk, Dtype::I32);
    let seg_hi = a.sel(is_dp, trips, seg_hi_sk, Dtype::I32);
    // The finisher holds the tile's last iteration. Each range is at least I iterations long
    // (S > P), so it never lies inside one tile: a tile is whole in one program, or split
    // between two consecutive ones, p − 1 holding its first iterations (and opening its slot,
    // p − 1's) and p its last (the finisher), which waits for p − 1's signal.
    let finisher = a.cmp(CmpPred::Eq, seg_hi, trips);
    let zero_seg = a.c32(0);
    let prev = a.bin(Opcode::Sub, pid, one, Dtype::I32);
    let split = a.cmp(CmpPred::Gt, seg_lo, zero_seg);
    let seeded = a.bin(Opcode::And, finisher, split, Dtype::I1);

    // The tile's coordinates, the prologue, the K loop over [lo + seg_lo·step, min(hi, lo +
    // seg_hi·step)).
    let (coord, gq) = tile_coords(a.k, ub, tile, &grid);
    a.k.dfg.blocks[ub]
        .ops
        .extend(prologue_and_loop.iter().copied());
    replace_grid_queries(a.k, &prologue_and_loop, coord, &gq);
    let new_lo = {
        let scratch = a.k.dfg.new_block();
        let mut c = At { k: a.k, b: scratch };
        let off_lo = c.bin(Opcode::Mul, seg_lo, step, Dtype::I32);
        let nlo = c.bin(Opcode::Add, lo, off_lo, Dtype::I32);
        let off_hi = c.bin(Opcode::Mul, seg_hi, step, Dtype::I32);
        let lhi = c.bin(Opcode::Add, lo, off_hi, Dtype::I32);
        let nhi = c.bin(Opcode::Min, hi, lhi, Dtype::I32);
        edit::splice_ops(&mut c.k.dfg, ub, s.lp, scratch, false);
        (nlo, nhi)
    };
    a.k.dfg.ops[s.lp].operands[0] = new_lo.0;
    a.k.dfg.ops[s.lp].operands[1] = new_lo.1;
    let results = a.k.dfg.ops[s.lp].results.clone();

    // The finisher of a split tile starts its K loop from p − 1's partials (`if` it is one;
    // else from the loop's own initial values).
    let init_then = a.k.dfg.new_block();
    let w = mem_op(Opcode::SemWait, &names.flags, prev, 1, vec![one]);
    a.k.dfg.append_op(init_then, w, vec![]);
    let mut loaded = vec![];
    for (n, (_, shape)) in s.accs.iter().enumerate() {
        let ld = mem_op(
            Opcode::Load,
            &names.partials[n],
            prev,
            shape.len() + 1,
            vec![],
        );
        let id =
            a.k.dfg
                .append_op(init_then, ld, vec![(Type::tile(shape, Dtype::F32), None)]);
        loaded.push(a.k.dfg.ops[id].results[0]);
    }
    a.k.dfg
        .append_op(init_then, simple(Opcode::Yield, loaded, None), vec![]);
    let inits: Vec<Value> = s
        .accs
        .iter()
        .map(|(i, _)| a.k.dfg.ops[s.lp].operands[3 + i])
        .collect();
    let init_else = a.k.dfg.new_block();
    a.k.dfg
        .append_op(init_else, simple(Opcode::Yield, inits, None), vec![]);
    let init_types = s
        .accs
        .iter()
        .map(|(_, shape)| (Type::tile(shape, Dtype::F32), None))
        .collect();
    let init_if = edit::append_if(&mut a.k.dfg, ub, seeded, init_then, init_else, init_types);
    // Right before the K loop (after the prologue that defines the initial values).
    let moved = a.k.dfg.blocks[ub].ops.pop().expect("the seed `if`");
    let at = a.k.dfg.blocks[ub]
        .ops
        .iter()
        .position(|&o| o == s.lp)
        .expect("the K loop is in the unit body");
    a.k.dfg.blocks[ub].ops.insert(at, moved);
    let seeds = a.k.dfg.ops[init_if].results.clone();
    for (n, (i, _)) in s.accs.iter().enumerate() {
        a.k.dfg.ops[s.lp].operands[3 + i] = seeds[n];
    }

    // After the loop: the finisher runs the epilogue; the first part of a split tile is
    // stored into this program's slot, and signalled.
    let then = a.k.dfg.new_block();
    a.k.dfg.blocks[then].ops.extend(epilogue.iter().copied());
    replace_grid_queries(a.k, &epilogue, coord, &gq);
    a.k.dfg
        .append_op(then, simple(Opcode::Yield, vec![], None), vec![]);
    let els = a.k.dfg.new_block();
    for (n, (i, shape)) in s.accs.iter().enumerate() {
        let st = mem_op(
            Opcode::Store,
            &names.partials[n],
            pid,
            shape.len() + 1,
            vec![results[*i]],
        );
        a.k.dfg.append_op(els, st, vec![]);
    }
    let sig = mem_op(Opcode::SemSignal, &names.flags, pid, 1, vec![]);
    a.k.dfg.append_op(els, sig, vec![]);
    a.k.dfg
        .append_op(els, simple(Opcode::Yield, vec![], None), vec![]);
    edit::append_if(&mut a.k.dfg, ub, finisher, then, els, vec![]);
    a.k.dfg
        .append_op(ub, simple(Opcode::Yield, vec![], None), vec![]);
    let k = a.k;
    let mut f = simple(Opcode::For, vec![zero, n_units, one], None);
    f.regions = vec![ub];
    k.dfg.append_op(body, f, vec![]);
    k.dfg.blocks[body].ops.push(yield_op);

    // The temps as params, and the grid [min(T, P), 1, 1].
    for (n, (_, shape)) in s.accs.iter().enumerate() {
        let mut dims = vec![Expr::int(p_count)];
        dims.extend(shape.iter().map(|&d| Expr::int(d as i64)));
        k.params.push(kir_ir::Param::tensor(
            &names.partials[n],
            Access::InOut,
            Dtype::F32,
            dims,
        ));
    }
    k.params.push(kir_ir::Param::tensor(
        &names.flags,
        Access::InOut,
        Dtype::I32,
        vec![Expr::int(p_count)],
    ));
    let product = bin_expr(
        BinOp::Mul,
        bin_expr(BinOp::Mul, grid[0].clone(), grid[1].clone()),
        grid[2].clone(),
    );
    let min = Expr {
        kind: ExprKind::Call(Func::Min, vec![product, Expr::int(p_count)]),
        span: Span::default(),
    };
    k.grid = vec![min, Expr::int(1), Expr::int(1)];
}

/// Whether value `v` is `target` or feeds it through the body's scalar ops.
fn feeds(k: &Kernel, v: Value, target: Value) -> bool {
    if v == target {
        return true;
    }
    let Some(o) = edit::def_op(&k.dfg, target) else {
        return false;
    };
    k.dfg.ops[o].operands.iter().any(|&x| feeds(k, v, x))
}
