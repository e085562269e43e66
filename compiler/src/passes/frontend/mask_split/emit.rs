//! The IR building of the `mask_split` pass (see `mod.rs`): the scalar code before the
//! loop, the guarded select and the key masks of loads.
//!
//! [`Em`] appends folded, deduplicated i32 scalar arithmetic to a block that is later spliced in
//! before the loop (constants, min/max simplified against the ±S sentinels, dims read once, and
//! loop-invariant values cloned out of the loop body when they are computed inside it).
//! [`guard_select`] replaces the score-mask select by `if %ms_full { yield %x } else { <mask
//! ops>; select … }`, moving the pure ops only the mask uses into the else branch.
//! [`key_loads`] finds the loads at the loop variable along a tile axis, and [`mask_load`] bounds
//! one of them by `iota + iv < ms_key_hi`.

use super::read::{Lin, S};
use kir_ir::edit::{self, insert_op, simple};
use kir_ir::{
    Attr, Block, CmpPred, Dfg, Dtype, Effect, ExprKind, Kernel, Offset, Op, Opcode, ParamKind,
    Type, Value, ValueDef,
};
use std::collections::{HashMap, HashSet};

/// Emits scalar i32 arithmetic into a block being built (spliced before the loop later).
pub(super) struct Em<'a> {
    pub(super) k: &'a mut Kernel,
    pub(super) b: Block,
    pub(super) consts: HashMap<i64, Value>,
    /// The constant each emitted constant value holds (for folding).
    pub(super) known: HashMap<Value, i64>,
    pub(super) dims: HashMap<String, Value>,
    pub(super) hoisted: HashMap<Value, Value>,
    pub(super) inside: HashSet<Op>,
    /// Ops emitted so far, by opcode, lead and operands: equal requests give one value.
    pub(super) memo: HashMap<String, Value>,
}

impl Em<'_> {
    fn i32(&self) -> Type {
        Type::scalar(Dtype::I32)
    }
    pub(super) fn konst(&mut self, v: i64) -> Value {
        if let Some(&c) = self.consts.get(&v) {
            return c;
        }
        let r = edit::iconst(self.k, self.b, v);
        self.consts.insert(v, r);
        self.known.insert(r, v);
        r
    }
    /// The integer a value is known to hold (an emitted or an existing i32 `const`).
    pub(super) fn lit(&self, v: Value) -> Option<i64> {
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
    pub(super) fn op(
        &mut self,
        opc: Opcode,
        lead: Option<Attr>,
        xs: Vec<Value>,
        ty: Type,
    ) -> Value {
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
    pub(super) fn name(&mut self, v: Value, n: &str) -> Value {
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
    pub(super) fn bin(&mut self, opc: Opcode, a: Value, b: Value) -> Value {
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
    pub(super) fn min(&mut self, a: Value, b: Value) -> Value {
        self.minmax(Opcode::Min, a, b)
    }
    pub(super) fn max(&mut self, a: Value, b: Value) -> Value {
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
    pub(super) fn cmp(&mut self, p: CmpPred, a: Value, b: Value) -> Value {
        self.op(
            Opcode::Cmp,
            Some(Attr::Cmp(p)),
            vec![a, b],
            Type::scalar(Dtype::I1),
        )
    }
    pub(super) fn sel(&mut self, c: Value, a: Value, b: Value) -> Value {
        let t = self.i32();
        self.op(Opcode::Select, None, vec![c, a, b], t)
    }
    pub(super) fn dim(&mut self, name: &str) -> Value {
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
    pub(super) fn lin(&mut self, f: &Lin) -> Value {
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

/// Replaces `select %valid, %x, C` (at the top of loop body `body`) by `full_ops` (which
/// compute `%full`) and `if %full { yield %x } else { <mask ops>; select %valid, %x, C }`: the
/// pure ops of the body that only the mask uses move into the else branch.
pub(super) fn guard_select(
    k: &mut Kernel,
    body: Block,
    select: Op,
    full_ops: Vec<Op>,
    full: Value,
) {
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
    let name = d.values[sel_r].name.clone();
    if let Some(n) = &name {
        d.values[sel_r].name = Some(format!("{n}_masked"));
    }
    let id = edit::append_if(d, body, full, then, els, vec![(ty, name)]);
    d.blocks[body].ops.pop();
    let r = d.ops[id].results[0];
    let yield_else = *d.blocks[els].ops.last().expect("the else yield");
    edit::replace_uses(d, sel_r, r, Some(yield_else));
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
pub(super) fn key_loads(k: &Kernel, body: Block, iv: Value) -> Vec<(Op, usize, Option<String>)> {
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
pub(super) fn mask_load(k: &mut Kernel, body: Block, o: Op, keys: Value, key_hi: Value) {
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
