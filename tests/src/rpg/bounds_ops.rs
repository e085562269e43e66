//! The per-op rules of the bound analysis (`bounds`): which ops are inexact sites of the
//! e-graph's rules or of the GPU's approximations, how an error bound propagates through every
//! other op, and which NaNs each op's result may hold (see the module doc of `bounds`).

use super::bound::{Bound, Model, ULP};
use super::bounds_walk::{
    const_of, def, dt, is_scalar, may_be_special_divisor, other_nan, unit, Info, Nan, Walk,
};
use kir_ir::{Dtype, OpData, Opcode, Value};

impl Walk<'_> {
    /// Sets the bound of `d`'s results (or of the tensor it writes).
    pub(super) fn op(&mut self, d: &OpData, ctl: Bound) {
        let k = self.k;
        let ins: Vec<Info> = d.operands.iter().map(|&v| self.get(v)).collect();
        let inb = ins.iter().fold(Bound::EXACT, |a, i| a.join(i.b));
        let rd = d.results.first().and_then(|&r| dt(k, r));
        let f32r = rd == Some(Dtype::F32);
        let float_r = rd.is_some_and(|x| x.is_float());
        let konst = !ins.is_empty() && ins.iter().all(|i| i.konst);
        // Rounding on a perturbed input: one more unit of the result's dtype.
        let round = |b: Bound| -> Bound {
            if b.rel == 0.0 {
                b
            } else {
                Bound {
                    rel: b.rel + rd.map_or(ULP, unit),
                    zero_sign: b.zero_sign,
                }
            }
        };
        let unb_if_inexact = |b: Bound| if b.rel > 0.0 { Bound::UNBOUNDED } else { b };
        let gpu = self.model == Model::Gpu;
        let sites = self.model == Model::Egraph { sites: true };
        let mut floor = 0.0;
        // The GPU's approximations (PTX ISA: ex2.approx, rsqrt.approx within 2⁻²² relative;
        // lg2.approx and tanh.approx have absolute error bounds only).
        const APPROX: f64 = 2.384185791015625e-7;
        let b: Bound = match d.opcode {
            Opcode::Exp | Opcode::Exp2 | Opcode::Sigmoid | Opcode::Silu if gpu => {
                if inb.is_unbounded() {
                    Bound::UNBOUNDED
                } else {
                    Bound::rel(
                        104.0 * (inb.rel + ULP) + 2.0 * APPROX + 2.0 * ULP + rd.map_or(ULP, unit),
                    )
                }
            }
            Opcode::Rsqrt if gpu => {
                if inb.is_unbounded() || inb.zero_sign {
                    Bound::UNBOUNDED
                } else {
                    Bound::rel(inb.rel / 2.0 + APPROX + rd.map_or(ULP, unit))
                }
            }
            Opcode::Log | Opcode::Log2 | Opcode::Tanh if gpu => Bound::UNBOUNDED,
            // `pow` is 2^(y·lg2.approx|x|): lg2.approx's absolute error grows with |y|.
            Opcode::Pow if gpu => Bound::UNBOUNDED,
            // PTX's erf sequence is within 1.2 ulp, CUDA's `erff` within 2 (docs/ir.md); the
            // condition number is at most 1.
            Opcode::Erf if gpu => {
                if inb.is_unbounded() {
                    Bound::UNBOUNDED
                } else {
                    Bound::rel(inb.rel + 3.0 * ULP + rd.map_or(ULP, unit))
                }
            }
            Opcode::Add | Opcode::Sub if gpu && f32r && ins.iter().any(|i| i.product) => {
                Bound::UNBOUNDED
            }
            Opcode::Dot | Opcode::DotAsync | Opcode::DotWait if gpu => Bound::UNBOUNDED,
            Opcode::Reduce
                if gpu && float_r && matches!(d.reduce_kind(), Some(kir_ir::ReduceKind::Sum)) =>
            {
                Bound::UNBOUNDED
            }
            Opcode::ProgramId
            | Opcode::NumPrograms
            | Opcode::Dim
            | Opcode::Param
            | Opcode::Iota => Bound::EXACT,
            Opcode::Const => {
                floor = const_of(d).map_or(0.0, f64::abs);
                let i = Info {
                    b: Bound::EXACT,
                    kval: const_of(d),
                    product: false,
                    konst: true,
                    floor: if floor.is_finite() { floor } else { 0.0 },
                    nan: self.nan_of(d, &ins),
                };
                for &r in &d.results {
                    self.set(r, i);
                }
                return;
            }
            Opcode::Splat | Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => {
                floor = ins.first().map_or(0.0, |i| i.floor);
                inb
            }
            Opcode::Load => {
                let t = d
                    .tensor
                    .as_ref()
                    .map(|t| t.param.clone())
                    .unwrap_or_default();
                self.bufs
                    .get(&t)
                    .copied()
                    .unwrap_or(Bound::EXACT)
                    .join(self.taint(d))
            }
            Opcode::Store | Opcode::AtomicAdd => {
                let t = d
                    .tensor
                    .as_ref()
                    .map(|t| t.param.clone())
                    .unwrap_or_default();
                let v = ins.first().map_or(Bound::EXACT, |i| i.b);
                let float_atomic = d.opcode == Opcode::AtomicAdd
                    && d.operands
                        .first()
                        .and_then(|&x| dt(k, x))
                        .is_some_and(|x| x.is_float());
                // Float atomics add in whatever order the GPU's instances run.
                let v = if float_atomic && gpu {
                    Bound::UNBOUNDED
                } else if float_atomic {
                    unb_if_inexact(v)
                } else {
                    v
                };
                let c = if ctl.is_exact() {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                };
                let all = v.join(self.taint(d)).join(c);
                // A float atomic adds: its sums are op-made (∞ + −∞ is a NaN).
                let nan = if float_atomic {
                    Nan::Any
                } else {
                    ins.first().map_or(Nan::Any, |i| i.nan)
                };
                self.store_into(&t, all, nan);
                return;
            }
            Opcode::Neg | Opcode::Abs | Opcode::Max | Opcode::Min => {
                if d.opcode == Opcode::Abs || d.opcode == Opcode::Neg {
                    floor = ins.first().map_or(0.0, |i| i.floor);
                }
                if d.opcode == Opcode::Max {
                    floor = ins.iter().map(|i| i.floor).fold(0.0, f64::max);
                }
                inb
            }
            Opcode::Exp if f32r && sites => {
                if inb.is_unbounded() {
                    Bound::UNBOUNDED
                } else {
                    Bound {
                        rel: 104.0 * inb.rel + 1.3e-5 + 2.0 * ULP,
                        zero_sign: false,
                    }
                }
            }
            Opcode::Exp | Opcode::Exp2 | Opcode::Sigmoid | Opcode::Tanh => {
                if inb.rel == 0.0 {
                    Bound {
                        rel: 0.0,
                        zero_sign: inb.zero_sign && d.opcode == Opcode::Tanh,
                    }
                } else {
                    round(Bound::rel(104.0 * inb.rel))
                }
            }
            Opcode::Silu => {
                if inb.rel == 0.0 {
                    inb
                } else {
                    round(Bound::rel(105.0 * inb.rel))
                }
            }
            Opcode::Sqrt => {
                floor = ins.first().map_or(0.0, |i| i.floor.sqrt());
                round(Bound {
                    rel: inb.rel / 2.0,
                    zero_sign: inb.zero_sign,
                })
            }
            Opcode::Rsqrt | Opcode::Recip => {
                if inb.zero_sign {
                    Bound::UNBOUNDED
                } else if d.opcode == Opcode::Rsqrt {
                    round(Bound::rel(inb.rel / 2.0))
                } else {
                    round(inb)
                }
            }
            // erf's relative condition number |x·erf′(x)/erf(x)| is at most 1.
            Opcode::Erf => {
                if inb.rel == 0.0 {
                    inb
                } else {
                    round(inb)
                }
            }
            // The condition numbers of xʸ are |y| and |y·ln x|; pow(±0, y < 0) is ±∞.
            Opcode::Pow => {
                if inb.zero_sign {
                    Bound::UNBOUNDED
                } else {
                    unb_if_inexact(inb)
                }
            }
            // One rounding, exact on the GPU too (`fma.rn.f32`); it may cancel like `add`.
            Opcode::Fma => Bound {
                rel: unb_if_inexact(inb).rel,
                zero_sign: inb.zero_sign,
            },
            Opcode::Log | Opcode::Log2 | Opcode::Floor => unb_if_inexact(Bound {
                rel: inb.rel,
                zero_sign: false,
            }),
            Opcode::Add | Opcode::Sub if float_r => {
                // `add-zero-*` fire before constant folding, so a fully constant operation counts
                // too (`sub-zero` fires on +0 only, which is exact).
                let zs = d.opcode == Opcode::Add
                    && ins
                        .iter()
                        .any(|i| i.konst && i.kval.map_or(true, |v| v == 0.0));
                let b = unb_if_inexact(inb);
                if d.opcode == Opcode::Add {
                    floor = ins.iter().map(|i| i.floor).fold(0.0, f64::max)
                        * (ins.iter().all(|i| i.floor > 0.0) as u8 as f64);
                    // abs(y) + c ≥ c
                    if let (Some(a), Some(c)) = (d.operands.first(), ins.get(1)) {
                        if def(k, *a).is_some_and(|x| x.opcode == Opcode::Abs) && c.konst {
                            floor = floor.max(c.floor);
                        }
                    }
                }
                Bound {
                    rel: b.rel,
                    zero_sign: b.zero_sign || zs,
                }
            }
            Opcode::Mul if f32r => {
                floor = ins.iter().map(|i| i.floor).product();
                // `mul-scalars-reassoc` rewrites `mul T, b` only when T's class holds a tile
                // times a scalar.
                let site = d.operands.len() == 2
                    && !is_scalar(k, d.operands[0])
                    && is_scalar(k, d.operands[1])
                    && self.may_hold_scaled(d.operands[0], 0);
                let b = round(inb);
                if site && sites && !b.is_unbounded() {
                    Bound {
                        rel: b.rel + 2.0 * ULP,
                        zero_sign: b.zero_sign,
                    }
                } else {
                    b
                }
            }
            Opcode::Div if f32r => {
                let y = d.operands[1];
                let yi = self.get(y);
                let pow2 = def(k, y)
                    .and_then(const_of)
                    .is_some_and(|c| c != 0.0 && c.is_finite() && c.abs().log2().fract() == 0.0);
                if yi.b.zero_sign {
                    Bound::UNBOUNDED
                } else if pow2 {
                    round(inb)
                } else if sites && may_be_special_divisor(k, y, 0) {
                    // A divisor without a proven floor: unbounded, or bounded under a run-time
                    // check of its range (perturbed by less than half, it stays in range).
                    let trusted = yi.b.rel < 0.5 && self.guards.is_some();
                    if yi.floor < 2f64.powi(-60) && !trusted {
                        Bound::UNBOUNDED
                    } else {
                        if yi.floor < 2f64.powi(-60) {
                            if let Some(g) = &mut self.guards {
                                g.push(y);
                            }
                        }
                        let b = round(inb);
                        Bound {
                            rel: b.rel + 3.0 * ULP,
                            zero_sign: b.zero_sign,
                        }
                    }
                } else {
                    round(inb)
                }
            }
            Opcode::Div if float_r && ins.get(1).is_some_and(|i| i.b.zero_sign) => Bound::UNBOUNDED,
            Opcode::Mul | Opcode::Div => round(inb),
            Opcode::Add
            | Opcode::Sub
            | Opcode::Rem
            | Opcode::And
            | Opcode::Or
            | Opcode::Xor
            | Opcode::Shl
            | Opcode::Shr
            | Opcode::Not => unb_if_inexact(inb),
            Opcode::Cmp => {
                if inb.rel > 0.0 {
                    Bound::UNBOUNDED
                } else {
                    Bound::EXACT
                }
            }
            Opcode::Select => {
                let c = ins.first().map_or(Bound::EXACT, |i| i.b);
                if c.rel > 0.0 {
                    Bound::UNBOUNDED
                } else {
                    ins[1].b.join(ins[2].b)
                }
            }
            Opcode::Cast => {
                let from = d.operands.first().and_then(|&x| dt(k, x));
                match (from.is_some_and(|x| x.is_float()), float_r) {
                    (true, false) => unb_if_inexact(Bound::rel(inb.rel)),
                    (_, true) => round(inb),
                    _ => inb,
                }
            }
            Opcode::Bitcast => {
                // A NaN's sign and payload are unspecified when an op made it (docs/ir.md); a
                // bitcast to another dtype shows them, so the result has no bound then.
                let from = d.operands.first().and_then(|&x| dt(k, x));
                let shows_nan_bits = from.is_some_and(|x| x.is_float())
                    && from != rd
                    && ins.first().is_none_or(|i| i.nan == Nan::Any);
                if inb.is_exact() && !shows_nan_bits {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                }
            }
            Opcode::Nf4 => {
                if inb.is_exact() {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                }
            }
            Opcode::Reduce => {
                let sum = matches!(d.reduce_kind(), Some(kir_ir::ReduceKind::Sum));
                if sum && float_r {
                    unb_if_inexact(inb)
                } else {
                    inb
                }
            }
            Opcode::Dot | Opcode::DotAsync | Opcode::DotWait => unb_if_inexact(inb),
            Opcode::SmemRead => {
                let src = d.operands.first().copied();
                src.map_or(Bound::UNBOUNDED, |s| self.get(s).b)
            }
            Opcode::AsyncCopy => {
                // The stage buffer holds what the tensor holds.
                let t = d
                    .tensor
                    .as_ref()
                    .map(|t| t.param.clone())
                    .unwrap_or_default();
                let src = self
                    .bufs
                    .get(&t)
                    .copied()
                    .unwrap_or(Bound::EXACT)
                    .join(self.taint(d));
                if let Some(&buf) = d.operands.first() {
                    let cur = self.get(buf);
                    self.set(
                        buf,
                        Info {
                            b: cur.b.join(src),
                            nan: cur.nan.max(self.copy_nan(d)),
                            ..cur
                        },
                    );
                }
                return;
            }
            Opcode::SmemAlloc => {
                // Its stages hold what the kernel's copies into it bring (copies later in a
                // loop body feed reads earlier in it, so all of them count from the start).
                let nan = d.results.first().map_or(Nan::Any, |&r| self.copies_nan(r));
                for &r in &d.results {
                    self.set(
                        r,
                        Info {
                            nan,
                            ..super::bounds_walk::EXACT
                        },
                    );
                }
                return;
            }
            Opcode::For => {
                self.for_op(d, &ins, ctl);
                return;
            }
            Opcode::If => {
                self.if_op(d, &ins, ctl);
                return;
            }
            _ => {
                for &r in &d.regions {
                    self.block(r, ctl);
                }
                inb
            }
        };
        // Integers and masks have no partial error: exact or unbounded.
        let b = match rd {
            Some(x) if !x.is_float() && b.rel > 0.0 => Bound::UNBOUNDED,
            Some(x) if !x.is_float() => Bound::EXACT,
            _ => b,
        };
        let product = gpu && f32r && d.opcode == Opcode::Mul;
        let i = Info {
            b,
            kval: None,
            product,
            konst,
            floor,
            nan: self.nan_of(d, &ins),
        };
        for &r in &d.results {
            self.set(r, i);
        }
    }

    /// Which NaNs the result of `d` may hold, given its operands' `ins` (see [`Nan`]): ops that
    /// only move bits keep their operands' NaNs; every other float op turns a NaN operand into
    /// an op-made one, and the ops that make a NaN from numbers (∞ − ∞, 0·∞, 0/0, the root or
    /// logarithm of a negative, silu(−∞), a NaN literal) always may.
    pub(super) fn nan_of(&self, d: &OpData, ins: &[Info]) -> Nan {
        let k = self.k;
        let rd = d.results.first().and_then(|&r| dt(k, r));
        if !rd.is_some_and(|x| x.is_float()) {
            return Nan::No;
        }
        let arg = |i: usize| ins.get(i).map_or(Nan::Any, |x| x.nan);
        let through = if ins.iter().all(|i| i.nan == Nan::No) {
            Nan::No
        } else {
            Nan::Any
        };
        let nan = match d.opcode {
            Opcode::Const => match const_of(d) {
                Some(v) if !v.is_nan() => Nan::No,
                _ => Nan::Any,
            },
            Opcode::Param => Nan::Given,
            Opcode::Load => {
                let t = d.tensor.as_ref().map(|t| t.param.as_str()).unwrap_or("");
                let held = self.nans.get(t).copied().unwrap_or(Nan::Any);
                held.max(other_nan(d))
            }
            Opcode::Splat | Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => arg(0),
            Opcode::Select => arg(1).max(arg(2)),
            Opcode::SmemRead => arg(0),
            Opcode::Bitcast => {
                if d.operands.first().and_then(|&x| dt(k, x)) == rd {
                    arg(0)
                } else {
                    // Any bit pattern, NaNs included, with the operand's exact bits.
                    Nan::Given
                }
            }
            Opcode::Cast => {
                let from = d.operands.first().and_then(|&x| dt(k, x));
                if from.is_some_and(|x| x.is_float()) {
                    through
                } else {
                    Nan::No
                }
            }
            Opcode::Nf4 => Nan::No,
            Opcode::Reduce if !matches!(d.reduce_kind(), Some(kir_ir::ReduceKind::Sum)) => through,
            Opcode::Neg
            | Opcode::Abs
            | Opcode::Exp
            | Opcode::Exp2
            | Opcode::Tanh
            | Opcode::Sigmoid
            | Opcode::Recip
            | Opcode::Floor
            | Opcode::Erf
            | Opcode::Max
            | Opcode::Min => through,
            _ => Nan::Any,
        };
        // f16 and bf16 are held widened to f32 (the interpreter, the PTX backend's registers)
        // and narrowed again on every store: none of their NaNs has given bits.
        if rd != Some(Dtype::F32) && nan == Nan::Given {
            Nan::Any
        } else {
            nan
        }
    }

    /// The NaNs one `async_copy` brings into its stage buffer: the tensor's, and its `other`.
    fn copy_nan(&self, d: &OpData) -> Nan {
        let t = d.tensor.as_ref().map(|t| t.param.as_str()).unwrap_or("");
        let held = self.nans.get(t).copied().unwrap_or(Nan::Any);
        held.max(other_nan(d))
    }

    /// The NaNs every `async_copy` of the kernel into stage buffer `buf` brings.
    fn copies_nan(&self, buf: Value) -> Nan {
        self.k
            .dfg
            .ops
            .values()
            .filter(|o| o.opcode == Opcode::AsyncCopy && o.operands.first() == Some(&buf))
            .fold(Nan::No, |a, o| a.max(self.copy_nan(o)))
    }
}
