//! Structured control flow: `for` (carried scalars as variables, carried tiles in shared memory
//! declared before the loop), `if` (results declared before it) and `yield` (copies into the
//! enclosing op's carried values or results, in place when the value already lives there).

use super::kernel::{Dest, Emitter};
use super::names::op_text;
use super::plan::{self, shape_dtype, Repr};
use super::{ctype, CudaError};
use kir_ir::{OpData, Value};

impl Emitter<'_> {
    /// Copies tile `src` into the stored tile behind pointer `dst` (skipped when `src` already
    /// is that tile), or assigns a scalar.
    pub(crate) fn copy_into(&mut self, dest: &Dest, src: Value) -> Result<(), CudaError> {
        match dest {
            Dest::Var(name) => {
                let v = self.read(src, &[], None)?;
                if &v != name {
                    self.line(format!("{name} = {v};"));
                }
            }
            Dest::Tile(ptr, holder) => {
                let (shape, _) = shape_dtype(self.k, src)?;
                let same_region = match self.repr(src) {
                    Repr::Mem { base, strides } => {
                        plan::is_contiguous(&shape, &strides)
                            && self.plan.region_of.get(&base) == self.plan.region_of.get(holder)
                    }
                    _ => false,
                };
                if same_region {
                    self.line(format!(
                        "// {} is already in {ptr}'s shared memory: nothing to copy",
                        self.irn(src)
                    ));
                    return Ok(());
                }
                let coords = Self::coord_names(&shape);
                let v = self.read(src, &coords, Some("e"))?;
                let total: usize = shape.iter().product();
                self.line(format!(
                    "for (int e = threadIdx.x; e < {total}; e += blockDim.x) {{"
                ));
                self.depth += 1;
                if let Some(c) = Self::coord_decl(&shape, &v) {
                    self.line(c);
                }
                self.line(format!("{ptr}[e] = {v};"));
                self.depth -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// `for`: carried scalars are variables, carried tiles pointers declared before the loop;
    /// the induction variable runs in 64 bits so that `iv + step` cannot overflow.
    pub(crate) fn for_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let k = self.k;
        let (Some(&body), [lo, hi, step, inits @ ..]) = (op.regions.first(), &op.operands[..])
        else {
            return Err(self.err_op(op, "needs bounds and a body"));
        };
        let args = k.dfg.blocks[body].args.clone();
        let mut dests = Vec::new();
        let mut copied = false;
        for (&a, &init) in args.iter().skip(1).zip(inits) {
            let (_, d) = shape_dtype(k, a)?;
            if k.dfg.ty(a).is_scalar() {
                let v = self.read(init, &[], None)?;
                self.line(format!("{} {} = {v};  // carried", ctype(d), self.n(a)));
                dests.push(Dest::Var(self.n(a)));
            } else {
                self.declare_tile(a)?;
                let dest = Dest::Tile(self.n(a), a);
                let before = self.out.len();
                self.copy_into(&dest, init)?;
                copied |= self.out[before..].contains("for (");
                dests.push(dest);
            }
        }
        if copied {
            self.sync();
        }
        let iv = args.first().map(|&v| self.n(v)).unwrap_or_default();
        let it = self.namer.fresh(&format!("{iv}_it"));
        let (lo, hi, step) = (self.n(*lo), self.n(*hi), self.n(*step));
        self.line(format!(
            "if ({step} <= 0) kir_fail(\"kernel {}: for loop step must be positive\");",
            k.name
        ));
        self.line(format!(
            "for (long long {it} = {lo}; {it} < {hi}; {it} += {step}) {{"
        ));
        self.depth += 1;
        self.line(format!("const int {iv} = (int){it};"));
        self.dests.push((dests, true));
        self.block(body)?;
        self.dests.pop();
        self.depth -= 1;
        self.line("}");
        for (&r, &a) in op.results.iter().zip(args.iter().skip(1)) {
            let (_, d) = shape_dtype(k, r)?;
            if !self.used(r) {
                self.line(format!("// ({} is not used)", self.irn(r)));
            } else if k.dfg.ty(r).is_scalar() {
                self.line(format!("const {} {} = {};", ctype(d), self.n(r), self.n(a)));
            } else {
                self.line(format!("{}* {} = {};", ctype(d), self.n(r), self.n(a)));
            }
        }
        Ok(())
    }

    /// `if`: results are declared before it and assigned by each branch's `yield`.
    pub(crate) fn if_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let k = self.k;
        let Some(&c) = op.operands.first() else {
            return Err(self.err_op(op, "needs a condition"));
        };
        let mut dests = Vec::new();
        for &r in &op.results {
            let (_, d) = shape_dtype(k, r)?;
            if k.dfg.ty(r).is_scalar() {
                self.line(format!("{} {};", ctype(d), self.n(r)));
                dests.push(Dest::Var(self.n(r)));
            } else {
                self.declare_tile(r)?;
                dests.push(Dest::Tile(self.n(r), r));
            }
        }
        let cond = self.n(c);
        self.line(format!("if ({cond}) {{"));
        for (i, &region) in op.regions.iter().enumerate() {
            if i == 1 {
                self.line("} else {");
            }
            self.depth += 1;
            self.dests.push((dests.clone(), false));
            self.block(region)?;
            self.dests.pop();
            self.depth -= 1;
        }
        self.line("}");
        Ok(())
    }

    /// `yield`: copies the values into the enclosing op's carried values or results.
    pub(crate) fn yield_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let Some((dests, is_loop)) = self.dests.last().cloned() else {
            return Ok(());
        };
        if op.operands.is_empty() {
            return Ok(());
        }
        self.line(format!(
            "// {} (next values of the {})",
            op_text(self.k, &self.ir, op),
            if is_loop { "loop" } else { "if" }
        ));
        // A value yielded into another position's carried variable must be read before that
        // variable is overwritten: stage scalars through temporaries, and refuse tile rotations.
        let carried: Vec<Option<&Dest>> = op
            .operands
            .iter()
            .map(|&v| {
                dests.iter().find(|d| match d {
                    Dest::Var(n) => *n == self.n(v),
                    Dest::Tile(_, h) => {
                        matches!(self.repr(v), Repr::Mem { base, .. }
                            if self.plan.region_of.get(&base) == self.plan.region_of.get(h))
                    }
                })
            })
            .collect();
        let crossed: Vec<bool> = carried
            .iter()
            .enumerate()
            .map(|(i, d)| d.is_some_and(|d| !std::ptr::eq(d, &dests[i])))
            .collect();
        if let Some(i) = crossed.iter().position(|&c| c) {
            if matches!(dests[i], Dest::Tile(..)) {
                return Err(self.err_op(
                    op,
                    "yields a carried tile into another carried tile's position; the CUDA-C \
                     backend does not rotate tiles (copy the tile first)",
                ));
            }
            let mut temps = Vec::new();
            for (&v, dest) in op.operands.iter().zip(&dests) {
                if let Dest::Var(_) = dest {
                    let (_, d) = shape_dtype(self.k, v)?;
                    let t = self.namer.fresh(&format!("{}_next", self.n(v)));
                    self.line(format!("const {} {t} = {};", ctype(d), self.n(v)));
                    temps.push(Some(t));
                } else {
                    temps.push(None);
                }
            }
            for ((&v, dest), t) in op.operands.iter().zip(&dests).zip(temps) {
                match (dest, t) {
                    (Dest::Var(n), Some(t)) => self.line(format!("{n} = {t};")),
                    _ => self.copy_into(dest, v)?,
                }
            }
        } else {
            for (&v, dest) in op.operands.iter().zip(&dests) {
                self.copy_into(dest, v)?;
            }
        }
        if dests.iter().any(|d| matches!(d, Dest::Tile(..))) {
            self.sync();
        }
        Ok(())
    }
}
