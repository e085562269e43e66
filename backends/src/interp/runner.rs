//! The program runner: checks that a module is specialized, binds entry arguments (dims, dtype
//! conversion), allocates `out` tensors and temps, and runs launches in order, each over its
//! grid of program instances (in parallel or sequentially).

use super::bind::{alloc, bind_entry, bind_launch, host_buffer, lookup};
use super::exec::{Instance, LaunchCtx};
use super::memory::Buffer;
use super::progress::Progress;
use super::tile::Tile;
use super::{HostArg, HostTensor, InterpError, RunOptions};
use cranelift_entity::EntityRef;
use kir_ir::{EvalVal, Kernel, Module, Op, Opcode, Param, ParamKind, Span, Value};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
/// Most elements one tile may have (a guard against absurd shapes; real tiles are far smaller).
const MAX_TILE: usize = 1 << 26;

/// Runs the entry of `module`; see [`super::run_with`]. With `progress`, each launch and each
/// finished program instance is counted there.
pub(crate) fn run_module(
    module: &Module,
    args: &BTreeMap<String, HostArg>,
    opts: &RunOptions,
    out: &mut dyn std::io::Write,
    progress: Option<&Progress>,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    check_specialized(module)?;
    let (params, span) = match (&module.program, module.kernels.len()) {
        (Some(p), _) => (&p.params[..], p.span),
        (None, 1) => match module.kernels.values().next() {
            Some(k) => (&k.params[..], k.span),
            None => return Err(InterpError::new("the module has no kernel")),
        },
        (None, n) => {
            return Err(InterpError::new(format!(
            "the module has no program and {n} kernels; it needs a program or exactly one kernel"
        )))
        }
    };
    let entry_kernel = module
        .program
        .is_none()
        .then(|| module.kernels.values().next().map(|k| k.name.clone()))
        .flatten();
    let mut env = bind_entry(params, args, span, &mut host_buffer).map_err(|mut e| {
        e.kernel = e.kernel.or(entry_kernel);
        e
    })?;
    match &module.program {
        Some(p) => {
            for t in &p.temps {
                if env.buffers.contains_key(&t.name) || env.scalars.contains_key(&t.name) {
                    return Err(InterpError::at(
                        t.span,
                        format!("temp `{}` has the name of a program param", t.name),
                    ));
                }
                let buf = alloc(&t.name, &t.ty, &env.dims, t.span, &mut host_buffer)?;
                env.buffers.insert(t.name.clone(), Arc::new(buf));
            }
            if let Some(pr) = progress {
                pr.set_launches(p.launches.len());
            }
            for (i, l) in p.launches.iter().enumerate() {
                let (_, k) = module
                    .kernel(&l.kernel)
                    .ok_or_else(|| InterpError::at(l.span, format!("no kernel `@{}`", l.kernel)))?;
                let (tensors, scalars, dims) = bind_launch(k, l, &env).map_err(|mut e| {
                    e.kernel.get_or_insert_with(|| k.name.clone());
                    e
                })?;
                let launch = Launch {
                    index: i + 1,
                    progress,
                };
                run_kernel(k, tensors, scalars, dims, opts, out, launch)?;
            }
        }
        None => {
            if let Some(k) = module.kernels.values().next() {
                if let Some(pr) = progress {
                    pr.set_launches(1);
                }
                run_kernel(
                    k,
                    env.buffers.clone(),
                    env.scalars.clone(),
                    env.dims.clone(),
                    opts,
                    out,
                    Launch { index: 1, progress },
                )?;
            }
        }
    }
    let mut out = BTreeMap::new();
    for p in params {
        if let ParamKind::Tensor(acc, _) = &p.kind {
            if acc.writes() {
                let buf = env.buffers.get(&p.name).ok_or_else(|| {
                    InterpError::new(format!("internal error: no buffer for `{}`", p.name))
                })?;
                out.insert(p.name.clone(), buf.to_host().map_err(InterpError::new)?);
            }
        }
    }
    Ok(out)
}
/// The ops and values reachable from the kernel body (ops left detached in the arenas by a
/// pass are ignored). Dangling references are skipped; each block is visited once.
fn reachable(k: &Kernel) -> (Vec<Op>, Vec<Value>) {
    let (mut ops, mut values) = (Vec::new(), Vec::new());
    let mut seen = vec![false; k.dfg.blocks.len()];
    let mut stack = vec![k.body];
    while let Some(b) = stack.pop() {
        let (Some(bd), Some(s)) = (k.dfg.blocks.get(b), seen.get_mut(b.index())) else {
            continue;
        };
        if std::mem::replace(s, true) {
            continue;
        }
        values.extend_from_slice(&bd.args);
        for &o in &bd.ops {
            if let Some(od) = k.dfg.ops.get(o) {
                ops.push(o);
                values.extend_from_slice(&od.results);
                stack.extend_from_slice(&od.regions);
            }
        }
    }
    (ops, values)
}

/// Rejects a module that is not fully specialized (looking only at what the body reaches).
pub(crate) fn check_specialized(m: &Module) -> Result<(), InterpError> {
    if let Some(c) = m.consts.first() {
        let names: Vec<&str> = m.consts.iter().map(|c| c.name.as_str()).collect();
        return Err(InterpError::at(
            c.span,
            format!(
                "the module still has constants ({}); specialize it before running",
                names.join(", ")
            ),
        ));
    }
    let check_params = |ps: &[Param], kernel: Option<&str>| -> Result<(), InterpError> {
        for p in ps {
            let elem = match &p.kind {
                ParamKind::Tensor(_, tt) => &tt.elem,
                ParamKind::Scalar(e) => e,
            };
            let problem = if p.cond.is_some() {
                Some("still has a condition")
            } else if elem.known().is_none() {
                Some("has an unresolved element type")
            } else {
                None
            };
            if let Some(what) = problem {
                let mut e = InterpError::at(
                    p.span,
                    format!(
                        "param `{}` {what}; specialize the module before running",
                        p.name
                    ),
                );
                e.kernel = kernel.map(str::to_string);
                return Err(e);
            }
        }
        Ok(())
    };
    for k in m.kernels.values() {
        check_params(&k.params, Some(&k.name))?;
        let (ops, values) = reachable(k);
        for v in values {
            let Some(d) = k.dfg.values.get(v) else {
                continue;
            };
            if !d.ty.is_concrete() {
                let msg = format!("kernel `{}`: value {v} has type `{}`, which is not concrete; specialize the module before running", k.name, d.ty);
                return Err(InterpError {
                    message: msg,
                    span: Some(d.span),
                    kernel: Some(k.name.clone()),
                });
            }
        }
        if let Some(o) = ops
            .iter()
            .filter_map(|&o| k.dfg.ops.get(o))
            .find(|o| o.opcode == Opcode::StaticIf)
        {
            let msg = format!(
                "kernel `{}` still has a `static_if`; specialize the module before running",
                k.name
            );
            return Err(InterpError {
                message: msg,
                span: Some(o.span),
                kernel: Some(k.name.clone()),
            });
        }
    }
    if let Some(p) = &m.program {
        check_params(&p.params, None)?;
        if let Some(t) = p.temps.iter().find(|t| t.ty.elem.known().is_none()) {
            return Err(InterpError::at(
                t.span,
                format!("temp `{}` has an unresolved element type", t.name),
            ));
        }
    }
    Ok(())
}
/// Checks the `requires` of `k` over its launch `dims` and scalar arguments (`scale > 0.0`) and
/// evaluates its grid (over the dims only): each dimension in [0, 2^31). Shared by the
/// interpreter and the GPU runtime.
pub(crate) fn launch_grid(
    k: &Kernel,
    dims: &BTreeMap<String, i64>,
    scalars: &BTreeMap<String, Arc<Tile>>,
) -> Result<[i64; 3], InterpError> {
    let kerr = |span: Span, msg: String| InterpError {
        message: format!("kernel `{}`: {msg}", k.name),
        span: Some(span),
        kernel: Some(k.name.clone()),
    };
    let dims_text = || {
        dims.iter()
            .map(|(n, v)| format!("{n} = {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let scalar = |n: &str| {
        scalars.get(n).and_then(|t| t.data.get(0)).map(|x| match x {
            crate::interp::tile::Scalar::F(f) => EvalVal::Float(f as f64),
            crate::interp::tile::Scalar::I(i) => EvalVal::Int(i),
            crate::interp::tile::Scalar::B(b) => EvalVal::Bool(b),
        })
    };
    let dims_only = lookup(dims);
    let with_scalars = |n: &str| dims_only(n).or_else(|| scalar(n));
    // The message shows every dim, and the value of each scalar the requirement names.
    let values_text = |r: &kir_ir::Expr| {
        let mut named = Vec::new();
        idents(r, &mut named);
        let mut shown = vec![dims_text()];
        shown.extend(
            named
                .iter()
                .filter(|n| !dims.contains_key(*n))
                .filter_map(|n| scalar(n).map(|v| format!("{n} = {v}"))),
        );
        shown.retain(|t| !t.is_empty());
        shown.join(", ")
    };
    for r in &k.requires {
        match r.eval(&with_scalars, false) {
            Ok(EvalVal::Bool(true)) => {}
            Ok(EvalVal::Int(i)) if i != 0 => {}
            Ok(_) => {
                return Err(kerr(
                    r.span,
                    format!("requirement `{r}` does not hold ({})", values_text(r)),
                ))
            }
            Err(e) => {
                return Err(kerr(
                    r.span,
                    format!("cannot evaluate requirement `{r}`: {e}"),
                ))
            }
        }
    }
    if k.grid.len() != 3 {
        return Err(kerr(
            k.span,
            format!("the grid has {} expressions, expected 3", k.grid.len()),
        ));
    }
    let mut grid = [0i64; 3];
    for (axis, (g, e)) in grid.iter_mut().zip(&k.grid).enumerate() {
        *g = e
            .eval_int(&lookup(dims))
            .map_err(|err| kerr(e.span, format!("grid `{e}`: {err}")))?;
        // CUDA's limits (x < 2^31, y and z ≤ 65535), checked before any program runs.
        let max = kir_ir::verifier::limits::MAX_GRID[axis];
        if !(0..=max).contains(g) {
            let name = ["x", "y", "z"][axis];
            return Err(kerr(
                e.span,
                format!(
                    "grid `{e}` (axis {name}) is {g}, outside [0, {max}] ({})",
                    dims_text()
                ),
            ));
        }
    }
    Ok(grid)
}

/// The identifiers of `e`, in order (with repeats).
fn idents(e: &kir_ir::Expr, out: &mut Vec<String>) {
    match &e.kind {
        kir_ir::ExprKind::Ident(n) => out.push(n.clone()),
        kir_ir::ExprKind::Int(_) | kir_ir::ExprKind::Float(_) => {}
        kir_ir::ExprKind::Unary(_, a) => idents(a, out),
        kir_ir::ExprKind::Binary(_, a, b) => {
            idents(a, out);
            idents(b, out);
        }
        kir_ir::ExprKind::Call(_, args) => args.iter().for_each(|a| idents(a, out)),
    }
}

/// Which launch of the entry a [`run_kernel`] is, and where to count its progress.
struct Launch<'a> {
    /// From 1.
    index: usize,
    progress: Option<&'a Progress>,
}

/// Runs one launch of `k`: checks `requires`, evaluates the grid and runs every program instance.
fn run_kernel(
    k: &Kernel,
    tensors: BTreeMap<String, Arc<Buffer>>,
    scalars: BTreeMap<String, Arc<Tile>>,
    dims: BTreeMap<String, i64>,
    opts: &RunOptions,
    out: &mut dyn std::io::Write,
    launch: Launch<'_>,
) -> Result<(), InterpError> {
    let grid = launch_grid(k, &dims, &scalars)?;
    let kerr = |span: Span, msg: String| InterpError {
        message: format!("kernel `{}`: {msg}", k.name),
        span: Some(span),
        kernel: Some(k.name.clone()),
    };
    let (ops, values) = reachable(k);
    let mut types = vec![None; k.dfg.values.len()];
    for v in values {
        let Some(d) = k.dfg.values.get(v) else {
            continue;
        };
        match (d.ty.dtype(), d.ty.shape()) {
            (Some(_), Some(s)) if s.iter().try_fold(1usize, |a, &n| a.checked_mul(n)).is_none_or(|n| n > MAX_TILE) => {
                return Err(kerr(d.span, format!("value {v} has type `{}`, too large for the interpreter (at most {MAX_TILE} elements)", d.ty)))
            }
            (Some(dt), Some(s)) => types[v.index()] = Some((dt, s)),
            _ => return Err(kerr(d.span, format!("value {v} has type `{}`, which is not concrete", d.ty))),
        }
    }
    let atomic = ops.iter().filter_map(|&o| k.dfg.ops.get(o)).any(|o| {
        matches!(
            o.opcode,
            Opcode::AtomicAdd | Opcode::SemWait | Opcode::SemSignal
        )
    });
    let ctx = LaunchCtx {
        kernel: k,
        types,
        tensors,
        scalars,
        dims,
        grid,
        seed: opts.seed,
        // The CTAs per cluster (`warp_specialize … cluster N`; 1 without).
        cluster: k
            .dfg
            .ops
            .values()
            .find(|od| od.opcode == Opcode::WarpSpecialize)
            .and_then(|od| match od.attr("cluster") {
                Some(kir_ir::Attr::Expr(e)) => e.as_int(),
                _ => None,
            })
            .unwrap_or(1)
            .max(1),
        shared_copies: Default::default(),
    };
    let [gx, gy, gz] = grid.map(|g| g as usize);
    let total = gx
        .checked_mul(gy)
        .and_then(|n| n.checked_mul(gz))
        .ok_or_else(|| kerr(k.span, "the grid is too large".into()))?;
    if let Some(pr) = launch.progress {
        pr.start_launch(launch.index, total);
    }
    let counted = |r| {
        if let Some(pr) = launch.progress {
            pr.program_done();
        }
        r
    };
    let pid_of = |lin: usize| {
        [
            (lin % gx) as i64,
            ((lin / gx) % gy) as i64,
            (lin / (gx * gy)) as i64,
        ]
    };
    let prints = ops
        .iter()
        .filter_map(|&o| k.dfg.ops.get(o))
        .any(|o| o.opcode == Opcode::Print);
    if prints {
        // Each instance's lines, then its result; written in program order up to a failure.
        let run_one = |lin: usize| {
            let mut inst = Instance::new(&ctx, pid_of(lin));
            let r = counted(inst.run());
            (inst.take_output(), r)
        };
        let done: Vec<(String, Result<(), InterpError>)> = if opts.parallel && !atomic {
            (0..total).into_par_iter().map(run_one).collect()
        } else {
            let mut v = Vec::with_capacity(total);
            for lin in 0..total {
                let one = run_one(lin);
                let failed = one.1.is_err();
                v.push(one);
                if failed {
                    break;
                }
            }
            v
        };
        for (text, r) in done {
            out.write_all(text.as_bytes())
                .map_err(|e| kerr(k.span, format!("cannot write the output of `print`: {e}")))?;
            r?;
        }
        out.flush()
            .map_err(|e| kerr(k.span, format!("cannot write the output of `print`: {e}")))?;
        return Ok(());
    }
    let run_one =
        |lin: usize| -> Result<(), InterpError> { counted(Instance::new(&ctx, pid_of(lin)).run()) };
    if opts.parallel && !atomic {
        if let Some(e) = (0..total)
            .into_par_iter()
            .map(run_one)
            .filter_map(Result::err)
            .find_first(|_| true)
        {
            return Err(e);
        }
    } else {
        (0..total).try_for_each(run_one)?;
    }
    every_shared_copy_made_by_the_whole_cluster(&ctx)
}

/// After a launch: every `multicast` copy was made by every program of its cluster as often
/// (a program that made a copy its peer never made would wait forever for the peer's share).
fn every_shared_copy_made_by_the_whole_cluster(ctx: &LaunchCtx) -> Result<(), InterpError> {
    let k = ctx.kernel;
    let cluster = ctx.cluster;
    let kerr = |msg: String| InterpError {
        message: format!("kernel `{}`: {msg}", k.name),
        span: Some(k.span),
        kernel: Some(k.name.clone()),
    };
    let seen = ctx
        .shared_copies
        .lock()
        .map_err(|_| kerr("internal: a poisoned lock".into()))?;
    match seen.iter().find(|(_, v)| v.2 != cluster as usize) {
        None => Ok(()),
        Some(((_, first, nth), v)) => Err(kerr(format!(
            "copy {nth} of a `multicast` copy was made by {} of the {cluster} programs of the \
                 cluster from {first:?}: its CTAs would wait for each other's share",
            v.2
        ))),
    }
}
