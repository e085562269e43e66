//! Scheduled-IR ops of the dispatcher: stage buffers, async copies, copy groups, mbarriers, async
//! dots and `warp_specialize`, executed against the instance's [`Sched`].
//!
//! Every scheduling op is a scheduling point: the running partition hands control to the
//! scheduler, which may run another partition or land copies in flight before it continues.
//! Sequential meaning: a copy reads global memory when it is issued and writes its stage when
//! it lands; `dot_async` computes at issue and its result is bound only by `dot_wait`.

use super::exec::{Flow, Instance};
use super::sched::{Cond, Fail, Sched};
use super::tile::{Scalar, Tile};
use super::InterpError;
use cranelift_entity::EntityRef;
use kir_ir::{Attr, Dtype, OpData, Opcode, Value};
use std::sync::Arc;

impl Instance<'_> {
    /// The instance's scheduler, created at its first scheduling op.
    fn sched(&mut self) -> Arc<Sched> {
        let seed = self.ctx.seed;
        let [x, y, z] = self.pid;
        let mix = seed
            ^ (x as u64).wrapping_mul(0x9E37_79B9)
            ^ (y as u64).wrapping_mul(0x85EB_CA6B)
            ^ (z as u64).wrapping_mul(0xC2B2_AE35);
        self.sched
            .get_or_insert_with(|| Arc::new(Sched::new(mix)))
            .clone()
    }

    /// Turns a scheduling failure into an error at `o` (or at the op the failure names).
    fn sfail(&self, o: &OpData, f: Fail) -> InterpError {
        self.fail(f.0.unwrap_or(o.span), f.1)
    }

    /// A scheduling point before `o`, blocking on `cond` when given.
    fn point(&mut self, o: &OpData, cond: Option<Cond>) -> Result<(), InterpError> {
        let sh = self.sched();
        let args: Vec<String> = o.operands.iter().map(|&v| self.vname(v)).collect();
        let what = format!("{} {}", o.opcode.name(), args.join(", "));
        sh.point(self.task, cond.map(|c| (c, o.span, what)))
            .map_err(|f| self.sfail(o, f))
    }

    /// Operand `i` as an i32 scalar.
    fn int_operand(&self, o: &OpData, i: usize, what: &str) -> Result<i64, InterpError> {
        let t = self.operand(o, i)?;
        match (t.dtype, t.int_scalar()) {
            (Dtype::I32, Some(x)) => Ok(x),
            _ => Err(self.fail(
                o.span,
                format!(
                    "{what} of `{}` must be an i32 scalar, found `{}`",
                    o.opcode.name(),
                    t.type_name()
                ),
            )),
        }
    }

    /// Operand `i` as a resource and operand `i + 1` as a stage index within it.
    fn staged(&self, o: &OpData, i: usize) -> Result<(Value, usize), InterpError> {
        let v = *o
            .operands
            .get(i)
            .ok_or_else(|| self.fail(o.span, "missing operand"))?;
        let stages = match self.ctx.types.get(v.index()) {
            Some(Some((_, shape))) if !shape.is_empty() => shape[0],
            _ => {
                return Err(self.fail(
                    o.span,
                    format!("`{}` is not a buffer or barrier array", self.vname(v)),
                ))
            }
        };
        let s = self.int_operand(o, i + 1, "the stage index")?;
        if s < 0 || s as usize >= stages {
            let msg = format!(
                "stage index {s} is outside `{}`, which has {stages} stages",
                self.vname(v)
            );
            return Err(self.fail(o.span, msg));
        }
        Ok((v, s as usize))
    }

    /// Executes one op of class `Schedule`.
    pub(super) fn exec_sched(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let me = self.task;
        let sh = self.sched();
        let m = |r: Result<(), String>, s: &Self| r.map_err(|e| s.fail(o.span, e));
        match o.opcode {
            Opcode::SmemAlloc | Opcode::MbarAlloc => {
                let (v, _, shape) = self.result_type(o)?;
                let stages = shape.first().copied().unwrap_or(1);
                if o.opcode == Opcode::SmemAlloc {
                    sh.alloc_buf(v, self.vname(v), stages);
                } else {
                    let arrivals = self.attr_int(o, "arrivals", 1)?;
                    sh.alloc_bar(v, self.vname(v), stages, arrivals);
                }
                self.env[v.index()] = Some(Arc::new(Tile::scalar(Dtype::I32, Scalar::I(0))));
                Ok(Flow::Next)
            }
            Opcode::AsyncCopy => {
                self.point(o, None)?;
                let (buf, stage) = self.staged(o, 0)?;
                let (d, shape) = match self.ctx.types.get(buf.index()) {
                    Some(Some((d, s))) => (*d, s[1..].to_vec()),
                    _ => return Err(self.fail(o.span, "unknown buffer")),
                };
                if let Some(Attr::Value(p)) = o.attr("multicast") {
                    let shared = self.get(*p, o.span)?.bool_scalar().ok_or_else(|| {
                        self.fail(o.span, "`multicast` of `async_copy` must be an i1 scalar")
                    })?;
                    self.check_shared_copy(o, shared, &shape, self.ctx.cluster)?;
                }
                let tile = self.read_tile(o, d, shape.clone())?;
                let bytes = (shape.iter().product::<usize>() * d.size_bytes()) as i64;
                let bar = match o.attr("bar") {
                    Some(Attr::Value(b)) => Some(*b),
                    _ => None,
                };
                m(sh.copy(me, o.span, buf, stage, tile, bytes, bar), self)?;
                Ok(Flow::Next)
            }
            Opcode::AsyncCommit => {
                sh.commit(me);
                Ok(Flow::Next)
            }
            Opcode::AsyncWait => {
                let keep = self.attr_int(o, "pending", 0)?.max(0) as usize;
                self.point(o, Some(Cond::Groups { keep }))?;
                sh.waited_groups(me, keep);
                Ok(Flow::Next)
            }
            Opcode::MbarArrive => {
                self.point(o, None)?;
                let (bar, stage) = self.staged(o, 0)?;
                let tx = self.attr_int(o, "tx", 0)?;
                let count = self.attr_int(o, "cluster", 1)?.max(1);
                sh.arrive(me, bar, stage, tx, count)
                    .map_err(|f| self.sfail(o, f))?;
                Ok(Flow::Next)
            }
            Opcode::MbarWait => {
                let (bar, stage) = self.staged(o, 0)?;
                let parity = self.int_operand(o, 2, "the parity")?;
                if parity != 0 && parity != 1 {
                    return Err(self.fail(
                        o.span,
                        format!("the parity of `mbar_wait` must be 0 or 1, found {parity}"),
                    ));
                }
                self.point(o, Some(Cond::Bar { bar, stage, parity }))?;
                m(sh.observed(me, bar, stage), self)?;
                Ok(Flow::Next)
            }
            Opcode::SmemRead => {
                self.point(o, None)?;
                let (buf, stage) = self.staged(o, 0)?;
                let t = sh.read(me, buf, stage).map_err(|e| self.fail(o.span, e))?;
                let v = o.results[0];
                self.origins.insert(v, (buf, stage));
                self.set1(o, (*t).clone())
            }
            Opcode::SmemRelease => {
                self.point(o, None)?;
                let (buf, stage) = self.staged(o, 0)?;
                m(sh.release(me, buf, stage), self)?;
                Ok(Flow::Next)
            }
            Opcode::FenceAsync => Ok(Flow::Next),
            Opcode::DotAsync => {
                self.point(o, None)?;
                let (a, b, c) = (
                    self.operand(o, 0)?,
                    self.operand(o, 1)?,
                    self.operand(o, 2)?,
                );
                let r = self.m(o, super::reduce::dot(&a, &b, &c))?;
                let (v, ..) = self.result_type(o)?;
                let srcs = o.operands[..2]
                    .iter()
                    .filter_map(|x| self.origins.get(x).copied())
                    .collect();
                sh.dot_started(me, v, srcs);
                self.pending_dots.insert(v, Arc::new(r));
                Ok(Flow::Next)
            }
            Opcode::DotWait => {
                self.point(o, None)?;
                let keep = self.attr_int(o, "pending", 0)?.max(0) as usize;
                let x = o.operands[0];
                m(sh.dot_wait(me, x, keep), self)?;
                let t = self.pending_dots.remove(&x).ok_or_else(|| {
                    self.fail(
                        o.span,
                        format!("`{}` is not a `dot_async` result in flight", self.vname(x)),
                    )
                })?;
                self.set1(o, (*t).clone())
            }
            Opcode::WarpSpecialize => self.warp_specialize(o, sh),
            _ => Err(self.fail(
                o.span,
                format!("`{}` is not a scheduling op", o.opcode.name()),
            )),
        }
    }

    /// `warp_specialize`: runs the producer and each consumer partition on its own thread, one at
    /// a time under the scheduler, and returns when all have finished.
    fn warp_specialize(&mut self, o: &OpData, sh: Arc<Sched>) -> Result<Flow, InterpError> {
        let consumers = self.attr_int(o, "consumers", 1)?;
        if !(1..=64).contains(&consumers) {
            return Err(self.fail(
                o.span,
                format!("`consumers` must lie in [1, 64], found {consumers}"),
            ));
        }
        let (Some(&prod), Some(&cons)) = (o.regions.first(), o.regions.get(1)) else {
            return Err(self.fail(
                o.span,
                "`warp_specialize` needs a producer and a consumer region",
            ));
        };
        let wg_arg = self
            .ctx
            .kernel
            .dfg
            .blocks
            .get(cons)
            .and_then(|b| b.args.first().copied());
        let mut names = vec!["the producer".to_string()];
        names.extend((0..consumers).map(|i| format!("consumer {i}")));
        let ids = sh.spawn(self.task, names);
        let ctx = self.ctx;
        let pid = self.pid;
        let env = self.env.clone();
        let span = o.span;
        let mut first_err: Option<InterpError> = None;
        std::thread::scope(|s| {
            let mut handles = Vec::new();
            for (i, &id) in ids.iter().enumerate() {
                let sh = sh.clone();
                let mut inst = Instance::child(self, env.clone(), sh.clone(), id);
                handles.push(s.spawn(move || -> Result<(), InterpError> {
                    if let Err(f) = sh.start(id) {
                        return Err(inst.fail(f.0.unwrap_or(span), f.1));
                    }
                    let region = if i == 0 { prod } else { cons };
                    if i > 0 {
                        if let Some(a) = wg_arg {
                            inst.env[a.index()] =
                                Some(Arc::new(Tile::scalar(Dtype::I32, Scalar::I(i as i64 - 1))));
                        }
                    }
                    match inst.run_region(region, span) {
                        Ok(()) => {
                            sh.finish(id);
                            Ok(())
                        }
                        Err(e) => {
                            // Keep the bare message: the parent adds the kernel and program.
                            let [x, y, z] = pid;
                            let prefix =
                                format!("kernel `{}`, program ({x}, {y}, {z}): ", ctx.kernel.name);
                            let msg = e.message.strip_prefix(&prefix).unwrap_or(&e.message);
                            sh.abort((e.span, msg.to_string()));
                            Err(e)
                        }
                    }
                }));
            }
            if let Err(f) = sh.point(
                self.task,
                Some((Cond::Children, span, "warp_specialize".into())),
            ) {
                first_err.get_or_insert(self.fail(f.0.unwrap_or(span), f.1));
            }
            for h in handles {
                if let Ok(Err(e)) = h.join() {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        });
        if let Some(f) = sh.failure() {
            // The first failure recorded wins over what each thread saw after it.
            return Err(self.fail(f.0.unwrap_or(span), f.1));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(Flow::Next),
        }
    }
}
