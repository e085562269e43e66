//! How far the `egraph` pass may move each output of a module, derived from the module alone
//! (before the pass), from the error bounds docs/passes.md states for its inexact f32 rules,
//! and a run-time check of the divisors whose range the module alone does not show.
//!
//! Every value gets a [`Bound`]: exact (bit-identical expected), a relative error bound, or
//! unbounded (the rewrite's error may be amplified without limit: a sum that cancels, a
//! comparison or a floor that flips, a control decision). An op is an *inexact site* when one
//! of the rules may rewrite it, judged conservatively from the op and its operands:
//! - f32 `exp`: `exp-to-exp2`, relative ≤ |x|·2⁻²³ + 2 ulp, ≤ 1.3e-5 + 2⁻²² where exp(x) is a
//!   normal f32 (|x| ≤ 104; beyond, both sides are 0 or inf);
//! - f32 `mul T, s` (tile times scalar) where T's e-class may hold a tile times a scalar (T is
//!   one, a division by a scalar, an identity away from either, or computed from constants):
//!   `mul-scalars-reassoc` (`(x·a)·b → x·(a·b)`), 2 ulp;
//! - f32 `div` whose divisor is (or is an identity away from) a scalar, a broadcast, a splat or a
//!   `sqrt`, unless it is a power-of-two constant (exact): `div-scalar-to-recip-mul`,
//!   `div-broadcast-to-recip-mul`, `div-sqrt-to-mul-rsqrt`, 1.5 ulp each (3 ulp counted). These
//!   bounds hold for divisors of magnitude in [2⁻¹²⁶, 2¹²⁶]; the divisor must be provably at
//!   least 2⁻⁶⁰ (a constant, or `abs(y) + c`, through broadcasts and reshapes), else the value is
//!   unbounded. The upper end is the generator's magnitude discipline (values clamped below 2⁶⁰).
//!   [`egraph_bounds_guarded`] instead bounds a division without that floor (whose divisor's
//!   own bound is below one half) and returns its divisor as a [`Guard`]; the check runs the
//!   module with [`with_guards`], which fails unless every such divisor is a NaN or of magnitude
//!   in [2⁻¹²⁵, 2¹²⁵] on the inputs at hand, and keeps those bounds only if it passes (the
//!   attention shape's `acc / select(l == 0, 1, l)`: l ≥ 1 once a key is seen, which no
//!   per-value analysis shows).
//!
//! Inexact inputs then propagate: rounding ops add 1 ulp (f32) or the f16/bf16 rounding unit,
//! `exp`/`exp2`/`sigmoid`/`silu` amplify by at most 104 (beyond, both sides saturate), `sqrt`
//! and `rsqrt` halve; `add`, `sub`, float `reduce sum`, `dot`, `log`, `floor`, `cmp`, casts to
//! integers, bitcasts and float `atomic_add` make them unbounded, as does any control decision
//! (`if` condition, loop bounds, offsets, masks) taken on an inexact value.
//!
//! `add-zero-*` are exact up to the sign of a zero (x + 0 for x = −0): a float `add` with an
//! operand computed from constants only (and not a nonzero literal) marks the value `zero_sign`
//! (compared with +0 = −0); dividing by it, `recip`, `rsqrt` or a bitcast of it is unbounded.
//!
//! NaNs: the sign and payload of a NaN that an op produces are unspecified (docs/ir.md). Every
//! value tracks whether it may be such a NaN ([`Nan`](super::bounds_walk::Nan)): provably not
//! (integers, numbers from integers, `nf4`, ops that cannot make a NaN from numbers applied to
//! non-NaNs), only with given bits (f32 input tensors and params, the runner's poison, a bitcast
//! of integer bits, moved by loads, stores, copies, selects and shape ops), or possibly op-made
//! (all the rest, and every f16/bf16 NaN). A bitcast from a float dtype to another of a possibly
//! op-made NaN has no bound, in both models: the e-graph keeps `x` for `min(x, x)` where the
//! interpreter makes a canonical NaN, and the GPU's canonical NaN (0x7FFFFFFF) is not the CPU's.

pub use super::bound::{Bound, Model, ULP};
use super::bounds_walk::{Nan, Walk};
use kir_ir::edit::{insert_op, simple};
use kir_ir::{
    Attr, CmpPred, Dtype, ElemType, Expr, ExprKind, Kernel, Module, Opcode, ParamKind, Type, Value,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The bound of every `out`/`inout` entry param of the specialized module `m` under the e-graph
/// pass (see the module doc); with `sites` false, under its exact rules only (the sign of a
/// zero may still differ). Entry params that are never written are exact.
pub fn egraph_bounds(m: &Module, sites: bool) -> BTreeMap<String, Bound> {
    bounds(m, Model::Egraph { sites }, false).0
}

/// A divisor whose range the bound of an inexact division takes on trust (see
/// [`egraph_bounds_guarded`]): the kernel and the divisor value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Guard {
    /// The kernel's name.
    pub kernel: String,
    /// The divisor of one or more `div` ops of that kernel.
    pub divisor: Value,
}

/// [`egraph_bounds`] with the inexact rules, except that a division the rules may turn into a
/// reciprocal multiply whose divisor is not provably at least 2⁻⁶⁰ is bounded as if its divisor
/// were in range, and that divisor is returned as a [`Guard`]: the bounds hold for a run in
/// which every guarded divisor is a NaN or of magnitude in [2⁻¹²⁵, 2¹²⁵] (a factor 2 inside the
/// rules' [2⁻¹²⁶, 2¹²⁶], so a divisor the e-graph perturbs by less than half stays inside it).
/// [`with_guards`] makes a run check that.
pub fn egraph_bounds_guarded(m: &Module) -> (BTreeMap<String, Bound>, Vec<Guard>) {
    let (b, g) = bounds(m, Model::Egraph { sites: true }, true);
    (b, g.into_iter().collect())
}

/// `m` with every guarded divisor checked where it is used: before each `div` by it, an integer
/// division by zero (an error of the interpreter) wherever an element is neither a NaN nor of
/// magnitude in [2⁻¹²⁵, 2¹²⁵]. The added ops are pure and change no result, so a run of the
/// returned module gives the outputs of `m` or fails on a divisor out of range.
pub fn with_guards(m: &Module, guards: &[Guard]) -> Module {
    let mut out = m.clone();
    for g in guards {
        let Some(k) = out.kernels.values_mut().find(|k| k.name == g.kernel) else {
            continue;
        };
        let blocks: Vec<_> = k.dfg.blocks.keys().collect();
        for b in blocks {
            let mut pos = 0;
            while pos < k.dfg.blocks[b].ops.len() {
                let o = &k.dfg.ops[k.dfg.blocks[b].ops[pos]];
                if o.opcode == Opcode::Div && o.operands.get(1) == Some(&g.divisor) {
                    pos += check_range(k, b, pos, g.divisor);
                }
                pos += 1;
            }
        }
    }
    out
}

/// Inserts the range check of `y` at position `pos` of block `b`; returns how many ops it took.
fn check_range(k: &mut Kernel, b: kir_ir::Block, pos: usize, y: Value) -> usize {
    let ty = k.dfg.ty(y).clone();
    let as_dt = |d: Dtype| match &ty {
        Type::Tile(dims, _) => Type::Tile(dims.clone(), ElemType::Known(d)),
        _ => Type::scalar(d),
    };
    let lit = |v: f64| {
        Attr::Expr(Expr {
            kind: ExprKind::Float(kir_ir::expr::F64Bits(v)),
            span: kir_ir::Span::default(),
        })
    };
    let mut n = 0;
    let mut put = |k: &mut Kernel, op: kir_ir::OpData, t: Type| {
        n += 1;
        insert_op(&mut k.dfg, b, pos + n - 1, op, vec![(t, None)])[0]
    };
    let cmp = |p: CmpPred, x: Value, z: Value| simple(Opcode::Cmp, vec![x, z], Some(Attr::Cmp(p)));
    let a = put(k, simple(Opcode::Abs, vec![y], None), ty.clone());
    let lo = put(
        k,
        simple(Opcode::Const, vec![], Some(lit(2f64.powi(-125)))),
        ty.clone(),
    );
    let hi = put(
        k,
        simple(Opcode::Const, vec![], Some(lit(2f64.powi(125)))),
        ty.clone(),
    );
    let ge = put(k, cmp(CmpPred::Ge, a, lo), as_dt(Dtype::I1));
    let le = put(k, cmp(CmpPred::Le, a, hi), as_dt(Dtype::I1));
    let nan = put(k, cmp(CmpPred::Ne, y, y), as_dt(Dtype::I1));
    let inr = put(k, simple(Opcode::And, vec![ge, le], None), as_dt(Dtype::I1));
    let ok = put(
        k,
        simple(Opcode::Or, vec![inr, nan], None),
        as_dt(Dtype::I1),
    );
    let oki = put(k, simple(Opcode::Cast, vec![ok], None), as_dt(Dtype::I32));
    let one = put(
        k,
        simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(1)))),
        as_dt(Dtype::I32),
    );
    put(
        k,
        simple(Opcode::Div, vec![one, oki], None),
        as_dt(Dtype::I32),
    );
    n
}

/// The bound of every `out`/`inout` entry param of module `m` (the front end's output, what the
/// backends lower) for a GPU run against the interpreter's run of `m`. Exact: integer and
/// mask arithmetic, comparisons, selects, min/max, casts, `floor`, and the correctly rounded
/// `sqrt.rn`, `div.rn`, `rcp.rn`. Bounded: `exp`, `exp2`, `sigmoid`, `silu` (`ex2.approx`,
/// amplified by |x| ≤ 104 as above), `rsqrt` (`rsqrt.approx`). Unbounded: `log`, `log2`, `tanh`
/// (absolute error bounds only), an f32 `add`/`sub` of a product (the assembler may contract
/// them into an FMA), `dot`, float `reduce sum` and float `atomic_add` (order and precision
/// of accumulation), and a bitcast of a possibly op-made NaN (the GPU's canonical NaN is
/// 0x7FFFFFFF, the CPU's differ). A zero's sign is never compared on the GPU (`max.NaN`/`min.NaN`
/// of ±0).
pub fn gpu_bounds(m: &Module) -> BTreeMap<String, Bound> {
    bounds(m, Model::Gpu, false)
        .0
        .into_iter()
        .map(|(k, b)| {
            (
                k,
                Bound {
                    zero_sign: true,
                    ..b
                },
            )
        })
        .collect()
}

/// The bounds of the entry's outputs under `model`; with `guarded`, also the divisors taken on
/// trust (see [`egraph_bounds_guarded`]).
fn bounds(m: &Module, model: Model, guarded: bool) -> (BTreeMap<String, Bound>, BTreeSet<Guard>) {
    let mut guards = BTreeSet::new();
    let mut bufs: BTreeMap<String, Bound> = BTreeMap::new();
    // The NaNs each buffer may hold: at first only given ones (inputs, the runner's poison).
    let mut nans: BTreeMap<String, Nan> = BTreeMap::new();
    // (kernel, binding kernel param -> buffer) in launch order.
    let launches: Vec<(&Kernel, Vec<(String, String)>)> = match &m.program {
        Some(p) => p
            .launches
            .iter()
            .filter_map(|l| {
                let (_, k) = m.kernel(&l.kernel)?;
                Some((
                    k,
                    l.args
                        .iter()
                        .map(|a| (a.param.clone(), a.arg.clone()))
                        .collect(),
                ))
            })
            .collect(),
        None => m
            .kernels
            .values()
            .map(|k| {
                let b = k
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.name.clone()))
                    .collect();
                (k, b)
            })
            .collect(),
    };
    for _ in 0..2 {
        for (k, bind) in &launches {
            let map: HashMap<&str, &str> =
                bind.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let mut w = Walk {
                k,
                model,
                vals: HashMap::new(),
                bufs: BTreeMap::new(),
                nans: BTreeMap::new(),
                guards: guarded.then(Vec::new),
            };
            for p in &k.params {
                if let ParamKind::Tensor(..) = p.kind {
                    let buf = map.get(p.name.as_str()).copied().unwrap_or(p.name.as_str());
                    w.bufs.insert(
                        p.name.clone(),
                        bufs.get(buf).copied().unwrap_or(Bound::EXACT),
                    );
                    w.nans
                        .insert(p.name.clone(), nans.get(buf).copied().unwrap_or(Nan::Given));
                }
            }
            w.block(k.body, Bound::EXACT);
            for divisor in w.guards.take().unwrap_or_default() {
                guards.insert(Guard {
                    kernel: k.name.clone(),
                    divisor,
                });
            }
            let buf_of = |p: &str| map.get(p).copied().unwrap_or(p).to_string();
            for (p, b) in w.bufs {
                let e = bufs.entry(buf_of(&p)).or_insert(Bound::EXACT);
                *e = e.join(b);
            }
            for (p, n) in w.nans {
                let e = nans.entry(buf_of(&p)).or_insert(Nan::Given);
                *e = (*e).max(n);
            }
        }
    }
    let mut out = BTreeMap::new();
    if let Some(ps) = m.entry_params() {
        for p in ps {
            if let ParamKind::Tensor(acc, _) = &p.kind {
                if acc.writes() {
                    out.insert(
                        p.name.clone(),
                        bufs.get(&p.name).copied().unwrap_or(Bound::EXACT),
                    );
                }
            }
        }
    }
    (out, guards)
}
