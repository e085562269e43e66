//! The program runner: checks that a module is specialized, binds entry arguments (dims, dtype
//! conversion), allocates `out` tensors and temps, and runs launches in order, each over its
//! grid of program instances (in parallel or sequentially).

use super::exec::{Instance, LaunchCtx};
use super::memory::{contiguous_strides, Buffer};
use super::tile::{scalar_from_f64, Tile};
use super::{HostArg, HostTensor, InterpError, RunOptions};
use cranelift_entity::EntityRef;
use kir_ir::{Access, EvalVal, Expr, ExprKind, Kernel, Module, Op, Opcode, Param, ParamKind, Span, TensorType, Value};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most elements one tile may have (a guard against absurd shapes; real tiles are far smaller).
const MAX_TILE: usize = 1 << 26;

/// Runs the entry of `module`; see [`super::run_with`].
pub(crate) fn run_module(
    module: &Module,
    args: &BTreeMap<String, HostArg>,
    opts: &RunOptions,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    check_specialized(module)?;
    let (params, span) = match (&module.program, module.kernels.len()) {
        (Some(p), _) => (&p.params[..], p.span),
        (None, 1) => match module.kernels.values().next() {
            Some(k) => (&k.params[..], k.span),
            None => return Err(InterpError::new("the module has no kernel")),
        },
        (None, n) => {
            return Err(InterpError::new(format!("the module has no program and {n} kernels; it needs a program or exactly one kernel")))
        }
    };
    let mut env = bind_entry(params, args, span)?;
    match &module.program {
        Some(p) => {
            for t in &p.temps {
                if env.buffers.contains_key(&t.name) || env.scalars.contains_key(&t.name) {
                    return Err(InterpError::at(t.span, format!("temp `{}` has the name of a program param", t.name)));
                }
                let buf = alloc(&t.name, &t.ty, &env.dims, t.span)?;
                env.buffers.insert(t.name.clone(), Arc::new(buf));
            }
            for l in &p.launches {
                let (_, k) = module.kernel(&l.kernel).ok_or_else(|| InterpError::at(l.span, format!("no kernel `@{}`", l.kernel)))?;
                let mut tensors = BTreeMap::new();
                let mut scalars = BTreeMap::new();
                for b in &l.args {
                    let kp = k.param(&b.param).ok_or_else(|| InterpError::at(b.span, format!("`@{}` has no param `{}`", k.name, b.param)))?;
                    if tensors.contains_key(&b.param) || scalars.contains_key(&b.param) {
                        return Err(InterpError::at(b.span, format!("param `{}` is bound twice", b.param)));
                    }
                    match (&kp.kind, env.buffers.get(&b.arg), env.scalars.get(&b.arg)) {
                        (ParamKind::Tensor(acc, tt), Some(buf), _) => {
                            if tt.elem.known() != Some(buf.dtype) {
                                return Err(InterpError::at(b.span, format!("`{}` is tensor<{}> but `{}` holds {}", b.param, tt.elem, b.arg, buf.dtype)));
                            }
                            if acc.writes() && env.access.get(&b.arg) == Some(&Access::In) {
                                return Err(InterpError::at(b.span, format!("`{}` writes `{}`, an `in` param of the program", b.param, b.arg)));
                            }
                            tensors.insert(b.param.clone(), buf.clone());
                        }
                        (ParamKind::Scalar(e), _, Some(t)) => {
                            if e.known() != Some(t.dtype) {
                                return Err(InterpError::at(b.span, format!("`{}` is {e} but `{}` is {}", b.param, b.arg, t.dtype)));
                            }
                            scalars.insert(b.param.clone(), t.clone());
                        }
                        (_, None, None) => return Err(InterpError::at(b.span, format!("no program param or temp `{}`", b.arg))),
                        (ParamKind::Tensor(..), None, Some(_)) => return Err(InterpError::at(b.span, format!("tensor param `{}` is bound to scalar `{}`", b.param, b.arg))),
                        (ParamKind::Scalar(_), Some(_), None) => return Err(InterpError::at(b.span, format!("scalar param `{}` is bound to tensor `{}`", b.param, b.arg))),
                    }
                }
                if let Some(p) = k.params.iter().find(|p| !tensors.contains_key(&p.name) && !scalars.contains_key(&p.name)) {
                    return Err(InterpError::at(l.span, format!("launch of `@{}` does not bind param `{}`", k.name, p.name)));
                }
                let shapes = k.params.iter().filter_map(|p| match &p.kind {
                    ParamKind::Tensor(_, tt) => tensors.get(&p.name).map(|b| (p, tt, &b.shape[..])),
                    ParamKind::Scalar(_) => None,
                });
                let dims = bind_dims(shapes.collect(), &format!("launch of `@{}`", k.name))?;
                for p in &k.params {
                    if let (ParamKind::Tensor(_, tt), Some(buf)) = (&p.kind, tensors.get(&p.name)) {
                        let st = eval_strides(p, tt, &dims)?.unwrap_or_else(|| contiguous_strides(&buf.shape));
                        if st != buf.strides {
                            return Err(InterpError::at(p.span, format!("`{}` has strides {st:?} but `{}` is stored with strides {:?}", p.name, buf.name, buf.strides)));
                        }
                    }
                }
                run_kernel(k, tensors, scalars, dims, opts)?;
            }
        }
        None => {
            if let Some(k) = module.kernels.values().next() {
                run_kernel(k, env.buffers.clone(), env.scalars.clone(), env.dims.clone(), opts)?;
            }
        }
    }
    let mut out = BTreeMap::new();
    for p in params {
        if let ParamKind::Tensor(acc, _) = &p.kind {
            if acc.writes() {
                let buf = env.buffers.get(&p.name).ok_or_else(|| InterpError::new(format!("internal error: no buffer for `{}`", p.name)))?;
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
        let (Some(bd), Some(s)) = (k.dfg.blocks.get(b), seen.get_mut(b.index())) else { continue };
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
fn check_specialized(m: &Module) -> Result<(), InterpError> {
    if let Some(c) = m.consts.first() {
        let names: Vec<&str> = m.consts.iter().map(|c| c.name.as_str()).collect();
        return Err(InterpError::at(c.span, format!("the module still has constants ({}); specialize it before running", names.join(", "))));
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
                let mut e = InterpError::at(p.span, format!("param `{}` {what}; specialize the module before running", p.name));
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
            let Some(d) = k.dfg.values.get(v) else { continue };
            if !d.ty.is_concrete() {
                let msg = format!("kernel `{}`: value {v} has type `{}`, which is not concrete; specialize the module before running", k.name, d.ty);
                return Err(InterpError { message: msg, span: Some(d.span), kernel: Some(k.name.clone()) });
            }
        }
        if let Some(o) = ops.iter().filter_map(|&o| k.dfg.ops.get(o)).find(|o| o.opcode == Opcode::StaticIf) {
            let msg = format!("kernel `{}` still has a `static_if`; specialize the module before running", k.name);
            return Err(InterpError { message: msg, span: Some(o.span), kernel: Some(k.name.clone()) });
        }
    }
    if let Some(p) = &m.program {
        check_params(&p.params, None)?;
        if let Some(t) = p.temps.iter().find(|t| t.ty.elem.known().is_none()) {
            return Err(InterpError::at(t.span, format!("temp `{}` has an unresolved element type", t.name)));
        }
    }
    Ok(())
}

/// The entry's buffers, scalars, dims and the access of each tensor param.
struct EntryEnv {
    buffers: BTreeMap<String, Arc<Buffer>>,
    scalars: BTreeMap<String, Arc<Tile>>,
    dims: BTreeMap<String, i64>,
    access: BTreeMap<String, Access>,
}

fn lookup(dims: &BTreeMap<String, i64>) -> impl Fn(&str) -> Option<EvalVal> + '_ {
    move |s| dims.get(s).map(|&v| EvalVal::Int(v))
}

/// Binds entry arguments: dims from the shapes of `in`/`inout` tensors, converted data and
/// scalars, and poisoned `out` tensors allocated from their dim expressions.
fn bind_entry(params: &[Param], args: &BTreeMap<String, HostArg>, span: Span) -> Result<EntryEnv, InterpError> {
    if let Some(name) = args.keys().find(|a| !params.iter().any(|p| &p.name == *a)) {
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        return Err(InterpError::at(span, format!("unknown argument `{name}` (the entry params are: {})", names.join(", "))));
    }
    let mut given = Vec::new();
    for p in params {
        match (&p.kind, args.get(&p.name)) {
            (ParamKind::Tensor(Access::Out, _), Some(_)) => {
                return Err(InterpError::at(p.span, format!("`{}` is an `out` param: it takes no argument (its shape comes from the signature)", p.name)))
            }
            (ParamKind::Tensor(Access::Out, _), None) => {}
            (ParamKind::Tensor(_, tt), Some(HostArg::Tensor(t))) => given.push((p, tt, t)),
            (ParamKind::Tensor(..), Some(HostArg::Scalar(_))) => {
                return Err(InterpError::at(p.span, format!("`{}` is a tensor param but was given a scalar", p.name)))
            }
            (ParamKind::Scalar(_), Some(HostArg::Tensor(_))) => {
                return Err(InterpError::at(p.span, format!("`{}` is a scalar param but was given a tensor", p.name)))
            }
            (_, None) => return Err(InterpError::at(p.span, format!("missing argument `{}`", p.name))),
            (ParamKind::Scalar(_), Some(HostArg::Scalar(_))) => {}
        }
    }
    let dims = bind_dims(given.iter().map(|(p, tt, t)| (*p, *tt, &t.shape[..])).collect(), "the entry")?;
    let mut env = EntryEnv { buffers: BTreeMap::new(), scalars: BTreeMap::new(), dims, access: BTreeMap::new() };
    for p in params {
        match &p.kind {
            ParamKind::Tensor(acc, tt) => {
                let d = tt.elem.known().ok_or_else(|| InterpError::at(p.span, "unresolved element type"))?;
                let buf = match args.get(&p.name) {
                    Some(HostArg::Tensor(t)) => {
                        let st = eval_strides(p, tt, &env.dims)?;
                        Buffer::from_host(&p.name, d, t.shape.clone(), st, &t.data).map_err(|m| InterpError::at(p.span, m))?
                    }
                    _ => alloc(&p.name, tt, &env.dims, p.span)?,
                };
                env.access.insert(p.name.clone(), *acc);
                env.buffers.insert(p.name.clone(), Arc::new(buf));
            }
            ParamKind::Scalar(e) => {
                let d = e.known().ok_or_else(|| InterpError::at(p.span, "unresolved element type"))?;
                let x = match args.get(&p.name) {
                    Some(HostArg::Scalar(x)) => *x,
                    _ => return Err(InterpError::at(p.span, format!("missing argument `{}`", p.name))),
                };
                let s = scalar_from_f64(d, x).map_err(|m| InterpError::at(p.span, format!("scalar `{}`: {m}", p.name)))?;
                env.scalars.insert(p.name.clone(), Arc::new(Tile::scalar(d, s)));
            }
        }
    }
    Ok(env)
}

/// Binds identifier dims from `shapes` (the same name in several params must agree), then checks
/// every other dim expression against the given size.
fn bind_dims(shapes: Vec<(&Param, &TensorType, &[usize])>, what: &str) -> Result<BTreeMap<String, i64>, InterpError> {
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    let mut from: BTreeMap<String, &str> = BTreeMap::new();
    for &(p, tt, shape) in &shapes {
        if tt.dims.len() != shape.len() {
            return Err(InterpError::at(p.span, format!("{what}: `{}` has rank {} but its tensor has shape {shape:?}", p.name, tt.dims.len())));
        }
        for (e, &n) in tt.dims.iter().zip(shape) {
            if let ExprKind::Ident(name) = &e.kind {
                let n = i64::try_from(n).map_err(|_| InterpError::at(p.span, "dim too large"))?;
                match dims.get(name) {
                    Some(&old) if old != n => {
                        let msg = format!("{what}: dim `{name}` is {old} from `{}` but {n} from `{}`", from[name], p.name);
                        return Err(InterpError::at(e.span, msg));
                    }
                    Some(_) => {}
                    None => {
                        dims.insert(name.clone(), n);
                        from.insert(name.clone(), &p.name);
                    }
                }
            }
        }
    }
    for &(p, tt, shape) in &shapes {
        for (e, &n) in tt.dims.iter().zip(shape) {
            if !matches!(e.kind, ExprKind::Ident(_)) {
                let v = e.eval_int(&lookup(&dims)).map_err(|err| InterpError::at(e.span, format!("{what}: dim `{e}` of `{}`: {err}", p.name)))?;
                if v != n as i64 {
                    let msg = format!("{what}: `{}` needs dim `{e}` = {v} but its tensor has shape {shape:?}", p.name);
                    return Err(InterpError::at(e.span, msg));
                }
            }
        }
    }
    Ok(dims)
}

/// Evaluates a non-negative size expression over `dims`.
fn eval_size(e: &Expr, dims: &BTreeMap<String, i64>, what: &str) -> Result<usize, InterpError> {
    let v = e.eval_int(&lookup(dims)).map_err(|err| InterpError::at(e.span, format!("{what} `{e}`: {err}")))?;
    usize::try_from(v).map_err(|_| InterpError::at(e.span, format!("{what} `{e}` is {v}, which is negative")))
}

/// The strides of a tensor param evaluated over `dims` (`None`: C-contiguous).
fn eval_strides(p: &Param, tt: &TensorType, dims: &BTreeMap<String, i64>) -> Result<Option<Vec<usize>>, InterpError> {
    let Some(st) = &tt.strides else { return Ok(None) };
    if st.len() != tt.dims.len() {
        return Err(InterpError::at(p.span, format!("`{}` has {} dims but {} strides", p.name, tt.dims.len(), st.len())));
    }
    st.iter().map(|e| eval_size(e, dims, &format!("stride of `{}`", p.name))).collect::<Result<Vec<_>, _>>().map(Some)
}

/// A poisoned buffer for an `out` param or temp, its shape from its dim expressions.
fn alloc(name: &str, tt: &TensorType, dims: &BTreeMap<String, i64>, span: Span) -> Result<Buffer, InterpError> {
    let d = tt.elem.known().ok_or_else(|| InterpError::at(span, format!("`{name}` has an unresolved element type")))?;
    let mut shape = Vec::with_capacity(tt.dims.len());
    for e in &tt.dims {
        if let ExprKind::Ident(n) = &e.kind {
            if !dims.contains_key(n) {
                return Err(InterpError::at(e.span, format!("dim `{n}` of `{name}` is not bound by any input tensor")));
            }
        }
        shape.push(eval_size(e, dims, &format!("dim of `{name}`"))?);
    }
    let strides = match &tt.strides {
        Some(st) if st.len() != shape.len() => return Err(InterpError::at(span, format!("`{name}` has {} dims but {} strides", shape.len(), st.len()))),
        Some(st) => Some(st.iter().map(|e| eval_size(e, dims, &format!("stride of `{name}`"))).collect::<Result<Vec<_>, _>>()?),
        None => None,
    };
    Buffer::poisoned(name, d, shape, strides).map_err(|m| InterpError::at(span, m))
}

/// Runs one launch of `k`: checks `requires`, evaluates the grid and runs every program instance.
fn run_kernel(
    k: &Kernel,
    tensors: BTreeMap<String, Arc<Buffer>>,
    scalars: BTreeMap<String, Arc<Tile>>,
    dims: BTreeMap<String, i64>,
    opts: &RunOptions,
) -> Result<(), InterpError> {
    let kerr = |span: Span, msg: String| InterpError { message: format!("kernel `{}`: {msg}", k.name), span: Some(span), kernel: Some(k.name.clone()) };
    let dims_text = || dims.iter().map(|(n, v)| format!("{n} = {v}")).collect::<Vec<_>>().join(", ");
    for r in &k.requires {
        match r.eval(&lookup(&dims), false) {
            Ok(EvalVal::Bool(true)) => {}
            Ok(EvalVal::Int(i)) if i != 0 => {}
            Ok(_) => return Err(kerr(r.span, format!("requirement `{r}` does not hold ({})", dims_text()))),
            Err(e) => return Err(kerr(r.span, format!("cannot evaluate requirement `{r}`: {e}"))),
        }
    }
    if k.grid.len() != 3 {
        return Err(kerr(k.span, format!("the grid has {} expressions, expected 3", k.grid.len())));
    }
    let mut grid = [0i64; 3];
    for (g, e) in grid.iter_mut().zip(&k.grid) {
        *g = e.eval_int(&lookup(&dims)).map_err(|err| kerr(e.span, format!("grid `{e}`: {err}")))?;
        if !(0..=i32::MAX as i64).contains(g) {
            return Err(kerr(e.span, format!("grid `{e}` is {g}, outside [0, 2^31) ({})", dims_text())));
        }
    }
    let (ops, values) = reachable(k);
    let mut types = vec![None; k.dfg.values.len()];
    for v in values {
        let Some(d) = k.dfg.values.get(v) else { continue };
        match (d.ty.dtype(), d.ty.shape()) {
            (Some(_), Some(s)) if s.iter().try_fold(1usize, |a, &n| a.checked_mul(n)).is_none_or(|n| n > MAX_TILE) => {
                return Err(kerr(d.span, format!("value {v} has type `{}`, too large for the interpreter (at most {MAX_TILE} elements)", d.ty)))
            }
            (Some(dt), Some(s)) => types[v.index()] = Some((dt, s)),
            _ => return Err(kerr(d.span, format!("value {v} has type `{}`, which is not concrete", d.ty))),
        }
    }
    let atomic = ops.iter().filter_map(|&o| k.dfg.ops.get(o)).any(|o| o.opcode == Opcode::AtomicAdd);
    let ctx = LaunchCtx { kernel: k, types, tensors, scalars, dims, grid };
    let [gx, gy, gz] = grid.map(|g| g as usize);
    let total = gx.checked_mul(gy).and_then(|n| n.checked_mul(gz)).ok_or_else(|| kerr(k.span, "the grid is too large".into()))?;
    let run_one = |lin: usize| -> Result<(), InterpError> {
        let pid = [(lin % gx) as i64, ((lin / gx) % gy) as i64, (lin / (gx * gy)) as i64];
        Instance::new(&ctx, pid).run()
    };
    if opts.parallel && !atomic {
        if let Some(e) = (0..total).into_par_iter().map(run_one).filter_map(Result::err).find_first(|_| true) {
            return Err(e);
        }
    } else {
        (0..total).try_for_each(run_one)?;
    }
    Ok(())
}
