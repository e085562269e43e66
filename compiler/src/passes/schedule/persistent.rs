//! Persistent grids: a kernel whose body holds a loop (a mainloop over K or over key blocks) is
//! rewritten so that a fixed number of programs walk all of its tiles, instead of one program
//! per tile.
//!
//! Input: any kernel with a `for` among its top-level ops, a grid `[g0, g1, g2]` of integer
//! expressions (after specialization) and no scheduled IR yet. Output:
//! - the grid is `[min(g0 · g1 · g2, P), 1, 1]` for the requested program count P;
//! - the body computes g0, g1, g2 and their product T from the dims (exactly as the launch
//!   evaluates the grid, `grid::expr_value`), then runs
//!   `for %tile = program_id 0 to T step P { … }`, whose body decomposes the tile
//!   in grid order (axis 0 fastest: `x = tile mod g0`, `y = (tile div g0) mod g1`,
//!   `z = tile div (g0 · g1)`) and then runs the original body with every `program_id a`
//!   replaced by that coordinate and every `num_programs a` by `g_a`.
//!
//! So each tile is computed exactly once, by the same ops as before, and the result is the
//! same bit for bit (tests/tests/scheduling.rs runs it on the interpreter before and after).
//! Program p takes tiles p, p + P, p + 2P, … (with fewer than P tiles the grid has T
//! programs and each takes one): the P programs that run together take
//! consecutive tiles, as the grid's own order would. What it buys on a GPU: the next tile's
//! copies are issued while the current one's epilogue runs (with warp specialization the
//! producer simply continues its ring), and no program pays a launch, barrier set-up and ring
//! fill per tile. P is a compile-time choice (the target's SM count by default,
//! docs/passes.md); a device with fewer SMs runs the extra programs in a second wave.

use super::grid::{expr_value, lowerable};
use kir_ir::edit::{self, op2, simple};
use kir_ir::{
    Attr, BinOp, Block, Diagnostic, Diagnostics, Dtype, Expr, ExprKind, Func, Kernel, Module, Op,
    Opcode, Span, Type, Value,
};

/// Makes every qualifying kernel of `m` persistent over `programs` programs (see the module
/// doc). Kernels without a top-level loop, or that already hold scheduled IR, are unchanged.
/// `programs` must be at least 1. With `group`, the tiles are walked in groups of that many
/// rows of axis 1 ([`grouped_coords`]) instead of in grid order.
pub fn persistent(m: &Module, programs: u32, group: Option<u32>) -> Result<Module, Diagnostics> {
    if programs == 0 {
        return Err(Diagnostics(vec![Diagnostic::new(
            Span::default(),
            "a persistent grid needs at least one program".to_string(),
        )]));
    }
    let mut out = m.clone();
    for k in out.kernels.values_mut() {
        if qualifies(k) {
            kernel(k, programs, group);
            kir_ir::renumber::renumber_kernel(k);
        }
    }
    Ok(out)
}

/// Whether `k` is rewritten: a top-level `for`, a grid the body can compute, no scheduled IR (a
/// kernel already split into partitions or rings keeps its own schedule) and no semaphores.
pub fn qualifies(k: &Kernel) -> bool {
    let top = &k.dfg.blocks[k.body].ops;
    let has_loop = top.iter().any(|&o| k.dfg.ops[o].opcode == Opcode::For);
    let scheduled = k.dfg.ops.values().any(|d| {
        matches!(
            d.opcode,
            Opcode::SmemAlloc | Opcode::MbarAlloc | Opcode::WarpSpecialize
        )
    });
    // A program of a persistent grid runs several of the original programs, so a semaphore
    // wait of one of them may count on a later tile of its own program or of a later one (the
    // IR lets a program wait only for programs before it in grid order).
    let ordered = k
        .dfg
        .ops
        .values()
        .any(|d| matches!(d.opcode, Opcode::SemWait | Opcode::SemSignal));
    let one_tile = k.grid.iter().all(|e| e.as_int() == Some(1));
    has_loop
        && !scheduled
        && !ordered
        && !one_tile
        && k.grid.len() == 3
        && k.grid.iter().all(lowerable)
}

/// Appends `opc x` of scalar type `d` to block `b`.
pub(super) fn un(k: &mut Kernel, b: Block, opc: Opcode, x: Value, d: Dtype) -> Value {
    let id = k
        .dfg
        .append_op(b, simple(opc, vec![x], None), vec![(Type::scalar(d), None)]);
    k.dfg.ops[id].results[0]
}

/// Appends `program_id axis` or `num_programs axis` to block `b`.
pub(super) fn grid_query(k: &mut Kernel, b: Block, opc: Opcode, axis: i64) -> Value {
    let op = simple(opc, vec![], Some(Attr::Expr(Expr::int(axis))));
    let id = k
        .dfg
        .append_op(b, op, vec![(Type::scalar(Dtype::I32), None)]);
    k.dfg.ops[id].results[0]
}

/// The grid expression `a op b`.
pub(super) fn bin_expr(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr {
        kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
        span: Span::default(),
    }
}

/// Appends to block `b` the grid's tile counts (as i32, recomputed from the dims: cheap, and
/// not live across a tile's mainloop, where a warp-specialized consumer has no register to
/// spare) and the coordinates of `tile` in grid order (axis 0 fastest); returns
/// (coordinates, counts).
pub(super) fn tile_coords(
    k: &mut Kernel,
    b: Block,
    tile: Value,
    grid: &[Expr],
) -> ([Value; 3], Vec<Value>) {
    let mut g = vec![];
    for e in grid {
        let wide = expr_value(k, b, e);
        g.push(un(k, b, Opcode::Cast, wide, Dtype::I32));
    }
    let x = op2(k, b, Opcode::Rem, None, tile, g[0], Dtype::I32);
    let r = op2(k, b, Opcode::Div, None, tile, g[0], Dtype::I32);
    let y = op2(k, b, Opcode::Rem, None, r, g[1], Dtype::I32);
    let z = op2(k, b, Opcode::Div, None, r, g[1], Dtype::I32);
    ([x, y, z], g)
}

/// Replaces every `program_id a` among `ops` (at any depth) by `coord[a]` and every
/// `num_programs a` by `g[a]`, and removes those ops.
pub(super) fn replace_grid_queries(k: &mut Kernel, ops: &[Op], coord: [Value; 3], g: &[Value]) {
    let mut queries = vec![];
    let mut stack: Vec<Op> = ops.to_vec();
    while let Some(o) = stack.pop() {
        let d = &k.dfg.ops[o];
        for &rb in &d.regions {
            stack.extend(k.dfg.blocks[rb].ops.iter().copied());
        }
        if matches!(d.opcode, Opcode::ProgramId | Opcode::NumPrograms) {
            let axis = match &d.lead {
                Some(Attr::Expr(e)) => e.as_int().unwrap_or(0).clamp(0, 2) as usize,
                _ => 0,
            };
            queries.push((o, d.opcode, axis));
        }
    }
    for (o, opc, axis) in queries {
        let to = if opc == Opcode::ProgramId {
            coord[axis]
        } else {
            g[axis]
        };
        let from = k.dfg.ops[o].results[0];
        edit::replace_uses(&mut k.dfg, from, to, None);
        let blocks: Vec<Block> = k.dfg.blocks.keys().collect();
        for b in blocks {
            k.dfg.blocks[b].ops.retain(|&q| q != o);
        }
    }
}

/// Appends to block `b` the coordinates of `tile` when the tiles of each axis-2 slice are
/// walked in groups of `group` rows of axis 1: within a group, down its rows first, then to the
/// next column (`r = tile mod (g0 · g1)`, `first = (r div (group · g0)) · group`, `rows =
/// min(g1 − first, group)`, `y = first + (r mod (group · g0)) mod rows`, `x = (r mod (group ·
/// g0)) div rows`, `z = tile div (g0 · g1)`). A bijection of each slice's tiles, so every tile
/// is still computed once; the programs running together share fewer operand panels (a GEMM
/// grid's `group` rows of A and about P / `group` columns of B, where grid order shares a row
/// or two of A and every column of B). Returns (coordinates, counts) as [`tile_coords`] does.
pub(super) fn grouped_coords(
    k: &mut Kernel,
    b: Block,
    tile: Value,
    grid: &[Expr],
    group: u32,
) -> ([Value; 3], Vec<Value>) {
    let mut g = vec![];
    for e in grid {
        let wide = expr_value(k, b, e);
        g.push(un(k, b, Opcode::Cast, wide, Dtype::I32));
    }
    let i32_ = Dtype::I32;
    let slice = op2(k, b, Opcode::Mul, None, g[0], g[1], i32_);
    let z = op2(k, b, Opcode::Div, None, tile, slice, i32_);
    let r = op2(k, b, Opcode::Rem, None, tile, slice, i32_);
    let gr = edit::iconst(k, b, group as i64);
    let span = op2(k, b, Opcode::Mul, None, gr, g[0], i32_);
    let which = op2(k, b, Opcode::Div, None, r, span, i32_);
    let first = op2(k, b, Opcode::Mul, None, which, gr, i32_);
    let left = op2(k, b, Opcode::Sub, None, g[1], first, i32_);
    let rows = op2(k, b, Opcode::Min, None, left, gr, i32_);
    let within = op2(k, b, Opcode::Rem, None, r, span, i32_);
    let dy = op2(k, b, Opcode::Rem, None, within, rows, i32_);
    let y = op2(k, b, Opcode::Add, None, first, dy, i32_);
    let x = op2(k, b, Opcode::Div, None, within, rows, i32_);
    ([x, y, z], g)
}

/// Rewrites `k` onto a persistent grid of `programs` programs (see the module doc), its tiles in
/// groups of `group` rows when given.
pub(super) fn kernel(k: &mut Kernel, programs: u32, group: Option<u32>) {
    let body = k.body;
    let mut old = std::mem::take(&mut k.dfg.blocks[body].ops);
    let yield_op = old.pop().expect("a body ends with yield");
    // The grid's tile counts and their product, as the launch computes them.
    let grid = k.grid.clone();
    let mut top = vec![];
    for e in &grid {
        let wide = expr_value(k, body, e);
        top.push(un(k, body, Opcode::Cast, wide, Dtype::I32));
    }
    let g01 = op2(k, body, Opcode::Mul, None, top[0], top[1], Dtype::I32);
    let total = op2(k, body, Opcode::Mul, None, g01, top[2], Dtype::I32);
    let first = grid_query(k, body, Opcode::ProgramId, 0);
    // The step is P, a constant (no register): with fewer tiles than P the grid has one
    // program per tile, and each stops after its first.
    let step = kir_ir::edit::iconst(k, body, programs as i64);
    // The tile loop's body: the tile's coordinates, then the original body.
    let lb = k.dfg.new_block();
    let tile = k.dfg.add_block_arg(
        lb,
        Type::scalar(Dtype::I32),
        Some("tile".into()),
        Span::default(),
    );
    let (coord, g) = match group {
        // One row of tiles (or none to group): grid order is the grouped order.
        Some(gr) if gr > 1 && grid[1].as_int() != Some(1) => grouped_coords(k, lb, tile, &grid, gr),
        _ => tile_coords(k, lb, tile, &grid),
    };
    k.dfg.blocks[lb].ops.extend(old.iter().copied());
    replace_grid_queries(k, &old, coord, &g);
    k.dfg
        .append_op(lb, simple(Opcode::Yield, vec![], None), vec![]);
    let mut f = simple(Opcode::For, vec![first, total, step], None);
    f.regions = vec![lb];
    k.dfg.append_op(body, f, vec![]);
    k.dfg.blocks[body].ops.push(yield_op);
    // grid [min(g0 · g1 · g2, P), 1, 1]
    let product = bin_expr(
        BinOp::Mul,
        bin_expr(BinOp::Mul, grid[0].clone(), grid[1].clone()),
        grid[2].clone(),
    );
    let min = Expr {
        kind: ExprKind::Call(Func::Min, vec![product, Expr::int(programs as i64)]),
        span: Span::default(),
    };
    k.grid = vec![min, Expr::int(1), Expr::int(1)];
}
