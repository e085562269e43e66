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

mod emit;
mod range;
mod read;

use emit::{guard_select, key_loads, mask_load, Em};
use kir_ir::edit::{self, simple};
use kir_ir::{
    Attr, Block, Dfg, Dtype, Expr, ExprKind, Kernel, Module, Offset, Op, Opcode, ParamKind, Type,
    Value,
};
use range::{interval, program_offsets, Cond, Dom, Full};
use read::{Lin, Reader, B};
use std::collections::{BTreeMap, HashMap, HashSet};

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
        edit::dce(k);
        edit::cse(k);
        edit::dce(k);
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
    edit::ops_in(d, body, &mut inside);
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

fn apply(k: &mut Kernel, parent: Block, l: Op, plan: Plan) {
    let body = k.dfg.ops[l].regions[0];
    let iv = k.dfg.blocks[body].args[0];
    let mut inside = HashSet::new();
    edit::ops_in(&k.dfg, body, &mut inside);
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
    kir_ir::edit::splice_ops(&mut k.dfg, parent, l, tmp, false);
    k.dfg.ops[l].operands[0] = l0;
    k.dfg.ops[l].operands[1] = h;
    // Full blocks skip the mask work.
    let in_ops = std::mem::take(&mut k.dfg.blocks[inb].ops);
    match full {
        Cond::K(true) => {
            let sel = &k.dfg.ops[plan.select];
            let (r, x) = (sel.results[0], sel.operands[1]);
            edit::replace_uses(&mut k.dfg, r, x, None);
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
