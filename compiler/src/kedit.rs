//! Kernel editing helpers for passes that restructure kernels (the `fusion` pass): cloning ops
//! from one kernel into another with value, param and dim renaming, replacing uses, inserting
//! ops, common-subexpression elimination, dead-code elimination and merging sibling loops.
//!
//! Every helper keeps the kernel well formed as long as its stated preconditions hold; callers
//! verify the module afterwards and renumber it ([`kir_ir::renumber::renumber_kernel`]).

use kir_ir::{
    Attr, Block, CmpPred, Dfg, Dtype, Effect, Expr, ExprKind, Kernel, Offset, Op, OpData, Opcode,
    Type, Value, ValueDef,
};
use std::collections::HashMap;

/// Renames an expression's identifiers through `f` (identifiers `f` maps to `None` stay).
pub fn rename_expr(e: &Expr, f: &dyn Fn(&str) -> Option<String>) -> Expr {
    let kind = match &e.kind {
        ExprKind::Ident(s) => ExprKind::Ident(f(s).unwrap_or_else(|| s.clone())),
        ExprKind::Unary(o, a) => ExprKind::Unary(*o, Box::new(rename_expr(a, f))),
        ExprKind::Binary(o, a, b) => {
            ExprKind::Binary(*o, Box::new(rename_expr(a, f)), Box::new(rename_expr(b, f)))
        }
        ExprKind::Call(func, args) => {
            ExprKind::Call(*func, args.iter().map(|a| rename_expr(a, f)).collect())
        }
        other => other.clone(),
    };
    Expr { kind, span: e.span }
}

/// Copies ops of a source kernel into a destination kernel.
pub struct Cloner<'a> {
    /// The source arenas.
    pub src: &'a Dfg,
    /// Source value → destination value (pre-seed it to substitute values).
    pub vmap: HashMap<Value, Value>,
    /// Source tensor/scalar param name → destination param name.
    pub params: HashMap<String, String>,
    /// Source dim name → destination dim name.
    pub dims: HashMap<String, String>,
}

impl<'a> Cloner<'a> {
    /// A cloner from `src` with no renaming.
    pub fn new(src: &'a Dfg) -> Self {
        Cloner {
            src,
            vmap: HashMap::new(),
            params: HashMap::new(),
            dims: HashMap::new(),
        }
    }

    fn v(&self, v: Value) -> Value {
        self.vmap.get(&v).copied().unwrap_or(v)
    }

    /// Clones op `o` (with its regions) to the end of block `b` of `dst`; returns the new op.
    pub fn op(&mut self, dst: &mut Dfg, b: Block, o: Op) -> Op {
        let od = &self.src.ops[o];
        let mut regions = vec![];
        for &rb in &od.regions {
            let nb = dst.new_block();
            for &a in &self.src.blocks[rb].args {
                let vd = &self.src.values[a];
                let na = dst.add_block_arg(nb, vd.ty.clone(), vd.name.clone(), vd.span);
                self.vmap.insert(a, na);
            }
            for &inner in &self.src.blocks[rb].ops {
                self.op(dst, nb, inner);
            }
            regions.push(nb);
        }
        let od = &self.src.ops[o];
        let lead = match (&od.opcode, &od.lead) {
            (Opcode::Param, Some(Attr::Name(n, sp))) => Some(Attr::Name(
                self.params.get(n).cloned().unwrap_or_else(|| n.clone()),
                *sp,
            )),
            (Opcode::Dim, Some(Attr::Name(n, sp))) => Some(Attr::Name(
                self.dims.get(n).cloned().unwrap_or_else(|| n.clone()),
                *sp,
            )),
            (_, l) => l.clone(),
        };
        let tensor = od.tensor.clone().map(|mut t| {
            if let Some(p) = self.params.get(&t.param) {
                t.param = p.clone();
            }
            for off in &mut t.offsets {
                match off {
                    Offset::Value(v) => *v = self.v(*v),
                    Offset::Expr(e) => *e = rename_expr(e, &|n| self.dims.get(n).cloned()),
                }
            }
            t
        });
        let data = OpData {
            opcode: od.opcode,
            results: vec![],
            operands: od.operands.iter().map(|&v| self.v(v)).collect(),
            lead,
            tensor,
            attrs: od
                .attrs
                .iter()
                .map(|(k, a)| match a {
                    Attr::Value(v) => (k.clone(), Attr::Value(self.v(*v))),
                    other => (k.clone(), other.clone()),
                })
                .collect(),
            regions,
            doc: od.doc.clone(),
            span: od.span,
        };
        let rts = od
            .results
            .iter()
            .map(|&r| {
                (
                    self.src.values[r].ty.clone(),
                    self.src.values[r].name.clone(),
                )
            })
            .collect();
        let results = od.results.clone();
        let id = dst.append_op(b, data, rts);
        for (r, nr) in results.into_iter().zip(dst.ops[id].results.clone()) {
            self.vmap.insert(r, nr);
        }
        id
    }
}

/// The block whose op list holds op `o`. Panics if no block holds it (an op detached from the
/// kernel is a pass's bug).
pub fn parent_block(dfg: &Dfg, o: Op) -> Block {
    dfg.blocks
        .iter()
        .find(|(_, bd)| bd.ops.contains(&o))
        .map(|(b, _)| b)
        .expect("the op is in a block")
}

/// Appends `if cond` to block `b` with regions `then` and `els` (each already ending with its
/// `yield`) and one result per type of `types`; returns the op.
pub fn append_if(
    dfg: &mut Dfg,
    b: Block,
    cond: Value,
    then: Block,
    els: Block,
    types: Vec<(Type, Option<String>)>,
) -> Op {
    let mut iff = simple(Opcode::If, vec![cond], None);
    iff.regions = vec![then, els];
    dfg.append_op(b, iff, types)
}

/// A new block holding `ops` (moved in as they are) and ending with `yield vals`.
pub fn yield_block(dfg: &mut Dfg, ops: Vec<Op>, vals: Vec<Value>) -> Block {
    let blk = dfg.new_block();
    dfg.blocks[blk].ops = ops;
    dfg.append_op(blk, simple(Opcode::Yield, vals, None), vec![]);
    blk
}

/// Appends an op to block `b` and moves it to position `pos`; returns its results.
pub fn insert_op(
    dfg: &mut Dfg,
    b: Block,
    pos: usize,
    op: OpData,
    types: Vec<(Type, Option<String>)>,
) -> Vec<Value> {
    let id = dfg.append_op(b, op, types);
    let last = dfg.blocks[b].ops.pop();
    if let Some(last) = last {
        dfg.blocks[b].ops.insert(pos, last);
    }
    dfg.ops[id].results.clone()
}

/// A plain op with operands and optional lead, no tensor, attrs or regions.
pub fn simple(opcode: Opcode, operands: Vec<Value>, lead: Option<Attr>) -> OpData {
    OpData {
        opcode,
        results: vec![],
        operands,
        lead,
        tensor: None,
        attrs: vec![],
        regions: vec![],
        doc: vec![],
        span: kir_ir::Span::default(),
    }
}

/// Appends an i32 scalar `const v` to block `b`; returns its value.
pub fn iconst(k: &mut Kernel, b: Block, v: i64) -> Value {
    let op = simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(v))));
    let id = k
        .dfg
        .append_op(b, op, vec![(Type::scalar(Dtype::I32), None)]);
    k.dfg.ops[id].results[0]
}

/// Appends a binary op, or a compare with predicate `lead`, of scalar type `d` to block `b`;
/// returns its value.
pub fn op2(
    k: &mut Kernel,
    b: Block,
    opc: Opcode,
    lead: Option<CmpPred>,
    x: Value,
    y: Value,
    d: Dtype,
) -> Value {
    let l = lead.map(Attr::Cmp);
    let id = k
        .dfg
        .append_op(b, simple(opc, vec![x, y], l), vec![(Type::scalar(d), None)]);
    k.dfg.ops[id].results[0]
}

/// Calls `f` on every value op `od` reads itself (operands, tensor offsets, value attributes;
/// not its regions' ops).
pub fn for_each_use(od: &mut OpData, mut f: impl FnMut(&mut Value)) {
    od.operands.iter_mut().for_each(&mut f);
    if let Some(t) = &mut od.tensor {
        for off in &mut t.offsets {
            if let Offset::Value(v) = off {
                f(v);
            }
        }
    }
    for (_, a) in &mut od.attrs {
        if let Attr::Value(v) = a {
            f(v);
        }
    }
}

/// Replaces every use of `from` by `to` in the whole kernel, except in op `skip`.
pub fn replace_uses(dfg: &mut Dfg, from: Value, to: Value, skip: Option<Op>) {
    for (id, od) in dfg.ops.iter_mut() {
        if Some(id) != skip {
            for_each_use(od, |v| {
                if *v == from {
                    *v = to;
                }
            });
        }
    }
}

/// True for ops that CSE may merge and DCE may remove: the table's pure ops, and loads of tensors
/// the kernel only reads. Stores, atomics, control flow and scheduled-IR ops (which read or change
/// buffer, barrier or partition state) are never merged or removed.
pub fn is_pure(k: &Kernel, od: &OpData) -> bool {
    match od.opcode.effect() {
        Effect::Pure => true,
        Effect::ReadsMemory => od.tensor.as_ref().is_some_and(|t| {
            k.param(&t.param)
                .is_some_and(|p| matches!(p.kind, kir_ir::ParamKind::Tensor(kir_ir::Access::In, _)))
        }),
        Effect::WritesMemory | Effect::Control | Effect::Terminator | Effect::Schedule => false,
    }
}

/// Merges identical pure ops (same opcode, operands, attributes and result types), scoped by
/// region nesting: an op may reuse an equal op of its own block or of an enclosing one.
pub fn cse(k: &mut Kernel) {
    let body = k.body;
    cse_block(k, body, &mut vec![]);
}

fn cse_block(k: &mut Kernel, b: Block, scopes: &mut Vec<HashMap<String, Value>>) {
    scopes.push(HashMap::new());
    let ops = k.dfg.blocks[b].ops.clone();
    let mut keep = vec![];
    for o in ops {
        for rb in k.dfg.ops[o].regions.clone() {
            cse_block(k, rb, scopes);
        }
        let od = &k.dfg.ops[o];
        if !is_pure(k, od) || od.results.len() != 1 {
            keep.push(o);
            continue;
        }
        let ty = &k.dfg.values[od.results[0]].ty;
        let key = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{ty}",
            od.opcode,
            od.operands,
            od.lead.as_ref().map(strip),
            od.tensor
                .as_ref()
                .map(|t| (&t.param, format!("{:?}", t.offsets))),
            od.attrs
                .iter()
                .map(|(n, a)| (n, strip(a)))
                .collect::<Vec<_>>()
        );
        let found = scopes.iter().rev().find_map(|s| s.get(&key).copied());
        let r = od.results[0];
        match found {
            Some(prev) => replace_uses(&mut k.dfg, r, prev, None),
            None => {
                scopes.last_mut().map(|s| s.insert(key, r));
                keep.push(o);
            }
        }
    }
    k.dfg.blocks[b].ops = keep;
    scopes.pop();
}

/// An attribute without its span, for CSE keys.
fn strip(a: &Attr) -> String {
    match a {
        Attr::Expr(e) => format!("{e}"),
        Attr::Name(n, _) => n.clone(),
        Attr::Cmp(p) => p.name().to_string(),
        Attr::Reduce(k) => k.name().to_string(),
        Attr::Value(v) => format!("{v:?}"),
        Attr::List(l) => l
            .iter()
            .map(|e| format!("{e}"))
            .collect::<Vec<_>>()
            .join(","),
        Attr::Flag => "flag".into(),
    }
}

/// Removes pure ops whose results are unused, repeatedly, and loop-carried values of `for` ops
/// that nothing reads (neither after the loop nor inside it except to carry themselves).
pub fn dce(k: &mut Kernel) {
    loop {
        // Uses are counted over reachable ops only: an op already removed from its block (still
        // in the arena) must not keep its operands alive.
        let live_ops = live(k);
        let mut used: HashMap<Value, usize> = HashMap::new();
        for (_, ops) in &live_ops {
            for &o in ops {
                for v in k.dfg.ops[o].uses() {
                    *used.entry(v).or_default() += 1;
                }
            }
        }
        let mut changed = false;
        for (b, ops) in live_ops {
            let before = ops.len();
            let kept: Vec<Op> = ops
                .into_iter()
                .filter(|&o| {
                    let od = &k.dfg.ops[o];
                    !(is_pure(k, od) && od.results.iter().all(|r| !used.contains_key(r)))
                })
                .collect();
            changed |= kept.len() != before;
            k.dfg.blocks[b].ops = kept;
        }
        if !changed {
            return;
        }
    }
}

/// Every reachable block with its op list.
fn live(k: &Kernel) -> Vec<(Block, Vec<Op>)> {
    let mut out = vec![];
    let mut stack = vec![k.body];
    while let Some(b) = stack.pop() {
        let ops = k.dfg.blocks[b].ops.clone();
        for &o in &ops {
            stack.extend(k.dfg.ops[o].regions.iter().copied());
        }
        out.push((b, ops));
    }
    out
}

/// True if block `b` (recursively) holds a store or an atomic.
pub fn writes_memory(dfg: &Dfg, b: Block) -> bool {
    dfg.blocks[b].ops.iter().any(|&o| {
        let od = &dfg.ops[o];
        matches!(od.opcode, Opcode::Store | Opcode::AtomicAdd)
            || od.regions.iter().any(|&r| writes_memory(dfg, r))
    })
}

/// Every value defined inside block `b` (args, results, recursively).
fn defined_in(dfg: &Dfg, b: Block, out: &mut Vec<Value>) {
    out.extend(dfg.blocks[b].args.iter().copied());
    for &o in &dfg.blocks[b].ops {
        out.extend(dfg.ops[o].results.iter().copied());
        for &r in &dfg.ops[o].regions {
            defined_in(dfg, r, out);
        }
    }
}

/// Values used inside block `b` (recursively) but defined outside it.
fn free_values(dfg: &Dfg, b: Block) -> Vec<Value> {
    let mut def = vec![];
    defined_in(dfg, b, &mut def);
    let mut out = vec![];
    let mut stack = vec![b];
    while let Some(x) = stack.pop() {
        for &o in &dfg.blocks[x].ops {
            out.extend(dfg.ops[o].uses().into_iter().filter(|v| !def.contains(v)));
            stack.extend(dfg.ops[o].regions.iter().copied());
        }
    }
    out
}

/// Merges every later `for` of the kernel's top block into an earlier one with the same bounds
/// when the later loop reads nothing defined between them and neither loop writes memory: one
/// loop carrying both sets of values. Returns how many loops were merged.
pub fn merge_loops(k: &mut Kernel) -> usize {
    let mut merged = 0;
    'again: loop {
        let top = k.dfg.blocks[k.body].ops.clone();
        for (i, &l1) in top.iter().enumerate() {
            for (j, &l2) in top.iter().enumerate().skip(i + 1) {
                let (a, b) = (&k.dfg.ops[l1], &k.dfg.ops[l2]);
                if a.opcode != Opcode::For || b.opcode != Opcode::For {
                    continue;
                }
                let ends_in_yield = |blk: Block| {
                    k.dfg.blocks[blk]
                        .ops
                        .last()
                        .is_some_and(|&y| k.dfg.ops[y].opcode == Opcode::Yield)
                };
                if a.operands[..3] != b.operands[..3]
                    || !ends_in_yield(a.regions[0])
                    || !ends_in_yield(b.regions[0])
                    || writes_memory(&k.dfg, a.regions[0])
                    || writes_memory(&k.dfg, b.regions[0])
                {
                    continue;
                }
                let between: Vec<Value> = top[i..j]
                    .iter()
                    .flat_map(|&o| k.dfg.ops[o].results.clone())
                    .collect();
                let mut needs = free_values(&k.dfg, b.regions[0]);
                needs.extend(b.operands.iter().copied());
                if needs.iter().any(|v| between.contains(v)) {
                    continue;
                }
                fuse_pair(k, l1, l2, j);
                merged += 1;
                continue 'again;
            }
        }
        return merged;
    }
}

/// Moves loop `l2` (at top-block index `j`) into loop `l1`.
fn fuse_pair(k: &mut Kernel, l1: Op, l2: Op, j: usize) {
    let d = &mut k.dfg;
    let (b1, b2) = (d.ops[l1].regions[0], d.ops[l2].regions[0]);
    // Induction variable and carried args of loop 2 become loop 1's.
    let iv1 = d.blocks[b1].args[0];
    let iv2 = d.blocks[b2].args[0];
    replace_uses(d, iv2, iv1, None);
    let args2: Vec<Value> = d.blocks[b2].args[1..].to_vec();
    for a in args2 {
        let idx = d.blocks[b1].args.len() as u32;
        d.values[a].def = ValueDef::Arg(b1, idx);
        d.blocks[b1].args.push(a);
    }
    let inits2: Vec<Value> = d.ops[l2].operands[3..].to_vec();
    d.ops[l1].operands.extend(inits2);
    let res2: Vec<Value> = d.ops[l2].results.clone();
    for r in res2 {
        let idx = d.ops[l1].results.len() as u32;
        d.values[r].def = ValueDef::Result(l1, idx);
        d.ops[l1].results.push(r);
    }
    // Bodies: loop 1's ops but its yield, loop 2's ops but its yield, one yield of both.
    let mut ops1 = d.blocks[b1].ops.clone();
    let mut ops2 = d.blocks[b2].ops.clone();
    let (y1, y2) = (ops1.pop(), ops2.pop());
    if let (Some(y1), Some(y2)) = (y1, y2) {
        let extra = d.ops[y2].operands.clone();
        d.ops[y1].operands.extend(extra);
        ops1.extend(ops2);
        ops1.push(y1);
    }
    d.blocks[b1].ops = ops1;
    d.blocks[k.body].ops.remove(j);
}

/// Every op of the kernel (in any block) that reads `v` directly.
pub fn users(dfg: &Dfg, v: Value) -> Vec<Op> {
    dfg.ops
        .iter()
        .filter(|(_, od)| od.uses().contains(&v))
        .map(|(id, _)| id)
        .collect()
}

/// Adds a carried value to `for` op `l`: `init` becomes its initial value, and a new block
/// argument and a new result of type `ty` are created and returned (argument, result). The
/// caller must append the next value to the body's `yield`.
pub fn add_carried(
    dfg: &mut Dfg,
    l: Op,
    init: Value,
    ty: Type,
    name: Option<String>,
) -> (Value, Value) {
    let body = dfg.ops[l].regions[0];
    dfg.ops[l].operands.push(init);
    let arg = dfg.add_block_arg(body, ty.clone(), name.clone(), kir_ir::Span::default());
    let idx = dfg.ops[l].results.len() as u32;
    let res = dfg.values.push(kir_ir::ValueData {
        ty,
        name,
        def: ValueDef::Result(l, idx),
        span: kir_ir::Span::default(),
    });
    dfg.ops[l].results.push(res);
    (arg, res)
}
