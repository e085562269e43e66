//! The `mask_split` pass: a loop over blocks whose body masks a score tile visits only the blocks some row sees, and skips the mask work on the blocks every row sees whole.
//!
//! **What qualifies.** A `for %iv = lo to hi step s` (s a positive constant) whose body holds, at
//! its top level, exactly one *score mask* `select %valid, %x, C` on a rank-2 tile where
//! - C is a constant −inf or 0.0 (what a masked-out score or probability contributes nothing
//!   with: exp2(−inf) = 0 in an online softmax, 0 in a product),
//! - `%x` is computed in the loop body from a `dot` (a score tile: q·kᵀ and what is derived from
//!   it), so column selects of loaded rows (the norms' `select(col < N, x, 0)`) do not qualify, and
//! - `%valid` is an and/or/not tree of comparisons (`lt le gt ge`) of integer expressions affine
//!   in the row index r = iota(axis 0), the column index c = iota(axis 1), the loop variable
//!   (coefficient ±1) and scalars that do not change across iterations (defined outside the loop,
//!   or computed inside it from such scalars only), and names the loop variable. Splats and
//!   broadcasts are looked through.
//!
//! **Mask facts.** Over the block r ∈ [0, R], c ∈ [0, BN − 1], each comparison f ≤ 0 is true
//! *somewhere* in the block when min f ≤ 0 and *everywhere* when max f ≤ 0 (the r and c parts of
//! f at their extremes). When f names `iv` that is a half-line of `iv`; when it does not it is
//! all-or-nothing: known if it follows from the facts below, else a runtime condition.
//! - `live = [a, b)`, every block some row sees: intervals, `and` intersects, `or` takes the hull
//!   (an over-approximation); emitted as scalar IR before the loop (an unbounded end is the
//!   constant ±S with S = 2³⁰, so hull and intersection stay exact for empty intervals).
//! - `%full`, true only when every row sees the whole block: per comparison, `iv + s ≤ U` (f
//!   increases with `iv`; U before the loop, so that for `j < L` it is L itself, with no new
//!   loop-invariant value), `iv ≥ G` (f decreases with `iv`), or the all-or-nothing condition;
//!   `and` of the parts for `and`, `or` of the parts for `or` (sufficient). This is the test a
//!   kernel author writes by hand (`n0 + BN ≤ L and n0 + BN − 1 ≤ causal_max(first row)`).
//! - Facts (`g ≤ 0` proven when g minus a non-negative combination of them is a constant ≤ 0):
//!   R ≥ 0 and R ≤ D − m − 1 for stored rows (below), m ≤ D − 1 for a row offset m into D, and
//!   `program_id a · c ≤ D − 1` when grid axis a has cdiv(D, c) programs. So the `rows < Sq`
//!   mask of a backward kernel is known true for every stored row, and `cols < Sk` is known true
//!   somewhere in key block n0.
//!
//! **The rewrite.** One loop, over `[L0, H)`: `L0` = the first grid point lo + k·s at or after
//! max(a, lo) (clamped to hi), `H = min(b, hi)`; the blocks no row sees are gone from the bounds.
//! In the body, `%ms_full` is computed where the select was, and the select becomes
//! `if %ms_full { yield %x } else { <the comparisons>; select %valid, %x, C }`: the pure ops of
//! the body that only the mask uses move into the else branch, so a full block does no mask
//! work. When `%full` folds to true the select is replaced by `%x`; when it folds to false the
//! select stays as it is. One body is emitted, not three loops (skipped / full / edge as
//! separate loops tripled the PTX of attention_fwd, made the 4-warp 128-row tile spill, and
//! needed a shared-memory ring per pipelined loop: docs/passes.md).
//!
//! **Rows that are never stored.** When the loop variable moves the columns (`c + iv` in every
//! comparison that names `iv`) and every value the select or the loop's carried values reach is
//! row-local (elementwise, reductions along axis 1, row broadcasts and reshapes, the first
//! operand and accumulator of a `dot`) and ends in `guard`ed stores whose row offset is `m` into
//! a tensor dim `D`, rows r > R = min(rows − 1, D − m − 1) are never stored: they are don't-care,
//! so a block is skipped or unmasked when every *stored* row agrees. Otherwise R = rows − 1.
//!
//! **Memory.** In that column case with the −inf form (a softmax over keys, attention's
//! forward), every load in the loop whose offset is the loop variable gets the mask
//! `iota + iv < K`, where K bounds the keys some stored row sees (the live bound with c ∈ [0, 0];
//! the loop's own end H when the loop ends at the loaded tensor's key count): keys at or past K
//! are never read (a KV cache may hold NaN there; a masked-out key reads 0, so 0·v never meets a
//! NaN). A load whose tensor dim at that offset is K itself (`cols < Sk` on a tensor of Sk keys)
//! is already bounded by it and gets no mask. The 0 form (probabilities of a backward pass)
//! reads its visited blocks whole, as written: attention_bwd has no key-capacity contract (every
//! key below Sk is valid), and the masks would cost a compare per loaded row on every block.
//!
//! **Contract.** Skipping a block whose scores are all masked, and zeroing the loads of keys no
//! stored row sees, rely on the score-mask meaning of the select: a masked position contributes
//! nothing to the carried values (the online softmax of an all −inf block is the identity; a
//! zero probability adds zero). Loops without a qualifying select are left alone.

use crate::kedit::{self, insert_op, simple};
use kir_ir::{
    Attr, Block, CmpPred, Dfg, Dtype, Effect, Expr, ExprKind, Kernel, Module, Offset, Op, OpData,
    Opcode, ParamKind, Type, Value, ValueDef,
};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The sentinel bound of an unbounded interval end (|values| stay far below it).
const S: i64 = 1 << 30;

/// Rewrites every qualifying loop of every kernel of `m`; see the module doc.
pub fn mask_split(m: &Module) -> Module {
    let mut out = m.clone();
    for k in out.kernels.values_mut() {
        split_kernel(k);
    }
    out
}

fn split_kernel(k: &mut Kernel) {
    // Loops in program order, outermost first. The rewrite keeps every op id (it adds ops and
    // moves some into a new `if`), so the list stays valid.
    let mut todo = vec![];
    collect_loops(&k.dfg, k.body, &mut todo);
    let mut changed = false;
    for (parent, l) in todo {
        if let Some(plan) = analyse(k, l) {
            apply(k, parent, l, plan);
            changed = true;
        }
    }
    if changed {
        kedit::dce(k);
        kedit::cse(k);
        kedit::dce(k);
    }
}

fn collect_loops(d: &Dfg, b: Block, out: &mut Vec<(Block, Op)>) {
    for &o in &d.blocks[b].ops {
        if d.ops[o].opcode == Opcode::For {
            out.push((b, o));
        }
        for &r in &d.ops[o].regions {
            collect_loops(d, r, out);
        }
    }
}

/// An affine integer expression: `iv·iv + r·row + c·col + Σ coef·value + k`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Lin {
    iv: i64,
    r: i64,
    c: i64,
    terms: BTreeMap<Value, i64>,
    k: i64,
}

impl Lin {
    fn konst(k: i64) -> Lin {
        Lin {
            k,
            ..Lin::default()
        }
    }
    fn add(mut self, o: &Lin, sign: i64) -> Lin {
        self.iv += sign * o.iv;
        self.r += sign * o.r;
        self.c += sign * o.c;
        self.k += sign * o.k;
        for (&v, &c) in &o.terms {
            *self.terms.entry(v).or_default() += sign * c;
        }
        self.terms.retain(|_, c| *c != 0);
        self
    }
    fn scale(mut self, f: i64) -> Lin {
        self.iv *= f;
        self.r *= f;
        self.c *= f;
        self.k *= f;
        for c in self.terms.values_mut() {
            *c *= f;
        }
        self.terms.retain(|_, c| *c != 0);
        self
    }
}

/// A mask: comparisons `lin ≤ 0` under and/or, or a constant.
#[derive(Clone, Debug)]
enum B {
    Atom(Lin),
    And(Vec<B>),
    Or(Vec<B>),
    Const(bool),
}

impl B {
    fn not(self) -> B {
        match self {
            // ¬(f ≤ 0) ⇔ f ≥ 1 ⇔ 1 − f ≤ 0 (integers).
            B::Atom(f) => B::Atom(Lin::konst(1).add(&f, -1)),
            B::And(v) => B::Or(v.into_iter().map(B::not).collect()),
            B::Or(v) => B::And(v.into_iter().map(B::not).collect()),
            B::Const(b) => B::Const(!b),
        }
    }
    fn has_iv(&self) -> bool {
        match self {
            B::Atom(f) => f.iv != 0,
            B::And(v) | B::Or(v) => v.iter().any(B::has_iv),
            B::Const(_) => false,
        }
    }
    fn atoms<'a>(&'a self, out: &mut Vec<&'a Lin>) {
        match self {
            B::Atom(f) => out.push(f),
            B::And(v) | B::Or(v) => v.iter().for_each(|b| b.atoms(out)),
            B::Const(_) => {}
        }
    }
}

/// Reads the loop body's dataflow.
struct Reader<'a> {
    d: &'a Dfg,
    /// Ops inside the loop (any depth).
    inside: HashSet<Op>,
    body: Block,
    iv: Value,
}

impl Reader<'_> {
    fn def(&self, v: Value) -> Option<&OpData> {
        match self.d.values[v].def {
            ValueDef::Result(o, _) => Some(&self.d.ops[o]),
            ValueDef::Arg(..) => None,
        }
    }
    /// True when `v` does not change across iterations (a scalar from outside, or computed in
    /// the loop from such scalars by pure scalar ops).
    fn invariant(&self, v: Value) -> bool {
        if v == self.iv {
            return false;
        }
        match self.d.values[v].def {
            ValueDef::Arg(..) => !self.arg_inside(v),
            ValueDef::Result(o, _) => {
                if !self.inside.contains(&o) {
                    return true;
                }
                let od = &self.d.ops[o];
                od.regions.is_empty()
                    && od.opcode.effect() == Effect::Pure
                    && od.uses().iter().all(|&u| self.invariant(u))
            }
        }
    }
    fn arg_inside(&self, v: Value) -> bool {
        match self.d.values[v].def {
            ValueDef::Arg(b, _) => {
                b == self.body
                    || self
                        .inside
                        .iter()
                        .any(|&o| self.d.ops[o].regions.contains(&b))
            }
            _ => false,
        }
    }
    fn int_lit(&self, v: Value) -> Option<i64> {
        let od = self.def(v)?;
        if od.opcode != Opcode::Const {
            return None;
        }
        match &od.lead {
            Some(Attr::Expr(e)) => e.as_int(),
            _ => None,
        }
    }
    fn float_lit(&self, v: Value) -> Option<f64> {
        let od = self.def(v)?;
        if od.opcode != Opcode::Const {
            return None;
        }
        match &od.lead {
            Some(Attr::Expr(e)) => match e.eval(&|_| None, false).ok()? {
                kir_ir::EvalVal::Float(x) => Some(x),
                kir_ir::EvalVal::Int(i) => Some(i as f64),
                _ => None,
            },
            _ => None,
        }
    }

    /// The affine form of an i32 value, if it has one.
    fn lin(&self, v: Value) -> Option<Lin> {
        if v == self.iv {
            return Some(Lin {
                iv: 1,
                ..Lin::default()
            });
        }
        let ty = self.d.ty(v);
        if ty.dtype() != Some(Dtype::I32) {
            return None;
        }
        // A scalar from outside the loop stays one term (the bounds then name it).
        let outside = match self.d.values[v].def {
            ValueDef::Result(o, _) => !self.inside.contains(&o),
            ValueDef::Arg(..) => !self.arg_inside(v),
        };
        let def = if outside && ty.is_scalar() && self.int_lit(v).is_none() {
            None
        } else {
            self.def(v)
        };
        if let Some(od) = def {
            match od.opcode {
                Opcode::Const => {
                    if let Some(i) = self.int_lit(v) {
                        return Some(Lin::konst(i));
                    }
                }
                Opcode::Iota => {
                    let axis = match od.attr("axis") {
                        Some(Attr::Expr(e)) => e.as_int()?,
                        None => 0,
                        _ => return None,
                    };
                    let shape = ty.shape()?;
                    if shape.len() != 2 || shape[axis as usize] == 1 {
                        return (shape.get(axis as usize) == Some(&1)).then(Lin::default);
                    }
                    return Some(if axis == 0 {
                        Lin {
                            r: 1,
                            ..Lin::default()
                        }
                    } else {
                        Lin {
                            c: 1,
                            ..Lin::default()
                        }
                    });
                }
                Opcode::Splat | Opcode::Broadcast => return self.lin(od.operands[0]),
                Opcode::Add | Opcode::Sub => {
                    let a = self.lin(od.operands[0])?;
                    let b = self.lin(od.operands[1])?;
                    return Some(a.add(&b, if od.opcode == Opcode::Add { 1 } else { -1 }));
                }
                Opcode::Neg => return Some(self.lin(od.operands[0])?.scale(-1)),
                Opcode::Mul => {
                    let (a, b) = (od.operands[0], od.operands[1]);
                    if let Some(f) = self.int_lit(b) {
                        return Some(self.lin(a)?.scale(f));
                    }
                    if let Some(f) = self.int_lit(a) {
                        return Some(self.lin(b)?.scale(f));
                    }
                }
                _ => {}
            }
        }
        // Anything else: an opaque scalar, if it does not change across iterations.
        if ty.is_scalar() && self.invariant(v) {
            let mut terms = BTreeMap::new();
            terms.insert(v, 1);
            return Some(Lin {
                terms,
                ..Lin::default()
            });
        }
        None
    }

    /// The mask tree of an i1 value.
    fn mask(&self, v: Value) -> Option<B> {
        let od = self.def(v)?;
        match od.opcode {
            Opcode::And | Opcode::Or => {
                let a = self.mask(od.operands[0])?;
                let b = self.mask(od.operands[1])?;
                Some(if od.opcode == Opcode::And {
                    B::And(vec![a, b])
                } else {
                    B::Or(vec![a, b])
                })
            }
            Opcode::Not => Some(self.mask(od.operands[0])?.not()),
            Opcode::Splat | Opcode::Broadcast => self.mask(od.operands[0]),
            Opcode::Const => match &od.lead {
                Some(Attr::Expr(e)) => match e.eval(&|_| None, false).ok()? {
                    kir_ir::EvalVal::Int(i) => Some(B::Const(i != 0)),
                    kir_ir::EvalVal::Bool(b) => Some(B::Const(b)),
                    _ => None,
                },
                _ => None,
            },
            Opcode::Cmp => {
                let a = self.lin(od.operands[0])?;
                let b = self.lin(od.operands[1])?;
                let d = a.add(&b, -1); // a − b
                let one = Lin::konst(1);
                Some(B::Atom(match od.cmp_pred()? {
                    CmpPred::Le => d,
                    CmpPred::Lt => d.add(&one, 1),
                    CmpPred::Ge => d.scale(-1),
                    CmpPred::Gt => d.scale(-1).add(&one, 1),
                    CmpPred::Eq | CmpPred::Ne => return None,
                }))
            }
            _ => None,
        }
    }

    /// True when `v` is computed inside the loop from a `dot` (through any ops of the loop, and
    /// the values nested loops and `if`s yield).
    fn computed_from_dot(&self, v: Value, seen: &mut HashSet<Value>) -> bool {
        if !seen.insert(v) {
            return false;
        }
        let ValueDef::Result(o, _) = self.d.values[v].def else {
            return false;
        };
        if !self.inside.contains(&o) {
            return false;
        }
        let od = &self.d.ops[o];
        // A loop or `if` inside the body: what its regions yield.
        let yielded = od.regions.iter().flat_map(|&r| {
            let last = self.d.blocks[r].ops.last().map(|&y| &self.d.ops[y]);
            last.filter(|y| y.opcode == Opcode::Yield)
                .map(|y| y.operands.clone())
                .unwrap_or_default()
        });
        od.opcode == Opcode::Dot
            || od
                .uses()
                .into_iter()
                .chain(yielded)
                .any(|u| self.computed_from_dot(u, seen))
    }
}

/// What [`analyse`] found for one loop.
struct Plan {
    /// The score-mask select and its mask tree.
    select: Op,
    mask: B,
    /// (dim name, row offset) per guarded store, when only some rows are stored.
    rows_stored: Vec<(String, Value)>,
    /// Tile rows and columns of the select.
    rows: i64,
    cols: i64,
    /// True when the loop variable moves the columns (then loads at `iv` get key masks).
    col_coupled: bool,
    /// True for the −inf form (scores of a softmax over the columns): then loads at `iv` get
    /// key masks.
    softmax: bool,
    step: i64,
}

fn analyse(k: &Kernel, l: Op) -> Option<Plan> {
    let d = &k.dfg;
    let lop = &d.ops[l];
    let body = *lop.regions.first()?;
    let iv = *d.blocks[body].args.first()?;
    let mut inside = HashSet::new();
    collect_ops(d, body, &mut inside);
    let rd = Reader {
        d,
        inside,
        body,
        iv,
    };
    let step = rd.int_lit(lop.operands[2]).filter(|&s| s > 0)?;
    // The one score mask of the body (top level).
    let mut found = vec![];
    for &o in &d.blocks[body].ops {
        let od = &d.ops[o];
        if od.opcode != Opcode::Select {
            continue;
        }
        let Some(shape) = d.ty(od.results[0]).shape().filter(|s| s.len() == 2) else {
            continue;
        };
        let Some(c) = rd.float_lit(od.operands[2]) else {
            continue;
        };
        if !(c == f64::NEG_INFINITY || c == 0.0)
            || d.ty(od.operands[0]).shape().as_ref() != Some(&shape)
            || !rd.computed_from_dot(od.operands[1], &mut HashSet::new())
        {
            continue;
        }
        if let Some(m) = rd.mask(od.operands[0]) {
            if m.has_iv() {
                found.push((o, m, shape, c == f64::NEG_INFINITY));
            }
        }
    }
    if found.len() != 1 {
        return None;
    }
    let (select, mask, shape, softmax) = found.pop()?;
    let mut atoms = vec![];
    mask.atoms(&mut atoms);
    if atoms.iter().any(|a| a.iv.abs() > 1) {
        return None;
    }
    let col_coupled = atoms.iter().all(|a| a.iv == 0 || a.iv == a.c);
    let rows_stored = if col_coupled {
        stored_rows(k, l, select, shape[0] as i64).unwrap_or_default()
    } else {
        vec![]
    };
    Some(Plan {
        select,
        mask,
        rows_stored,
        rows: shape[0] as i64,
        cols: shape[1] as i64,
        col_coupled,
        softmax,
        step,
    })
}

fn collect_ops(d: &Dfg, b: Block, out: &mut HashSet<Op>) {
    for &o in &d.blocks[b].ops {
        out.insert(o);
        for &r in &d.ops[o].regions {
            collect_ops(d, r, out);
        }
    }
}

/// The guarded stores that bound which rows matter, if everything the select and the loop's
/// carried values reach is row-local (see the module doc); `None` if anything mixes rows.
fn stored_rows(k: &Kernel, l: Op, select: Op, rows: i64) -> Option<Vec<(String, Value)>> {
    let d = &k.dfg;
    let body = d.ops[l].regions[0];
    let mut tainted: HashSet<Value> = HashSet::new();
    tainted.insert(d.ops[select].results[0]);
    tainted.extend(d.blocks[body].args.iter().skip(1).copied());
    tainted.extend(d.ops[l].results.iter().copied());
    let lead = |v: Value| {
        d.ty(v)
            .shape()
            .and_then(|s| s.first().copied())
            .map(|x| x as i64)
    };
    let mut stores = vec![];
    // Walk every op of the kernel in order (values are defined before use), propagating.
    let mut order = vec![];
    walk(d, k.body, &mut order);
    for o in order {
        let od = &d.ops[o];
        let uses = od.uses();
        if !uses.iter().any(|u| tainted.contains(u)) {
            continue;
        }
        let all_rows = |vs: &[Value]| {
            vs.iter()
                .all(|&v| !tainted.contains(&v) || lead(v) == Some(rows))
        };
        match od.opcode {
            Opcode::Yield => {
                // Only the loop body's own yield (carried values) may see row data.
                if !d.blocks[body].ops.contains(&o) {
                    return None;
                }
            }
            Opcode::Store | Opcode::AtomicAdd => {
                let t = od.tensor.as_ref()?;
                let val = *od.operands.first()?;
                if !tainted.contains(&val)
                    || uses.iter().filter(|u| tainted.contains(u)).count() != 1
                    || !od.attrs.iter().any(|(k, _)| k == "guard")
                {
                    return None;
                }
                let shape = d.ty(val).shape()?;
                let p = k.param(&t.param)?;
                let ParamKind::Tensor(_, tt) = &p.kind else {
                    return None;
                };
                let pos = tt.dims.len().checked_sub(shape.len())?;
                let ExprKind::Ident(dim) = &tt.dims[pos].kind else {
                    return None;
                };
                let Offset::Value(off) = t.offsets[pos] else {
                    return None;
                };
                if lead(val) != Some(rows) {
                    return None;
                }
                stores.push((dim.clone(), off));
            }
            Opcode::Reduce => {
                let axis = match od.attr("axis") {
                    Some(Attr::Expr(e)) => e.as_int()?,
                    _ => return None,
                };
                if axis == 0 || !all_rows(&uses) || lead(od.results[0]) != Some(rows) {
                    return None;
                }
                tainted.extend(od.results.iter().copied());
            }
            Opcode::Dot => {
                if tainted.contains(&od.operands[1]) || !all_rows(&uses) {
                    return None;
                }
                tainted.extend(od.results.iter().copied());
            }
            Opcode::Transpose | Opcode::For | Opcode::If | Opcode::StaticIf | Opcode::Load => {
                return None
            }
            _ => {
                let class = od.opcode.info().class;
                let ok = matches!(
                    class,
                    kir_ir::OpClass::Unary | kir_ir::OpClass::Binary | kir_ir::OpClass::Shape
                ) || matches!(
                    od.opcode,
                    Opcode::Select | Opcode::Cmp | Opcode::Cast | Opcode::Bitcast
                );
                if !ok
                    || matches!(od.opcode, Opcode::Splat | Opcode::Iota)
                    || !all_rows(&uses)
                    || od.results.iter().any(|&r| lead(r) != Some(rows))
                {
                    return None;
                }
                tainted.extend(od.results.iter().copied());
            }
        }
    }
    (!stores.is_empty()).then_some(stores)
}

fn walk(d: &Dfg, b: Block, out: &mut Vec<Op>) {
    for &o in &d.blocks[b].ops {
        for &r in &d.ops[o].regions {
            walk(d, r, out);
        }
        out.push(o);
    }
}

/// Emits scalar i32 arithmetic into a block being built (spliced before the loop later).
struct Em<'a> {
    k: &'a mut Kernel,
    b: Block,
    consts: HashMap<i64, Value>,
    /// The constant each emitted constant value holds (for folding).
    known: HashMap<Value, i64>,
    dims: HashMap<String, Value>,
    hoisted: HashMap<Value, Value>,
    inside: HashSet<Op>,
    /// Ops emitted so far, by opcode, lead and operands: equal requests give one value.
    memo: HashMap<String, Value>,
}

impl Em<'_> {
    fn i32(&self) -> Type {
        Type::scalar(Dtype::I32)
    }
    fn konst(&mut self, v: i64) -> Value {
        if let Some(&c) = self.consts.get(&v) {
            return c;
        }
        let op = simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(v))));
        let t = self.i32();
        let id = self.k.dfg.append_op(self.b, op, vec![(t, None)]);
        let r = self.k.dfg.ops[id].results[0];
        self.consts.insert(v, r);
        self.known.insert(r, v);
        r
    }
    /// The integer a value is known to hold (an emitted or an existing i32 `const`).
    fn lit(&self, v: Value) -> Option<i64> {
        if let Some(&x) = self.known.get(&v) {
            return Some(x);
        }
        let ValueDef::Result(o, _) = self.k.dfg.values[v].def else {
            return None;
        };
        let od = &self.k.dfg.ops[o];
        match (&od.opcode, &od.lead) {
            (Opcode::Const, Some(Attr::Expr(e))) if self.k.dfg.ty(v).is_scalar() => e.as_int(),
            _ => None,
        }
    }
    fn op(&mut self, opc: Opcode, lead: Option<Attr>, xs: Vec<Value>, ty: Type) -> Value {
        let key = format!("{opc:?}|{lead:?}|{xs:?}|{ty}");
        if let Some(&v) = self.memo.get(&key) {
            return v;
        }
        let id = self
            .k
            .dfg
            .append_op(self.b, simple(opc, xs, lead), vec![(ty, None)]);
        let v = self.k.dfg.ops[id].results[0];
        self.memo.insert(key, v);
        v
    }
    /// Names the value `v` (if it is emitted here and unnamed) for readable dumps.
    fn name(&mut self, v: Value, n: &str) -> Value {
        let emitted = matches!(self.k.dfg.values[v].def,
            ValueDef::Result(o, _) if self.k.dfg.blocks[self.b].ops.contains(&o));
        if emitted && self.k.dfg.values[v].name.is_none() && self.lit(v).is_none() {
            self.k.dfg.values[v].name = Some(n.into());
        }
        v
    }
    /// A binary i32 op, folded when both sides are known constants, and simplified for the
    /// neutral operands (x + 0, x − 0, x·1, min with S, max with −S), the absorbing ones (max
    /// with S, min with −S) and equal operands of min and max.
    fn bin(&mut self, opc: Opcode, a: Value, b: Value) -> Value {
        let (ka, kb) = (self.lit(a), self.lit(b));
        if let (Some(x), Some(y)) = (ka, kb) {
            let f = match opc {
                Opcode::Add => Some(x + y),
                Opcode::Sub => Some(x - y),
                Opcode::Mul => Some(x * y),
                Opcode::Min => Some(x.min(y)),
                Opcode::Max => Some(x.max(y)),
                _ => None,
            };
            if let Some(f) = f.filter(|f| f.abs() <= S) {
                return self.konst(f);
            }
        }
        match (opc, ka, kb) {
            (Opcode::Add, Some(0), _) | (Opcode::Mul, Some(1), _) => return b,
            (Opcode::Add | Opcode::Sub, _, Some(0)) | (Opcode::Mul, _, Some(1)) => return a,
            (Opcode::Min, Some(x), _) | (Opcode::Max, Some(x), _)
                if x == if opc == Opcode::Min { S } else { -S } =>
            {
                return b
            }
            (Opcode::Min, _, Some(x)) | (Opcode::Max, _, Some(x))
                if x == if opc == Opcode::Min { S } else { -S } =>
            {
                return a
            }
            (Opcode::Max, Some(x), _) | (Opcode::Min, Some(x), _)
                if x == if opc == Opcode::Max { S } else { -S } =>
            {
                return a
            }
            (Opcode::Max, _, Some(x)) | (Opcode::Min, _, Some(x))
                if x == if opc == Opcode::Max { S } else { -S } =>
            {
                return b
            }
            (Opcode::Min | Opcode::Max, _, _) if a == b => return a,
            _ => {}
        }
        let t = self.i32();
        self.op(opc, None, vec![a, b], t)
    }
    fn min(&mut self, a: Value, b: Value) -> Value {
        self.minmax(Opcode::Min, a, b)
    }
    fn max(&mut self, a: Value, b: Value) -> Value {
        self.minmax(Opcode::Max, a, b)
    }
    /// min/max(a, b), also simplified when one side is already that op of the other:
    /// min(min(b, c), b) = min(b, c).
    fn minmax(&mut self, opc: Opcode, a: Value, b: Value) -> Value {
        let absorbs = |x: Value, y: Value| {
            matches!(self.k.dfg.values[x].def, ValueDef::Result(o, _)
                if self.k.dfg.ops[o].opcode == opc && self.k.dfg.ops[o].operands.contains(&y))
        };
        if absorbs(a, b) {
            return a;
        }
        if absorbs(b, a) {
            return b;
        }
        self.bin(opc, a, b)
    }
    fn cmp(&mut self, p: CmpPred, a: Value, b: Value) -> Value {
        self.op(
            Opcode::Cmp,
            Some(Attr::Cmp(p)),
            vec![a, b],
            Type::scalar(Dtype::I1),
        )
    }
    fn sel(&mut self, c: Value, a: Value, b: Value) -> Value {
        let t = self.i32();
        self.op(Opcode::Select, None, vec![c, a, b], t)
    }
    fn dim(&mut self, name: &str) -> Value {
        if let Some(&v) = self.dims.get(name) {
            return v;
        }
        let t = self.i32();
        let op = simple(
            Opcode::Dim,
            vec![],
            Some(Attr::Name(name.into(), Default::default())),
        );
        let id = self.k.dfg.append_op(self.b, op, vec![(t, None)]);
        let v = self.k.dfg.ops[id].results[0];
        self.dims.insert(name.into(), v);
        v
    }
    /// A value usable before the loop equal to invariant `v` (cloning its defining chain out
    /// of the loop when it is computed inside).
    fn hoist(&mut self, v: Value) -> Value {
        if let Some(&h) = self.hoisted.get(&v) {
            return h;
        }
        let ValueDef::Result(o, i) = self.k.dfg.values[v].def else {
            return v;
        };
        if !self.inside.contains(&o) {
            return v;
        }
        let mut od = self.k.dfg.ops[o].clone();
        od.operands = od.operands.iter().map(|&x| self.hoist(x)).collect();
        od.doc.clear();
        let tys = od
            .results
            .iter()
            .map(|&r| (self.k.dfg.ty(r).clone(), None))
            .collect();
        let results = od.results.clone();
        let id = self.k.dfg.append_op(self.b, od, tys);
        for (r, nr) in results.iter().zip(self.k.dfg.ops[id].results.clone()) {
            self.hoisted.insert(*r, nr);
        }
        self.k.dfg.ops[id].results[i as usize]
    }
    /// `f` (no row, column or loop part) as a value: positive terms first, then the negative
    /// ones, then the constant.
    fn lin(&mut self, f: &Lin) -> Value {
        debug_assert!(f.iv == 0 && f.r == 0 && f.c == 0);
        let mut acc: Option<Value> = None;
        let mut terms: Vec<(Value, i64)> = f.terms.iter().map(|(&v, &c)| (v, c)).collect();
        terms.sort_by_key(|&(_, c)| c < 0);
        for (v, c) in terms {
            let h = self.hoist(v);
            let mag = if c.abs() == 1 {
                h
            } else {
                let cv = self.konst(c.abs());
                self.bin(Opcode::Mul, h, cv)
            };
            acc = Some(match (acc, c > 0) {
                (None, true) => mag,
                (None, false) => {
                    let z = self.konst(0);
                    self.bin(Opcode::Sub, z, mag)
                }
                (Some(a), true) => self.bin(Opcode::Add, a, mag),
                (Some(a), false) => self.bin(Opcode::Sub, a, mag),
            });
        }
        match acc {
            None => self.konst(f.k),
            Some(a) if f.k < 0 => {
                let kv = self.konst(-f.k);
                self.bin(Opcode::Sub, a, kv)
            }
            Some(a) => {
                let kv = self.konst(f.k);
                self.bin(Opcode::Add, a, kv)
            }
        }
    }
}

/// An interval [lo, hi) of the loop variable.
#[derive(Clone, Copy)]
struct Iv {
    lo: Value,
    hi: Value,
}

/// The block's index ranges, r ∈ [0, rmax] and c ∈ [0, cmax], and facts `f ≤ 0` that hold
/// whenever some row is stored (rmax ≥ 0, rmax ≤ D − m − 1, m ≤ D − 1 per guarded store).
struct Dom {
    rmax: Value,
    /// rmax when it is a constant (no stored-row bound).
    rmax_lit: Option<i64>,
    cmax: i64,
    facts: Vec<Lin>,
}

/// `f` with its row and column parts replaced by their min (`want_max` false) or max over the
/// block: α·r becomes α·rmax or 0, β·c becomes β·cmax or 0 (and the loop part dropped).
fn extreme(f: &Lin, dom: &Dom, want_max: bool) -> Lin {
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
fn provably_le0(g: &Lin, dom: &Dom) -> bool {
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
fn known(g: &Lin, dom: &Dom) -> Option<bool> {
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
fn interval(em: &mut Em, b: &B, dom: &Dom) -> Iv {
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
enum Cond {
    K(bool),
    Pre(Value),
    In(Value),
}

/// Builds the full test: in-body ops go to block `inb`, loop-invariant ones through `em`.
struct Full {
    inb: Block,
    iv: Value,
    step: Value,
    /// `iv + step`, once.
    end: Option<Value>,
}

impl Full {
    fn op(&self, em: &mut Em, opc: Opcode, lead: Option<Attr>, xs: Vec<Value>, ty: Type) -> Value {
        let id =
            em.k.dfg
                .append_op(self.inb, simple(opc, xs, lead), vec![(ty, None)]);
        em.k.dfg.ops[id].results[0]
    }
    fn cmp(&self, em: &mut Em, p: CmpPred, a: Value, b: Value) -> Cond {
        Cond::In(self.op(
            em,
            Opcode::Cmp,
            Some(Attr::Cmp(p)),
            vec![a, b],
            Type::scalar(Dtype::I1),
        ))
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
                Cond::In(self.op(em, opc, None, vec![x, y], Type::scalar(Dtype::I1)))
            }
        }
    }
    /// A condition under which `b` holds everywhere in the block at the current `iv`: exact for
    /// comparisons and `and`; for `or`, the or of its parts' conditions (sufficient).
    fn cond(&mut self, em: &mut Em, b: &B, dom: &Dom) -> Cond {
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
                                let e = self.op(
                                    em,
                                    Opcode::Add,
                                    None,
                                    vec![self.iv, self.step],
                                    Type::scalar(Dtype::I32),
                                );
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

fn apply(k: &mut Kernel, parent: Block, l: Op, plan: Plan) {
    let body = k.dfg.ops[l].regions[0];
    let iv = k.dfg.blocks[body].args[0];
    let mut inside = HashSet::new();
    collect_ops(&k.dfg, body, &mut inside);
    let (lo, hi, step_v) = {
        let od = &k.dfg.ops[l];
        (od.operands[0], od.operands[1], od.operands[2])
    };
    // The loads that get key masks (column case): at `iv` along one tile axis.
    let key_loads = if plan.col_coupled && plan.softmax {
        key_loads(k, body, iv)
    } else {
        vec![]
    };
    // Dims the kernel already reads at its top, before the loop.
    let top_pos = top_position(k, l);
    let mut dims = HashMap::new();
    for &o in &k.dfg.blocks[k.body].ops[..top_pos] {
        let od = &k.dfg.ops[o];
        if let (Opcode::Dim, Some(Attr::Name(n, _))) = (od.opcode, &od.lead) {
            dims.entry(n.clone()).or_insert(od.results[0]);
        }
    }
    let offsets = program_offsets(k, top_pos);
    let tmp = k.dfg.new_block();
    let inb = k.dfg.new_block();
    let mut em = Em {
        k,
        b: tmp,
        consts: HashMap::new(),
        known: HashMap::new(),
        dims,
        hoisted: HashMap::new(),
        inside,
        memo: HashMap::new(),
    };
    // Stored rows: r ≤ rmax, with the facts that bound it.
    let mut rmax = em.konst(plan.rows - 1);
    let mut seen = HashSet::new();
    let mut bounds = vec![];
    for (dim, off) in plan
        .rows_stored
        .iter()
        .filter(|x| seen.insert((*x).clone()))
    {
        let dv = em.dim(dim);
        let one = em.konst(1);
        let a = em.bin(Opcode::Sub, dv, *off);
        let last = em.bin(Opcode::Sub, a, one);
        rmax = em.min(rmax, last);
        bounds.push((dv, *off));
    }
    let rmax = em.name(rmax, "ms_last_row");
    let term = |v: Value, c: i64| Lin {
        terms: BTreeMap::from([(v, c)]),
        ..Lin::default()
    };
    let mut facts = vec![];
    if !bounds.is_empty() {
        // Some row is stored, or nothing the loop computes matters.
        facts.push(term(rmax, -1));
        for (dv, off) in bounds {
            // rmax ≤ D − m − 1 and m ≤ D − 1.
            facts.push(
                term(rmax, 1)
                    .add(&term(dv, 1), -1)
                    .add(&term(off, 1), 1)
                    .add(&Lin::konst(1), 1),
            );
            facts.push(term(off, 1).add(&term(dv, 1), -1).add(&Lin::konst(1), 1));
        }
    }
    for (v, dim) in offsets {
        // A program's offset along a grid axis of cdiv(D, c) programs is at most D − 1.
        let dv = em.dim(&dim);
        facts.push(term(v, 1).add(&term(dv, 1), -1).add(&Lin::konst(1), 1));
    }
    let dom = Dom {
        rmax,
        rmax_lit: em.lit(rmax),
        cmax: plan.cols - 1,
        facts,
    };
    let live = interval(&mut em, &plan.mask, &dom);
    // L0: the first grid point lo + j·step at or after live.lo (clamped into [lo, hi]).
    let c0 = em.max(live.lo, lo);
    let l0 = if c0 == lo || em.lit(c0).is_some() && em.lit(c0) == em.lit(lo) {
        lo
    } else {
        let c = em.min(c0, hi);
        let d = em.bin(Opcode::Sub, c, lo);
        let sm1 = em.konst(plan.step - 1);
        let n = em.bin(Opcode::Add, d, sm1);
        let q = em.bin(Opcode::Div, n, step_v);
        let m = em.bin(Opcode::Mul, q, step_v);
        em.bin(Opcode::Add, lo, m)
    };
    let l0 = em.name(l0, "ms_lo");
    let h = em.min(live.hi, hi);
    let h = em.name(h, "ms_hi");
    // The key bound of loads (column case): keys some stored row sees are below it.
    let mut key_loads = key_loads;
    let key_hi = if key_loads.is_empty() {
        None
    } else {
        let dom1 = Dom {
            rmax: dom.rmax,
            rmax_lit: dom.rmax_lit,
            cmax: 0,
            facts: dom.facts.clone(),
        };
        let keys = interval(&mut em, &plan.mask, &dom1);
        // When the loop ends at the loaded tensors' key count, keys past it do not exist: the
        // bound is min(K, hi), the loop's own bound H whenever K is the live bound (the usual
        // case, and what warp_specialize recognises as a key mask of the loop's range).
        let dim_of = |em: &Em, d: &Option<String>| d.as_ref().and_then(|d| em.dims.get(d)).copied();
        let key_hi = if key_loads.iter().all(|(_, _, d)| dim_of(&em, d) == Some(hi)) {
            em.min(keys.hi, hi)
        } else {
            keys.hi
        };
        // A load whose tensor dim there is the bound itself is already bounded by it.
        key_loads.retain(|(_, _, d)| dim_of(&em, d) != Some(key_hi));
        Some(em.name(key_hi, "ms_key_hi"))
    };
    // Key indices of the loaded tiles (loop-invariant iotas).
    let mut iotas = HashMap::new();
    for &(o, axis, _) in &key_loads {
        let shape =
            em.k.dfg
                .ty(em.k.dfg.ops[o].results[0])
                .shape()
                .expect("a tile load");
        let ti = Type::tile(&shape, Dtype::I32);
        let mut iota = simple(Opcode::Iota, vec![], None);
        iota.attrs = vec![("axis".into(), Attr::Expr(Expr::int(axis as i64)))];
        let id =
            em.k.dfg
                .append_op(tmp, iota, vec![(ti, Some("ms_keys".into()))]);
        iotas.insert(o, em.k.dfg.ops[id].results[0]);
    }
    // The full test.
    let mut fb = Full {
        inb,
        iv,
        step: step_v,
        end: None,
    };
    let full = fb.cond(&mut em, &plan.mask, &dom);
    let k = em.k;
    // Splice the scalar code in before the loop, and bound the loop by [L0, H).
    let new_ops = std::mem::take(&mut k.dfg.blocks[tmp].ops);
    let pos = k.dfg.blocks[parent]
        .ops
        .iter()
        .position(|&o| o == l)
        .expect("the loop is in its parent");
    k.dfg.blocks[parent].ops.splice(pos..pos, new_ops);
    k.dfg.ops[l].operands[0] = l0;
    k.dfg.ops[l].operands[1] = h;
    // Full blocks skip the mask work.
    let in_ops = std::mem::take(&mut k.dfg.blocks[inb].ops);
    match full {
        Cond::K(true) => {
            let sel = &k.dfg.ops[plan.select];
            let (r, x) = (sel.results[0], sel.operands[1]);
            kedit::replace_uses(&mut k.dfg, r, x, None);
        }
        Cond::K(false) => {}
        Cond::Pre(f) | Cond::In(f) => {
            k.dfg.values[f].name = Some("ms_full".into());
            guard_select(k, body, plan.select, in_ops, f);
        }
    }
    if let Some(kh) = key_hi {
        for (o, _, _) in key_loads {
            mask_load(k, body, o, iotas[&o], kh);
        }
    }
}

/// The values `program_id a · c` of the kernel's top block (before position `end`) whose grid
/// axis a has cdiv(D, c) programs, with D: each is at most D − 1.
fn program_offsets(k: &Kernel, end: usize) -> Vec<(Value, String)> {
    let d = &k.dfg;
    let def = |v: Value| match d.values[v].def {
        ValueDef::Result(o, _) => Some(&d.ops[o]),
        ValueDef::Arg(..) => None,
    };
    let axis = |v: Value| {
        let od = def(v)?;
        match (od.opcode, &od.lead) {
            (Opcode::ProgramId, Some(Attr::Expr(e))) => e.as_int(),
            _ => None,
        }
    };
    let lit = |v: Value| {
        let od = def(v)?;
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

/// The position in the kernel's top block of the op holding `l` (or of `l`).
fn top_position(k: &Kernel, l: Op) -> usize {
    let mut target = l;
    loop {
        if let Some(p) = k.dfg.blocks[k.body].ops.iter().position(|&o| o == target) {
            return p;
        }
        let holder = k
            .dfg
            .ops
            .iter()
            .find(|(_, od)| {
                od.regions
                    .iter()
                    .any(|&r| k.dfg.blocks[r].ops.contains(&target))
            })
            .map(|(o, _)| o)
            .expect("every op is in a block of the kernel");
        target = holder;
    }
}

/// Replaces `select %valid, %x, C` (at the top of loop body `body`) by `full_ops` (which
/// compute `%full`) and `if %full { yield %x } else { <mask ops>; select %valid, %x, C }`: the
/// pure ops of the body that only the mask uses move into the else branch.
fn guard_select(k: &mut Kernel, body: Block, select: Op, full_ops: Vec<Op>, full: Value) {
    let d = &mut k.dfg;
    let ops = d.blocks[body].ops.clone();
    let at = ops
        .iter()
        .position(|&o| o == select)
        .expect("the select is in the body");
    let (valid, x) = (d.ops[select].operands[0], d.ops[select].operands[1]);
    let pos_of: HashMap<Op, usize> = ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    // Top-level body ops the value (and the else constant) needs stay where they are.
    let reach = |d: &Dfg, from: &[Value]| {
        let mut out = HashSet::new();
        let mut stack = from.to_vec();
        while let Some(v) = stack.pop() {
            if let ValueDef::Result(o, _) = d.values[v].def {
                if pos_of.contains_key(&o) && out.insert(o) {
                    stack.extend(d.ops[o].uses());
                }
            }
        }
        out
    };
    let keep = reach(d, &d.ops[select].operands[1..]);
    let cands = reach(d, &[valid]);
    // Users of every value, over the whole kernel.
    let mut users: HashMap<Value, Vec<Op>> = HashMap::new();
    for (o, od) in d.ops.iter() {
        for u in od.uses() {
            users.entry(u).or_default().push(o);
        }
    }
    let live: HashSet<Op> = {
        let mut all = HashSet::new();
        let mut stack = vec![k.body];
        while let Some(b) = stack.pop() {
            for &o in &d.blocks[b].ops {
                all.insert(o);
                stack.extend(d.ops[o].regions.iter().copied());
            }
        }
        all
    };
    // The mask cone, in reverse order: an op joins when every live user of its results is in it.
    let mut cone: HashSet<Op> = HashSet::from([select]);
    for &o in ops[..at].iter().rev() {
        let od = &d.ops[o];
        if !cands.contains(&o)
            || keep.contains(&o)
            || !od.regions.is_empty()
            || od.opcode.effect() != Effect::Pure
        {
            continue;
        }
        let only_mask = od.results.iter().all(|r| {
            users
                .get(r)
                .into_iter()
                .flatten()
                .filter(|u| live.contains(u))
                .all(|u| cone.contains(u))
        });
        if only_mask {
            cone.insert(o);
        }
    }
    // Then: the value. Else: the mask ops and the select.
    let ty = d.ty(d.ops[select].results[0]).clone();
    let then = d.new_block();
    d.append_op(then, simple(Opcode::Yield, vec![x], None), vec![]);
    let els = d.new_block();
    let moved: Vec<Op> = ops.iter().copied().filter(|o| cone.contains(o)).collect();
    d.blocks[els].ops = moved;
    let sel_r = d.ops[select].results[0];
    d.append_op(els, simple(Opcode::Yield, vec![sel_r], None), vec![]);
    let mut iff = simple(Opcode::If, vec![full], None);
    iff.regions = vec![then, els];
    let name = d.values[sel_r].name.clone();
    if let Some(n) = &name {
        d.values[sel_r].name = Some(format!("{n}_masked"));
    }
    let id = d.append_op(body, iff, vec![(ty, name)]);
    d.blocks[body].ops.pop();
    let r = d.ops[id].results[0];
    let yield_else = *d.blocks[els].ops.last().expect("the else yield");
    kedit::replace_uses(d, sel_r, r, Some(yield_else));
    // The body: the cone leaves, %full and the `if` take the select's place.
    let mut new_ops = vec![];
    for &o in &ops {
        if o == select {
            new_ops.extend(full_ops.iter().copied());
            new_ops.push(id);
        } else if !cone.contains(&o) {
            new_ops.push(o);
        }
    }
    d.blocks[body].ops = new_ops;
}

/// The top-level loads of `body` with an `other` value whose offset is `iv` along a tile axis:
/// (load, axis, the tensor's dim name there).
fn key_loads(k: &Kernel, body: Block, iv: Value) -> Vec<(Op, usize, Option<String>)> {
    let d = &k.dfg;
    let mut out = vec![];
    for &o in &d.blocks[body].ops {
        let od = &d.ops[o];
        if od.opcode != Opcode::Load || od.attr("other").is_none() {
            continue;
        }
        let Some(t) = &od.tensor else { continue };
        let Some(shape) = d.ty(od.results[0]).shape() else {
            continue;
        };
        let n = t.offsets.len();
        let Some(pos) = t
            .offsets
            .iter()
            .position(|x| matches!(x, Offset::Value(v) if *v == iv))
        else {
            continue;
        };
        let dim = match k.param(&t.param).map(|p| &p.kind) {
            Some(ParamKind::Tensor(_, tt)) => match tt.dims.get(pos).map(|e| &e.kind) {
                Some(ExprKind::Ident(n)) => Some(n.clone()),
                _ => None,
            },
            _ => None,
        };
        if let Some(axis) = (pos + shape.len()).checked_sub(n) {
            out.push((o, axis, dim));
        }
    }
    out
}

/// Adds `keys + iv < key_hi` (`keys` an iota along the key axis) to load `o` of `body`, and-ed
/// with its mask if it has one.
fn mask_load(k: &mut Kernel, body: Block, o: Op, keys: Value, key_hi: Value) {
    let iv = k.dfg.blocks[body].args[0];
    let shape = k
        .dfg
        .ty(k.dfg.ops[o].results[0])
        .shape()
        .expect("a tile load");
    let ti = Type::tile(&shape, Dtype::I32);
    let tb = Type::tile(&shape, Dtype::I1);
    let at = k.dfg.blocks[body]
        .ops
        .iter()
        .position(|&x| x == o)
        .expect("load in body");
    let key = insert_op(
        &mut k.dfg,
        body,
        at,
        simple(Opcode::Add, vec![keys, iv], None),
        vec![(ti, None)],
    )[0];
    let lt = Some(Attr::Cmp(CmpPred::Lt));
    let cmp = simple(Opcode::Cmp, vec![key, key_hi], lt);
    let mut m = insert_op(
        &mut k.dfg,
        body,
        at + 1,
        cmp,
        vec![(tb.clone(), Some("ms_key_in".into()))],
    )[0];
    if let Some(Attr::Value(old)) = k.dfg.ops[o].attr("mask").cloned() {
        m = insert_op(
            &mut k.dfg,
            body,
            at + 2,
            simple(Opcode::And, vec![old, m], None),
            vec![(tb, None)],
        )[0];
    }
    let ld = &mut k.dfg.ops[o];
    if let Some(slot) = ld.attrs.iter_mut().find(|(k, _)| k == "mask") {
        slot.1 = Attr::Value(m);
    } else {
        ld.attrs.insert(0, ("mask".into(), Attr::Value(m)));
    }
}
