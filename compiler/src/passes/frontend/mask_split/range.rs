//! The interval analysis of the `mask_split` pass (see `mod.rs`): which blocks some row
//! sees, and when every row sees the whole block.
//!
//! Over the block's index ranges ([`Dom`]: rows up to the last stored row, columns up to the
//! tile width, and the facts `f ≤ 0` known to hold), [`interval`] turns a mask tree into the
//! interval `[lo, hi)` of loop values where it is true somewhere (`and` intersects, `or` takes the
//! hull; an unbounded end is ±[`S`]), and [`Full::cond`] into a condition under which it is true
//! everywhere (a known constant, a scalar computed before the loop, or a test of the loop
//! variable in the body). Comparisons that do not name the loop variable are decided from the
//! facts where they follow ([`known`]), else left to the run time. [`program_offsets`] finds the
//! grid facts (`program_id a · c ≤ D − 1`). Scalar IR is emitted through the pass's emitter
//! (`emit.rs`).

use super::emit::Em;
use super::read::{Lin, B, S};
use kir_ir::edit::{def_data, op2};
use kir_ir::{Attr, Block, CmpPred, Dtype, Expr, ExprKind, Kernel, Opcode, Type, Value};

/// An interval [lo, hi) of the loop variable.
#[derive(Clone, Copy)]
pub(super) struct Iv {
    pub(super) lo: Value,
    pub(super) hi: Value,
}

/// The block's index ranges, r ∈ [0, rmax] and c ∈ [0, cmax], and facts `f ≤ 0` that hold
/// whenever some row is stored (rmax ≥ 0, rmax ≤ D − m − 1, m ≤ D − 1 per guarded store).
pub(super) struct Dom {
    pub(super) rmax: Value,
    /// rmax when it is a constant (no stored-row bound).
    pub(super) rmax_lit: Option<i64>,
    pub(super) cmax: i64,
    pub(super) facts: Vec<Lin>,
}

/// `f` with its row and column parts replaced by their min (`want_max` false) or max over the
/// block: α·r becomes α·rmax or 0, β·c becomes β·cmax or 0 (and the loop part dropped).
pub(super) fn extreme(f: &Lin, dom: &Dom, want_max: bool) -> Lin {
    let mut g = Lin {
        terms: f.terms.clone(),
        k: f.k,
        ..Lin::default()
    };
    if f.r != 0 && (f.r > 0) == want_max {
        match dom.rmax_lit {
            Some(r) => g.k += f.r * r,
            None => {
                *g.terms.entry(dom.rmax).or_default() += f.r;
                g.terms.retain(|_, c| *c != 0);
            }
        }
    }
    if f.c != 0 && (f.c > 0) == want_max {
        g.k += f.c * dom.cmax;
    }
    g
}

/// True when `g ≤ 0` follows from the facts of `dom`: g minus a non-negative combination of
/// them is a constant ≤ 0 (greedy: each step cancels one term).
pub(super) fn provably_le0(g: &Lin, dom: &Dom) -> bool {
    let mut g = g.clone();
    for _ in 0..8 {
        if g.terms.is_empty() {
            break;
        }
        let step = dom.facts.iter().find_map(|f| {
            g.terms.iter().find_map(|(t, &gc)| {
                let fc = *f.terms.get(t)?;
                (gc.signum() == fc.signum() && gc % fc == 0).then(|| (f, gc / fc))
            })
        });
        let Some((f, lambda)) = step else { break };
        g = g.add(&f.clone().scale(lambda), -1);
    }
    g.terms.is_empty() && g.k <= 0
}

/// Whether an iv-free comparison `g ≤ 0` is known: `Some(true)` / `Some(false)` when it
/// follows from the facts, `None` when only the run time knows.
pub(super) fn known(g: &Lin, dom: &Dom) -> Option<bool> {
    if provably_le0(g, dom) {
        Some(true)
    } else if provably_le0(&Lin::konst(1).add(g, -1), dom) {
        Some(false)
    } else {
        None
    }
}

/// The loop values where `b` is true somewhere in the block (an over-approximation: `or`
/// takes the hull).
pub(super) fn interval(em: &mut Em, b: &B, dom: &Dom) -> Iv {
    let all = |em: &mut Em, t: bool| {
        let (lo, hi) = if t { (-S, S) } else { (S, -S) };
        Iv {
            lo: em.konst(lo),
            hi: em.konst(hi),
        }
    };
    match b {
        B::Const(t) => all(em, *t),
        B::Atom(f) => {
            // g = the rest of f at its min over the block.
            let g = extreme(f, dom, false);
            match f.iv {
                // iv + g ≤ 0  ⇔  iv < 1 − g
                1 => Iv {
                    lo: em.konst(-S),
                    hi: em.lin(&Lin::konst(1).add(&g, -1)),
                },
                // −iv + g ≤ 0  ⇔  iv ≥ g
                -1 => Iv {
                    lo: em.lin(&g),
                    hi: em.konst(S),
                },
                _ => match known(&g, dom) {
                    Some(t) => all(em, t),
                    None => {
                        let gv = em.lin(&g);
                        let z = em.konst(0);
                        let c = em.cmp(CmpPred::Le, gv, z);
                        let (ns, s) = (em.konst(-S), em.konst(S));
                        Iv {
                            lo: em.sel(c, ns, s),
                            hi: em.sel(c, s, ns),
                        }
                    }
                },
            }
        }
        B::And(v) => {
            let ivs: Vec<Iv> = v.iter().map(|x| interval(em, x, dom)).collect();
            let mut acc = ivs[0];
            for i in &ivs[1..] {
                acc = Iv {
                    lo: em.max(acc.lo, i.lo),
                    hi: em.min(acc.hi, i.hi),
                };
            }
            acc
        }
        B::Or(v) => {
            let ivs: Vec<Iv> = v.iter().map(|x| interval(em, x, dom)).collect();
            let mut acc = ivs[0];
            for i in &ivs[1..] {
                acc = Iv {
                    lo: em.min(acc.lo, i.lo),
                    hi: em.max(acc.hi, i.hi),
                };
            }
            acc
        }
    }
}

/// A condition of the full test: known, a scalar computed before the loop, or one computed in
/// the body.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Cond {
    K(bool),
    Pre(Value),
    In(Value),
}

/// Builds the full test: in-body ops go to block `inb`, loop-invariant ones through `em`.
pub(super) struct Full {
    pub(super) inb: Block,
    pub(super) iv: Value,
    pub(super) step: Value,
    /// `iv + step`, once.
    pub(super) end: Option<Value>,
}

impl Full {
    fn cmp(&self, em: &mut Em, p: CmpPred, a: Value, b: Value) -> Cond {
        Cond::In(op2(em.k, self.inb, Opcode::Cmp, Some(p), a, b, Dtype::I1))
    }
    /// a and b (`and` true) or a or b, folded.
    fn join(&self, em: &mut Em, and: bool, a: Cond, b: Cond) -> Cond {
        match (a, b) {
            (Cond::K(x), o) | (o, Cond::K(x)) => {
                if x == and {
                    o
                } else {
                    Cond::K(x)
                }
            }
            (Cond::Pre(x), Cond::Pre(y)) => {
                let opc = if and { Opcode::And } else { Opcode::Or };
                Cond::Pre(em.op(opc, None, vec![x, y], Type::scalar(Dtype::I1)))
            }
            (Cond::Pre(x) | Cond::In(x), Cond::Pre(y) | Cond::In(y)) => {
                let opc = if and { Opcode::And } else { Opcode::Or };
                Cond::In(op2(em.k, self.inb, opc, None, x, y, Dtype::I1))
            }
        }
    }
    /// A condition under which `b` holds everywhere in the block at the current `iv`: exact for
    /// comparisons and `and`; for `or`, the or of its parts' conditions (sufficient).
    pub(super) fn cond(&mut self, em: &mut Em, b: &B, dom: &Dom) -> Cond {
        match b {
            B::Const(t) => Cond::K(*t),
            B::Atom(f) => {
                // g = the rest of f at its max over the block.
                let g = extreme(f, dom, true);
                match f.iv {
                    // iv + g ≤ 0  ⇔  iv + step ≤ step − g (the bound, before the loop, is an
                    // existing value when g = −x + step: no new loop-invariant register).
                    1 => {
                        let u = match em.lit(self.step) {
                            Some(st) => em.lin(&Lin::konst(st).add(&g, -1)),
                            None => {
                                let ng = em.lin(&Lin::default().add(&g, -1));
                                em.bin(Opcode::Add, ng, self.step)
                            }
                        };
                        let end = match self.end {
                            Some(e) => e,
                            None => {
                                let (iv, step) = (self.iv, self.step);
                                let e =
                                    op2(em.k, self.inb, Opcode::Add, None, iv, step, Dtype::I32);
                                em.k.dfg.values[e].name = Some("ms_end".into());
                                self.end = Some(e);
                                e
                            }
                        };
                        self.cmp(em, CmpPred::Le, end, u)
                    }
                    // −iv + g ≤ 0  ⇔  iv ≥ g
                    -1 => {
                        let gv = em.lin(&g);
                        self.cmp(em, CmpPred::Ge, self.iv, gv)
                    }
                    _ => match known(&g, dom) {
                        Some(t) => Cond::K(t),
                        None => {
                            let gv = em.lin(&g);
                            let z = em.konst(0);
                            Cond::Pre(em.cmp(CmpPred::Le, gv, z))
                        }
                    },
                }
            }
            B::And(v) | B::Or(v) => {
                let and = matches!(b, B::And(_));
                let mut acc = Cond::K(and);
                for x in v {
                    let c = self.cond(em, x, dom);
                    acc = self.join(em, and, acc, c);
                }
                acc
            }
        }
    }
}

/// The values `program_id a · c` of the kernel's top block (before position `end`) whose grid
/// axis a has cdiv(D, c) programs, with D: each is at most D − 1.
pub(super) fn program_offsets(k: &Kernel, end: usize) -> Vec<(Value, String)> {
    let d = &k.dfg;
    let axis = |v: Value| {
        let od = def_data(d, v)?;
        match (od.opcode, &od.lead) {
            (Opcode::ProgramId, Some(Attr::Expr(e))) => e.as_int(),
            _ => None,
        }
    };
    let lit = |v: Value| {
        let od = def_data(d, v)?;
        match (od.opcode, &od.lead) {
            (Opcode::Const, Some(Attr::Expr(e))) => e.as_int(),
            _ => None,
        }
    };
    let mut out = vec![];
    for &o in &d.blocks[k.body].ops[..end] {
        let od = &d.ops[o];
        if od.opcode != Opcode::Mul {
            continue;
        }
        let (x, y) = (od.operands[0], od.operands[1]);
        let Some((a, c)) = axis(x).zip(lit(y)).or_else(|| axis(y).zip(lit(x))) else {
            continue;
        };
        let Some(g) = usize::try_from(a).ok().and_then(|a| k.grid.get(a)) else {
            continue;
        };
        if let ExprKind::Call(kir_ir::Func::Cdiv, args) = &g.kind {
            if let [Expr {
                kind: ExprKind::Ident(dim),
                ..
            }, Expr {
                kind: ExprKind::Int(c2),
                ..
            }] = args.as_slice()
            {
                if *c2 == c && c > 0 {
                    out.push((od.results[0], dim.clone()));
                }
            }
        }
    }
    out
}
