//! Global bytes moved and tensor-core FLOPs of a program: the byte estimate of the `fusion`
//! pass and its report, and the work that `crate::cost` turns into time.
//!
//! For every launch, every load, store and atomic in its kernel moves its whole tile (the bytes
//! issued, masked or not) once per program instance of the grid and per iteration of each
//! enclosing `for`. Loop trip counts come from bounds built of constants, dims and integer
//! arithmetic; anything else makes the estimate unknown (`None`).

use kir_ir::{
    Block, Dfg, EvalVal, Kernel, Launch, Module, Opcode, ParamKind, Program, Value, ValueDef,
};

/// Bytes moved by `m`'s program (or its single kernel) with program dims from `dim`.
pub fn bytes_moved(m: &Module, dim: &dyn Fn(&str) -> Option<i64>) -> Option<u64> {
    let Some(p) = &m.program else {
        let k = m.kernels.values().next()?;
        return kernel_bytes(k, dim);
    };
    let mut total = 0u64;
    for l in &p.launches {
        let (_, k) = m.kernel(&l.kernel)?;
        total += launch_bytes(p, l, k, dim)?;
    }
    Some(total)
}

/// Bytes moved by launch `l` of program `p`, running kernel `k`, with program dims from `dim`
/// (each kernel dim takes the value of the program dim of the buffer bound to it).
pub fn launch_bytes(
    p: &Program,
    l: &Launch,
    k: &Kernel,
    dim: &dyn Fn(&str) -> Option<i64>,
) -> Option<u64> {
    per_launch(p, l, k, dim, kernel_bytes)
}

/// `count` of kernel `k` with its dims bound as launch `l` of program `p` binds them.
fn per_launch(
    p: &Program,
    l: &Launch,
    k: &Kernel,
    dim: &dyn Fn(&str) -> Option<i64>,
    count: fn(&Kernel, &dyn Fn(&str) -> Option<i64>) -> Option<u64>,
) -> Option<u64> {
    let dims = launch_dims(p, l, k, dim)?;
    let lookup = |n: &str| dims.iter().find(|(d, _)| d == n).map(|&(_, v)| v);
    count(k, &lookup)
}

/// Each kernel dim of launch `l` with the value of the program dim of the buffer bound to it.
fn launch_dims(
    p: &Program,
    l: &Launch,
    k: &Kernel,
    dim: &dyn Fn(&str) -> Option<i64>,
) -> Option<Vec<(String, i64)>> {
    // Kernel dim → program dim value, through the bound buffers' declared dims.
    let mut dims: Vec<(String, i64)> = vec![];
    for a in &l.args {
        let Some(ParamKind::Tensor(_, kt)) = k.param(&a.param).map(|x| &x.kind) else {
            continue;
        };
        let bt = p
            .params
            .iter()
            .find_map(|x| match &x.kind {
                ParamKind::Tensor(_, t) if x.name == a.arg => Some(t.clone()),
                _ => None,
            })
            .or_else(|| {
                p.temps
                    .iter()
                    .find(|t| t.name == a.arg)
                    .map(|t| t.ty.clone())
            })?;
        for (kd, bd) in kt.dims.iter().zip(&bt.dims) {
            let v = bd.eval_int(&|n| dim(n).map(EvalVal::Int)).ok()?;
            dims.push((format!("{kd}"), v));
        }
    }
    Some(dims)
}

/// Bytes moved by one launch of `k` with its dims from `dim`.
pub fn kernel_bytes(k: &Kernel, dim: &dyn Fn(&str) -> Option<i64>) -> Option<u64> {
    kernel_sum(k, dim, &op_bytes)
}

/// Tensor-core work of one launch of `k` with its dims from `dim`: 2·m·n·k FLOPs per `dot`
/// executed (a batched dot counts each of its batch entries).
pub fn kernel_dot_flops(k: &Kernel, dim: &dyn Fn(&str) -> Option<i64>) -> Option<u64> {
    kernel_sum(k, dim, &op_dot_flops)
}

/// Dot FLOPs of launch `l` of program `p` (dims bound as in [`launch_bytes`]).
pub fn launch_dot_flops(
    p: &Program,
    l: &Launch,
    k: &Kernel,
    dim: &dyn Fn(&str) -> Option<i64>,
) -> Option<u64> {
    per_launch(p, l, k, dim, kernel_dot_flops)
}

/// Bytes of the tensors a launch's kernel binds (each once, however often its tiles are
/// issued): what reaches memory when the caches serve every re-read. Dims from `dim` as in
/// [`launch_bytes`]; a kernel alone (no program) binds its own tensor params.
pub fn kernel_footprint(k: &Kernel, dim: &dyn Fn(&str) -> Option<i64>) -> Option<u64> {
    let mut total = 0u64;
    for p in &k.params {
        let ParamKind::Tensor(_, t) = &p.kind else {
            continue;
        };
        let mut n = t.elem.known()?.size_bytes() as u64;
        for d in &t.dims {
            n = n.checked_mul(d.eval_int(&|x| dim(x).map(EvalVal::Int)).ok()?.max(0) as u64)?;
        }
        total = total.checked_add(n)?;
    }
    Some(total)
}

/// [`kernel_footprint`] of launch `l` of program `p`.
pub fn launch_footprint(
    p: &Program,
    l: &Launch,
    k: &Kernel,
    dim: &dyn Fn(&str) -> Option<i64>,
) -> Option<u64> {
    per_launch(p, l, k, dim, kernel_footprint)
}

/// What one op counts, once per execution.
type PerOp = dyn Fn(&Dfg, &kir_ir::OpData) -> Option<u64>;

/// `per_op` summed over every op executed by one launch of `k`: once per program of its grid
/// and per trip of each enclosing `for`.
fn kernel_sum(k: &Kernel, dim: &dyn Fn(&str) -> Option<i64>, per_op: &PerOp) -> Option<u64> {
    let mut grid = 1u64;
    for g in &k.grid {
        grid = grid.checked_mul(g.eval_int(&|n| dim(n).map(EvalVal::Int)).ok()?.max(0) as u64)?;
    }
    grid.checked_mul(block_sum(&k.dfg, k.body, dim, per_op)?)
}

/// Bytes a load, store or atomic moves: its whole tile.
fn op_bytes(d: &Dfg, od: &kir_ir::OpData) -> Option<u64> {
    match od.opcode {
        Opcode::Load => tile_bytes(d, od.results[0]),
        Opcode::Store | Opcode::AtomicAdd => tile_bytes(d, od.operands[0]),
        _ => Some(0),
    }
}

/// FLOPs of a `dot`: 2 · (elements of its result) · (its operands' reduction depth).
fn op_dot_flops(d: &Dfg, od: &kir_ir::OpData) -> Option<u64> {
    if od.opcode != Opcode::Dot {
        return Some(0);
    }
    let out: usize = d.ty(od.results[0]).shape()?.iter().product();
    let depth = *d.ty(od.operands[0]).shape()?.last()?;
    (2 * out as u64).checked_mul(depth as u64)
}

fn block_sum(d: &Dfg, b: Block, dim: &dyn Fn(&str) -> Option<i64>, per_op: &PerOp) -> Option<u64> {
    let mut total = 0u64;
    for &o in &d.blocks[b].ops {
        let od = &d.ops[o];
        match od.opcode {
            Opcode::For => {
                let lo = scalar(d, od.operands[0], dim)?;
                let hi = scalar(d, od.operands[1], dim)?;
                let step = scalar(d, od.operands[2], dim)?;
                if step <= 0 {
                    return None;
                }
                // Checked: loop bounds from constants may be anything; overflow is unknown.
                let trips = if hi > lo {
                    hi.checked_sub(lo)?.checked_add(step - 1)? / step
                } else {
                    0
                };
                let body = (trips as u64).checked_mul(block_sum(d, od.regions[0], dim, per_op)?)?;
                total = total.checked_add(body)?;
            }
            Opcode::If => {
                // The larger branch: an upper bound.
                let mut best = 0;
                for &r in &od.regions {
                    best = best.max(block_sum(d, r, dim, per_op)?);
                }
                total = total.checked_add(best)?;
            }
            _ => total = total.checked_add(per_op(d, od)?)?,
        }
    }
    Some(total)
}

fn tile_bytes(d: &Dfg, v: Value) -> Option<u64> {
    let t = d.ty(v);
    let n: usize = t.shape()?.iter().product();
    Some((n * t.dtype()?.size_bytes()) as u64)
}

/// The value of an integer scalar built from constants, dims and + − × ÷.
fn scalar(d: &Dfg, v: Value, dim: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
    let ValueDef::Result(o, _) = d.values[v].def else {
        return None;
    };
    let od = &d.ops[o];
    let arg = |i: usize| scalar(d, od.operands[i], dim);
    match (od.opcode, &od.lead) {
        (Opcode::Const, Some(kir_ir::Attr::Expr(e))) => e.as_int(),
        (Opcode::Dim, Some(kir_ir::Attr::Name(n, _))) => dim(n),
        // Checked: an i64 constant may be anything; an overflow is an unknown value.
        (Opcode::Add, _) => arg(0)?.checked_add(arg(1)?),
        (Opcode::Sub, _) => arg(0)?.checked_sub(arg(1)?),
        (Opcode::Mul, _) => arg(0)?.checked_mul(arg(1)?),
        (Opcode::Div, _) => arg(0)?.checked_div(arg(1)?),
        _ => None,
    }
}
