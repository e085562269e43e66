//! The op dispatcher: runs one program instance of a kernel, op by op, over an environment of
//! runtime values indexed by SSA value.
//!
//! [`Instance::exec`] holds the one exhaustive `match` over [`Opcode`]. Every failure becomes an
//! [`InterpError`] carrying the op's span, the kernel name and the program id.

use super::math;
use super::memory::Buffer;
use super::reduce;
use super::sched::Sched;
use super::shape;
use super::tile::{class, convert, scalar_from_i64, type_name, Class, Scalar, Tile};
use super::InterpError;
use cranelift_entity::EntityRef;
use kir_ir::{Attr, Block, Dtype, EvalVal, Kernel, Op, OpData, Opcode, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Everything one launch of a kernel shares between its program instances (read-only, `Sync`).
pub(crate) struct LaunchCtx<'a> {
    /// The kernel being launched.
    pub kernel: &'a Kernel,
    /// Concrete dtype and shape of every value reachable from the body, indexed by value number
    /// (`None` for values the body does not reach).
    pub types: Vec<Option<(Dtype, Vec<usize>)>>,
    /// Kernel tensor param name → bound buffer.
    pub tensors: BTreeMap<String, Arc<Buffer>>,
    /// Kernel scalar param name → its value.
    pub scalars: BTreeMap<String, Arc<Tile>>,
    /// Kernel dim name → size.
    pub dims: BTreeMap<String, i64>,
    /// Grid size along axes 0, 1, 2 (each in [0, 2^31)).
    pub grid: [i64; 3],
    /// Seed of the scheduled-IR scheduler (one interleaving of partitions and copies per seed).
    pub seed: u64,
    /// The CTAs per cluster along grid axis 0 (`warp_specialize … cluster N`; 1 without).
    pub cluster: i64,
    /// The `multicast` copies made so far, by (the op's address, the first program id of its
    /// cluster, the how-manieth execution of the op in that program): whether the copy was
    /// shared and its element offsets, as the first program of the cluster to make it saw them.
    /// The other program's must be the same (memops.rs, `check_shared_copy`).
    pub shared_copies: Mutex<SharedCopies>,
}

/// [`LaunchCtx::shared_copies`]: (op address, cluster's first program id, occurrence) →
/// (shared, offsets, how many programs of the cluster made it).
pub(crate) type SharedCopies = HashMap<(usize, [i64; 3], usize), (bool, Vec<i64>, usize)>;

/// What executing one op means for the enclosing block.
pub(super) enum Flow {
    /// Go on with the next op.
    Next,
    /// The block ends here with these values.
    Yield(Vec<Arc<Tile>>),
}

/// One program instance: its id and its value environment.
pub(crate) struct Instance<'a> {
    pub(super) ctx: &'a LaunchCtx<'a>,
    pub(super) pid: [i64; 3],
    pub(super) env: Vec<Option<Arc<Tile>>>,
    /// The scheduled-IR runtime, made at the first scheduling op (shared by partitions).
    pub(super) sched: Option<Arc<Sched>>,
    /// This partition's task id in `sched` (0: the kernel body).
    pub(super) task: usize,
    /// Tiles read from a stage by `smem_read`: value → (buffer, stage).
    pub(super) origins: HashMap<Value, (Value, usize)>,
    /// `dot_async` results not yet bound by `dot_wait`.
    pub(super) pending_dots: HashMap<Value, Arc<Tile>>,
    /// What `print` ops wrote in this program instance (shared with its partitions).
    pub(super) out: Arc<Mutex<String>>,
    /// How often this partition has made each `multicast` copy (by the op's address).
    pub(super) copies_made: HashMap<usize, usize>,
}

/// Evaluates a closed constant expression (a literal after specialization).
pub(super) fn eval_const(e: &kir_ir::Expr) -> Result<EvalVal, String> {
    e.eval(&|_| None, false)
        .map_err(|err| format!("cannot evaluate `{e}`: {err}"))
}

/// Converts a literal (`const`, `other`) to dtype `d`. Floats go through f32 and round to the
/// dtype (as every op producing f16/bf16 computes in f32); integer dtypes take integral values
/// in range; i1 takes 0 or 1.
pub(super) fn literal(d: Dtype, v: EvalVal) -> Result<Scalar, String> {
    match v {
        EvalVal::Int(i) => scalar_from_i64(d, i),
        EvalVal::Bool(b) => scalar_from_i64(d, b as i64),
        EvalVal::Float(x) if class(d) == Class::Float => Ok(convert(Scalar::F(x as f32), d)),
        EvalVal::Float(x) if x.fract() == 0.0 && x.abs() < 9.2e18 => scalar_from_i64(d, x as i64),
        v => Err(format!("`{v}` cannot be a {d} literal")),
    }
}

/// Evaluates a closed constant expression to an integer.
pub(super) fn eval_int(e: &kir_ir::Expr) -> Result<i64, String> {
    e.eval_int(&|_| None)
        .map_err(|err| format!("cannot evaluate `{e}` to an integer: {err}"))
}

impl<'a> Instance<'a> {
    /// A fresh instance with program id `pid` and an empty environment.
    pub(crate) fn new(ctx: &'a LaunchCtx<'a>, pid: [i64; 3]) -> Instance<'a> {
        Instance {
            ctx,
            pid,
            env: vec![None; ctx.kernel.dfg.values.len()],
            sched: None,
            task: 0,
            origins: HashMap::new(),
            pending_dots: HashMap::new(),
            out: Arc::default(),
            copies_made: HashMap::new(),
        }
    }

    /// A partition of a `warp_specialize`: the parent's values, its scheduler, task `task`, and
    /// its `print` output.
    pub(super) fn child(
        parent: &Instance<'a>,
        env: Vec<Option<Arc<Tile>>>,
        sched: Arc<Sched>,
        task: usize,
    ) -> Instance<'a> {
        let (ctx, pid) = (parent.ctx, parent.pid);
        Instance {
            ctx,
            pid,
            env,
            sched: Some(sched),
            task,
            origins: HashMap::new(),
            pending_dots: HashMap::new(),
            out: parent.out.clone(),
            copies_made: HashMap::new(),
        }
    }

    /// Runs the kernel body to completion; a scheduled kernel must not end with copies in flight.
    pub(crate) fn run(&mut self) -> Result<(), InterpError> {
        let span = self.ctx.kernel.span;
        self.run_block(self.ctx.kernel.body, span)?;
        if let Some(sh) = &self.sched {
            sh.check_exit().map_err(|m| self.fail(span, m))?;
        }
        Ok(())
    }

    /// Runs a region (a partition body) whose values are discarded.
    pub(super) fn run_region(&mut self, b: Block, span: kir_ir::Span) -> Result<(), InterpError> {
        self.run_block(b, span).map(|_| ())
    }

    /// An error at `span` whose message names the kernel and this program id.
    pub(super) fn fail(&self, span: kir_ir::Span, msg: impl std::fmt::Display) -> InterpError {
        let [x, y, z] = self.pid;
        InterpError {
            message: format!(
                "kernel `{}`, program ({x}, {y}, {z}): {msg}",
                self.ctx.kernel.name
            ),
            span: Some(span),
            kernel: Some(self.ctx.kernel.name.clone()),
        }
    }

    /// A value as written in text (`%name` or `%vN`), for messages.
    pub(super) fn vname(&self, v: Value) -> String {
        match self
            .ctx
            .kernel
            .dfg
            .values
            .get(v)
            .and_then(|d| d.name.clone())
        {
            Some(n) => format!("%{n}"),
            None => format!("{v}"),
        }
    }

    /// Runs the ops of block `b` in order; returns the values of its `yield` (none if it has none).
    fn run_block(&mut self, b: Block, span: kir_ir::Span) -> Result<Vec<Arc<Tile>>, InterpError> {
        let ctx = self.ctx;
        let block = ctx
            .kernel
            .dfg
            .blocks
            .get(b)
            .ok_or_else(|| self.fail(span, format!("unknown block {b}")))?;
        for &op in &block.ops {
            match self.exec(op, span)? {
                Flow::Next => {}
                Flow::Yield(v) => return Ok(v),
            }
        }
        Ok(vec![])
    }

    /// The runtime value of `v`; an error if it is not defined yet.
    pub(super) fn get(&self, v: Value, span: kir_ir::Span) -> Result<Arc<Tile>, InterpError> {
        match self.env.get(v.index()) {
            Some(Some(t)) => Ok(t.clone()),
            _ => Err(self.fail(
                span,
                format!("value `{}` is used before it is defined", self.vname(v)),
            )),
        }
    }

    /// Binds `v` to `t` after checking `t` against the declared type of `v`.
    fn set(&mut self, v: Value, t: Arc<Tile>, span: kir_ir::Span) -> Result<(), InterpError> {
        let Some(Some((d, shape))) = self.ctx.types.get(v.index()) else {
            return Err(self.fail(span, format!("unknown value {v}")));
        };
        if t.dtype != *d || t.shape != *shape {
            let msg = format!(
                "`{}` is declared `{}` but the op produced `{}`",
                self.vname(v),
                type_name(*d, shape),
                t.type_name()
            );
            return Err(self.fail(span, msg));
        }
        self.env[v.index()] = Some(t);
        Ok(())
    }

    /// The declared dtype and shape of the op's single result.
    pub(super) fn result_type(
        &self,
        o: &OpData,
    ) -> Result<(Value, Dtype, Vec<usize>), InterpError> {
        match o.results[..] {
            [v] => match self.ctx.types.get(v.index()) {
                Some(Some((d, s))) => Ok((v, *d, s.clone())),
                _ => Err(self.fail(o.span, format!("unknown value {v}"))),
            },
            _ => Err(self.fail(
                o.span,
                format!(
                    "`{}` must have one result, found {}",
                    o.opcode.name(),
                    o.results.len()
                ),
            )),
        }
    }

    /// The three operands of `o` (`select`, `dot`, `fma`).
    pub(super) fn operands3(&self, o: &OpData) -> Result<[Arc<Tile>; 3], InterpError> {
        Ok([
            self.operand(o, 0)?,
            self.operand(o, 1)?,
            self.operand(o, 2)?,
        ])
    }

    /// Operand `i` of `o`.
    pub(super) fn operand(&self, o: &OpData, i: usize) -> Result<Arc<Tile>, InterpError> {
        match o.operands.get(i) {
            Some(&v) => self.get(v, o.span),
            None => Err(self.fail(
                o.span,
                format!("`{}` is missing operand {i}", o.opcode.name()),
            )),
        }
    }

    /// The lead attribute as a name (`reduce sum`).
    fn lead_name<'o>(&self, o: &'o OpData) -> Result<&'o str, InterpError> {
        match &o.lead {
            Some(Attr::Name(n, _)) => Ok(n),
            _ => Err(self.fail(
                o.span,
                format!("`{}` needs a name after the mnemonic", o.opcode.name()),
            )),
        }
    }

    /// The lead attribute evaluated as a constant expression.
    fn lead_expr(&self, o: &OpData) -> Result<EvalVal, InterpError> {
        match &o.lead {
            Some(Attr::Expr(e)) => eval_const(e).map_err(|m| self.fail(o.span, m)),
            _ => Err(self.fail(
                o.span,
                format!("`{}` needs a constant after the mnemonic", o.opcode.name()),
            )),
        }
    }

    /// Grid axis (0..=2) from the lead expression.
    fn lead_axis(&self, o: &OpData) -> Result<usize, InterpError> {
        match self.lead_expr(o)? {
            EvalVal::Int(a @ 0..=2) => Ok(a as usize),
            v => Err(self.fail(o.span, format!("grid axis must be 0, 1 or 2, found `{v}`"))),
        }
    }

    /// An integer keyword attribute (`axis`), or `default` if absent.
    pub(super) fn attr_int(&self, o: &OpData, key: &str, default: i64) -> Result<i64, InterpError> {
        match o.attr(key) {
            None => Ok(default),
            Some(Attr::Expr(e)) => eval_int(e).map_err(|m| self.fail(o.span, m)),
            Some(_) => Err(self.fail(o.span, format!("`{key}` must be a constant expression"))),
        }
    }

    /// Binds the op's single result to `t` (checked against its declared type).
    pub(super) fn set1(&mut self, o: &OpData, t: Tile) -> Result<Flow, InterpError> {
        let (v, ..) = self.result_type(o)?;
        self.set(v, Arc::new(t), o.span)?;
        Ok(Flow::Next)
    }

    /// Wraps a math error with this op's context.
    pub(super) fn m<T>(&self, o: &OpData, r: Result<T, String>) -> Result<T, InterpError> {
        r.map_err(|e| self.fail(o.span, format!("`{}`: {e}", o.opcode.name())))
    }

    /// Executes one op.
    fn exec(&mut self, op: Op, span: kir_ir::Span) -> Result<Flow, InterpError> {
        let ctx = self.ctx;
        let o = ctx
            .kernel
            .dfg
            .ops
            .get(op)
            .ok_or_else(|| self.fail(span, format!("unknown op {op}")))?;
        match o.opcode {
            Opcode::ProgramId => {
                let a = self.lead_axis(o)?;
                self.set1(o, Tile::scalar(Dtype::I32, Scalar::I(self.pid[a])))
            }
            Opcode::NumPrograms => {
                let a = self.lead_axis(o)?;
                self.set1(o, Tile::scalar(Dtype::I32, Scalar::I(ctx.grid[a])))
            }
            Opcode::Dim => {
                let n = self.lead_name(o)?;
                let v = *ctx.dims.get(n).ok_or_else(|| {
                    self.fail(o.span, format!("`{n}` is not a dim of this kernel"))
                })?;
                if i32::try_from(v).is_err() {
                    return Err(self.fail(o.span, format!("dim `{n}` = {v} does not fit i32")));
                }
                self.set1(o, Tile::scalar(Dtype::I32, Scalar::I(v)))
            }
            Opcode::Param => {
                let n = self.lead_name(o)?;
                let t = ctx.scalars.get(n).ok_or_else(|| {
                    self.fail(
                        o.span,
                        format!("`{n}` is not a scalar param of this kernel"),
                    )
                })?;
                let (v, ..) = self.result_type(o)?;
                self.set(v, t.clone(), o.span)?;
                Ok(Flow::Next)
            }
            Opcode::Const => {
                let (_, d, shape) = self.result_type(o)?;
                let s = literal(d, self.lead_expr(o)?);
                let s = self.m(o, s)?;
                self.set1(o, Tile::filled(d, shape, s))
            }
            Opcode::Iota => {
                let (_, d, shape) = self.result_type(o)?;
                let axis = self.attr_int(o, "axis", 0)?;
                let r = self.m(
                    o,
                    usize::try_from(axis)
                        .map_err(|_| format!("bad axis {axis}"))
                        .and_then(|a| shape::iota(d, &shape, a)),
                )?;
                self.set1(o, r)
            }
            Opcode::Splat | Opcode::Broadcast => {
                let (_, _, shape) = self.result_type(o)?;
                let x = self.operand(o, 0)?;
                if o.opcode == Opcode::Splat && !x.is_scalar() {
                    return Err(self.fail(
                        o.span,
                        format!("splat needs a scalar, found `{}`", x.type_name()),
                    ));
                }
                let r = self.m(o, shape::broadcast(&x, &shape))?;
                self.set1(o, r)
            }
            Opcode::Reshape => {
                let (_, _, shape) = self.result_type(o)?;
                let x = self.operand(o, 0)?;
                let r = self.m(o, shape::reshape(&x, &shape))?;
                self.set1(o, r)
            }
            Opcode::Transpose => {
                let x = self.operand(o, 0)?;
                let perm: Vec<usize> =
                    match o.attr("perm") {
                        None => (0..x.shape.len()).rev().collect(),
                        Some(Attr::List(es)) => {
                            let mut p = Vec::with_capacity(es.len());
                            for e in es {
                                let i = eval_int(e).map_err(|m| self.fail(o.span, m))?;
                                p.push(usize::try_from(i).map_err(|_| {
                                    self.fail(o.span, format!("bad perm entry {i}"))
                                })?);
                            }
                            p
                        }
                        Some(_) => return Err(self.fail(o.span, "`perm` must be a list")),
                    };
                let r = self.m(o, shape::transpose(&x, &perm))?;
                self.set1(o, r)
            }
            Opcode::Load => self.load(o),
            Opcode::Store => self.store(o, false),
            Opcode::AtomicAdd => self.store(o, true),
            Opcode::SemWait => self.sem_wait(o),
            Opcode::SemSignal => self.sem_signal(o),
            kir_ir::unary_ops!() => self.exec_unary(o),
            kir_ir::binary_ops!() => self.exec_binary(o),
            Opcode::Cast => {
                let (_, d, _) = self.result_type(o)?;
                let x = self.operand(o, 0)?;
                self.set1(o, math::cast(&x, d))
            }
            Opcode::Bitcast => {
                let (_, d, _) = self.result_type(o)?;
                let x = self.operand(o, 0)?;
                let r = self.m(o, math::bitcast(&x, d))?;
                self.set1(o, r)
            }
            Opcode::Select => {
                let [c, x, y] = self.operands3(o)?;
                let r = self.m(o, math::select(&c, &x, &y))?;
                self.set1(o, r)
            }
            Opcode::Fma => self.exec_fma(o),
            Opcode::Cmp => {
                let p = match o.cmp_pred() {
                    Some(p) => p,
                    None => {
                        let n = self.lead_name(o)?;
                        return Err(self.fail(o.span, format!("unknown comparison `{n}`")));
                    }
                };
                let (x, y) = (self.operand(o, 0)?, self.operand(o, 1)?);
                let r = self.m(o, math::cmp(p, &x, &y))?;
                self.set1(o, r)
            }
            Opcode::Reduce => {
                let r = match o.reduce_kind() {
                    Some(r) => r,
                    None => {
                        let n = self.lead_name(o)?;
                        return Err(self.fail(o.span, format!("unknown reduction `{n}`")));
                    }
                };
                let axis = self.attr_int(o, "axis", 0)?;
                let x = self.operand(o, 0)?;
                let t = self.m(
                    o,
                    usize::try_from(axis)
                        .map_err(|_| format!("bad axis {axis}"))
                        .and_then(|a| reduce::reduce(r, &x, a)),
                )?;
                self.set1(o, t)
            }
            Opcode::Dot => {
                let [a, b, c] = self.operands3(o)?;
                let r = self.m(o, reduce::dot(&a, &b, &c))?;
                self.set1(o, r)
            }
            Opcode::Nf4 => {
                let x = self.operand(o, 0)?;
                let r = self.m(o, math::nf4(&x))?;
                self.set1(o, r)
            }
            Opcode::Print => self.exec_print(o),
            kir_ir::schedule_ops!() => self.exec_sched(o),
            Opcode::For => self.exec_for(o),
            Opcode::If => {
                let c = self.operand(o, 0)?;
                let c = c.bool_scalar().ok_or_else(|| {
                    self.fail(
                        o.span,
                        format!("`if` needs an i1 scalar, found `{}`", c.type_name()),
                    )
                })?;
                let vals = match o.regions.get(if c { 0 } else { 1 }) {
                    Some(&b) => self.run_block(b, o.span)?,
                    None => vec![],
                };
                self.bind_results(o, vals)
            }
            Opcode::StaticIf => Err(self.fail(
                o.span,
                "`static_if` must be removed by specialization before running",
            )),
            Opcode::Yield => {
                let mut v = Vec::with_capacity(o.operands.len());
                for i in 0..o.operands.len() {
                    v.push(self.operand(o, i)?);
                }
                Ok(Flow::Yield(v))
            }
        }
    }

    /// Binds the values a region yielded to the op's results.
    fn bind_results(&mut self, o: &OpData, vals: Vec<Arc<Tile>>) -> Result<Flow, InterpError> {
        if vals.len() != o.results.len() {
            let msg = format!(
                "the region yields {} values but `{}` has {} results",
                vals.len(),
                o.opcode.name(),
                o.results.len()
            );
            return Err(self.fail(o.span, msg));
        }
        for (&r, t) in o.results.iter().zip(vals) {
            self.set(r, t, o.span)?;
        }
        Ok(Flow::Next)
    }

    /// `for`: runs the body for iv = lo, lo+step, … < hi, threading the carried values.
    fn exec_for(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let mut bounds = [0i64; 3];
        for (i, b) in bounds.iter_mut().enumerate() {
            let t = self.operand(o, i)?;
            *b = match (t.dtype, t.int_scalar()) {
                (Dtype::I32, Some(x)) => x,
                _ => {
                    return Err(self.fail(
                        o.span,
                        format!(
                            "`for` bounds must be i32 scalars, found `{}`",
                            t.type_name()
                        ),
                    ))
                }
            };
        }
        let [lo, hi, step] = bounds;
        if step <= 0 {
            return Err(self.fail(o.span, format!("`for` step must be positive, found {step}")));
        }
        let mut carried = Vec::with_capacity(o.operands.len().saturating_sub(3));
        for i in 3..o.operands.len() {
            carried.push(self.operand(o, i)?);
        }
        let body = *o
            .regions
            .first()
            .ok_or_else(|| self.fail(o.span, "`for` has no body"))?;
        let args = self
            .ctx
            .kernel
            .dfg
            .blocks
            .get(body)
            .map(|b| b.args.clone())
            .unwrap_or_default();
        if args.len() != carried.len() + 1 {
            let msg = format!("the body takes {} arguments, expected the induction variable and {} carried values", args.len(), carried.len());
            return Err(self.fail(o.span, msg));
        }
        let mut iv = lo;
        while iv < hi {
            self.set(
                args[0],
                Arc::new(Tile::scalar(Dtype::I32, Scalar::I(iv))),
                o.span,
            )?;
            for (&a, t) in args[1..].iter().zip(&carried) {
                self.set(a, t.clone(), o.span)?;
            }
            let next = self.run_block(body, o.span)?;
            if next.len() != carried.len() {
                let msg = format!(
                    "the body yields {} values but the loop carries {}",
                    next.len(),
                    carried.len()
                );
                return Err(self.fail(o.span, msg));
            }
            carried = next;
            iv += step;
        }
        self.bind_results(o, carried)
    }
}
