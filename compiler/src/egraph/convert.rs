//! Conversion of a kernel's pure dataflow to an e-graph and back.
//!
//! Pure ops (every op of the table outside the `Memory` and `Control` classes) become e-nodes.
//! Everything else is an anchor that stays in place: loads, stores, atomics, `for`/`if`/`yield`.
//! Values an anchor defines (load results, `for`/`if` results, block arguments) enter the
//! e-graph as opaque leaves. Back from the e-graph, the kernel keeps its anchors and block
//! structure; each needed e-class is materialized at the position of the first original op of
//! that class in scope (so loop-invariant code stays outside its loop), or right before the
//! anchor that needs it, reusing any value of the class already in scope (CSE). A class whose
//! extracted form would read a value not in scope is an error, and the caller keeps the
//! original kernel. Unused pure ops are removed and the kernel is renumbered.

use super::analysis::TileGraph;
use super::cost::{node_cost, TileCost};
use super::lang::{is_pure, Head, Sig, TileNode};
use cranelift_entity::EntityRef;
use egg::{Extractor, Id};
use kir_ir::expr::F64Bits;
use kir_ir::{
    Attr, Block, Dfg, Dtype, Expr, ExprKind, Kernel, Offset, Op, OpData, Opcode, Span, Type, Value,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A kernel's pure dataflow as an e-graph, with what is needed to rebuild the kernel.
pub struct Conversion {
    /// The e-graph (rules run on it in place).
    pub graph: TileGraph,
    /// The e-class of every value of the kernel.
    pub class_of: HashMap<Value, Id>,
    /// Ops that entered the e-graph (everything else is an anchor).
    pub pure_ops: HashSet<Op>,
    /// The original lead and keyword attributes by opcode and canonical attribute text.
    payload: HashMap<(Opcode, String), Attrs>,
}

/// An op's lead and keyword attributes.
type Attrs = (Option<Attr>, Vec<(String, Attr)>);

/// The dtype and literal shape of a concrete type.
fn facts_of(t: &Type) -> Option<(Dtype, Vec<usize>)> {
    Some((t.dtype()?, t.shape()?))
}

/// Canonical text of an attribute that is not an SSA value.
fn attr_text(a: &Attr) -> Option<String> {
    Some(match a {
        Attr::Expr(e) => e.to_string(),
        Attr::Name(n, _) => n.clone(),
        Attr::Cmp(p) => p.name().to_string(),
        Attr::Reduce(k) => k.name().to_string(),
        Attr::List(l) => l
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(","),
        Attr::Flag => String::new(),
        Attr::Str(t) => kir_ir::text::lexer::quote(t),
        Attr::Value(_) => return None,
    })
}

/// The canonical attribute text of an op, or `None` if an attribute is an SSA value.
fn sig_text(od: &OpData) -> Option<String> {
    let mut s = match &od.lead {
        Some(a) => attr_text(a)?,
        None => String::new(),
    };
    for (k, a) in &od.attrs {
        s.push_str(&format!(" {k}={}", attr_text(a)?));
    }
    Some(s)
}

/// The literal of a `const`, as f64.
fn const_value(od: &OpData) -> Option<f64> {
    let Some(Attr::Expr(e)) = &od.lead else {
        return None;
    };
    match e.eval(&|_| None, false).ok()? {
        kir_ir::EvalVal::Int(i) => Some(i as f64),
        kir_ir::EvalVal::Float(x) => Some(x),
        kir_ir::EvalVal::Bool(b) => Some(b as i64 as f64),
        kir_ir::EvalVal::Sym(_) => None,
    }
}

/// Builds the e-graph of `k`'s pure dataflow.
pub fn to_egraph(k: &Kernel) -> Result<Conversion, String> {
    to_egraph_with(k, false)
}

/// [`to_egraph`], with egg's explanations enabled on the e-graph when `explain` is set.
pub fn to_egraph_with(k: &Kernel, explain: bool) -> Result<Conversion, String> {
    let graph = if explain {
        TileGraph::default().with_explanations_enabled()
    } else {
        TileGraph::default()
    };
    let mut c = Conversion {
        graph,
        class_of: HashMap::new(),
        pure_ops: HashSet::new(),
        payload: HashMap::new(),
    };
    c.block(&k.dfg, k.body, 0)?;
    c.graph.rebuild();
    Ok(c)
}

impl Conversion {
    fn leaf(&mut self, dfg: &Dfg, v: Value) -> Result<(), String> {
        let (dtype, shape) = facts_of(dfg.ty(v)).ok_or("a value has a symbolic type")?;
        let id = self.graph.add(TileNode {
            head: Head::Leaf,
            sig: Some(Arc::new(Sig {
                attrs: format!("v{}", v.index()),
                dtype,
                shape,
                konst: None,
            })),
            args: vec![],
        });
        self.class_of.insert(v, id);
        Ok(())
    }

    fn block(&mut self, dfg: &Dfg, b: Block, depth: usize) -> Result<(), String> {
        if depth > 200 {
            return Err("regions nest too deeply".into());
        }
        let bd = dfg.blocks.get(b).ok_or("dangling block")?;
        for &a in &bd.args {
            self.leaf(dfg, a)?;
        }
        for &o in &bd.ops {
            let od = &dfg.ops[o];
            for u in od.uses() {
                if !self.class_of.contains_key(&u) {
                    return Err(format!(
                        "value v{} is used before its definition",
                        u.index()
                    ));
                }
            }
            let text = sig_text(od);
            let pure = is_pure(od.opcode)
                && od.results.len() == 1
                && od.regions.is_empty()
                && od.tensor.is_none();
            match (pure, text) {
                (true, Some(text)) => {
                    let r = od.results[0];
                    let (dtype, shape) =
                        facts_of(dfg.ty(r)).ok_or("a value has a symbolic type")?;
                    let konst = match od.opcode {
                        Opcode::Const => const_value(od).map(f64::to_bits),
                        _ => None,
                    };
                    let args = od.operands.iter().map(|v| self.class_of[v]).collect();
                    let sig = Sig {
                        attrs: text.clone(),
                        dtype,
                        shape,
                        konst,
                    };
                    let id = self.graph.add(TileNode {
                        head: Head::Op(od.opcode),
                        sig: Some(Arc::new(sig)),
                        args,
                    });
                    self.class_of.insert(r, id);
                    self.pure_ops.insert(o);
                    self.payload
                        .entry((od.opcode, text))
                        .or_insert_with(|| (od.lead.clone(), od.attrs.clone()));
                }
                _ => {
                    for &rb in &od.regions {
                        self.block(dfg, rb, depth + 1)?;
                    }
                    for &r in &od.results {
                        self.leaf(dfg, r)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The `const` literal expression for a node built by a rule or by folding.
fn const_attr(sig: &Sig) -> Option<Attr> {
    let v = f64::from_bits(sig.konst?);
    let kind = if sig.dtype.is_float() {
        ExprKind::Float(F64Bits(v))
    } else {
        ExprKind::Int(v as i64)
    };
    Some(Attr::Expr(Expr {
        kind,
        span: Span::default(),
    }))
}

/// The type a node's signature describes.
fn sig_type(sig: &Sig) -> Type {
    if sig.shape.is_empty() {
        Type::scalar(sig.dtype)
    } else {
        Type::tile(&sig.shape, sig.dtype)
    }
}

/// Rebuilds `k` from the e-graph in `c`, extracting each needed class with [`TileCost`].
pub fn from_egraph(k: &Kernel, c: &Conversion) -> Result<Kernel, String> {
    let g = &c.graph;
    let ext = Extractor::new(g, TileCost);
    // Classes anchors read, and everything their extracted forms read.
    let mut needed = HashSet::new();
    let mut stack: Vec<Id> = Vec::new();
    for (o, od) in k.dfg.ops.iter() {
        if !c.pure_ops.contains(&o) {
            stack.extend(
                od.uses()
                    .iter()
                    .filter_map(|v| c.class_of.get(v))
                    .map(|&i| g.find(i)),
            );
        }
    }
    while let Some(id) = stack.pop() {
        if needed.insert(id) {
            stack.extend(ext.find_best_node(id).args.iter().map(|&a| g.find(a)));
        }
    }
    let mut r = Rebuild {
        old: &k.dfg,
        c,
        ext,
        needed,
        new: Dfg::default(),
        scopes: vec![],
        depth: 0,
    };
    let body = r.block(k.body)?;
    let mut out = k.clone();
    out.dfg = r.new;
    out.body = body;
    dce(&mut out);
    kir_ir::renumber::renumber_kernel(&mut out);
    Ok(out)
}

struct Rebuild<'a> {
    old: &'a Dfg,
    c: &'a Conversion,
    ext: Extractor<'a, TileCost, TileNode, super::analysis::TileAnalysis>,
    needed: HashSet<Id>,
    new: Dfg,
    scopes: Vec<HashMap<Id, Value>>,
    depth: usize,
}

impl Rebuild<'_> {
    fn class(&self, v: Value) -> Result<Id, String> {
        let id = self.c.class_of.get(&v).ok_or("value without a class")?;
        Ok(self.c.graph.find(*id))
    }

    fn lookup(&self, id: Id) -> Option<Value> {
        self.scopes.iter().rev().find_map(|s| s.get(&id).copied())
    }

    fn bind(&mut self, id: Id, v: Value) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(id, v);
        }
    }

    fn value(&mut self, nb: Block, id: Id) -> Result<Value, String> {
        match self.lookup(id) {
            Some(v) => Ok(v),
            None => self.materialize(nb, id, None),
        }
    }

    fn block(&mut self, b: Block) -> Result<Block, String> {
        let nb = self.new.new_block();
        self.scopes.push(HashMap::new());
        let old = self.old;
        let bd = &old.blocks[b];
        for &a in &bd.args {
            let vd = &old.values[a];
            let na = self
                .new
                .add_block_arg(nb, vd.ty.clone(), vd.name.clone(), vd.span);
            let id = self.class(a)?;
            self.bind(id, na);
        }
        for &o in &bd.ops {
            self.op(nb, o)?;
        }
        self.scopes.pop();
        Ok(nb)
    }

    fn op(&mut self, nb: Block, o: Op) -> Result<(), String> {
        let old = self.old;
        let od = &old.ops[o];
        if self.c.pure_ops.contains(&o) {
            let id = self.class(od.results[0])?;
            if self.needed.contains(&id) && self.lookup(id).is_none() {
                self.materialize(nb, id, Some(o))?;
            }
            return Ok(());
        }
        let mut new_op = od.clone();
        for v in &mut new_op.operands {
            *v = self.value(nb, self.class(*v)?)?;
        }
        if let Some(t) = &mut new_op.tensor {
            for off in &mut t.offsets {
                if let Offset::Value(v) = off {
                    *v = self.value(nb, self.class(*v)?)?;
                }
            }
        }
        for (_, a) in &mut new_op.attrs {
            if let Attr::Value(v) = a {
                *v = self.value(nb, self.class(*v)?)?;
            }
        }
        let mut regions = vec![];
        for &rb in &od.regions {
            regions.push(self.block(rb)?);
        }
        new_op.regions = regions;
        let rts = od
            .results
            .iter()
            .map(|&r| {
                (
                    self.old.values[r].ty.clone(),
                    self.old.values[r].name.clone(),
                )
            })
            .collect();
        let id = self.new.append_op(nb, new_op, rts);
        for (i, &r) in od.results.iter().enumerate() {
            let nr = self.new.ops[id].results[i];
            self.new.values[nr].span = self.old.values[r].span;
            let cid = self.class(r)?;
            self.bind(cid, nr);
        }
        Ok(())
    }

    /// Emits the extracted form of class `id` into `nb` (children first); `orig` is the
    /// original op at this position, whose name, doc and span the root keeps.
    fn materialize(&mut self, nb: Block, id: Id, orig: Option<Op>) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > 10_000 {
            return Err("extracted expression too deep".into());
        }
        let node = self.ext.find_best_node(id).clone();
        let (Head::Op(opcode), Some(sig)) = (node.head, node.sig.clone()) else {
            return Err("an extracted form reads a value that is not in scope".into());
        };
        let mut args = vec![];
        for &a in &node.args {
            let a = self.c.graph.find(a);
            args.push(self.value(nb, a)?);
        }
        let (lead, attrs) = match self.c.payload.get(&(opcode, sig.attrs.clone())) {
            Some(p) => p.clone(),
            None if opcode == Opcode::Const => (const_attr(&sig), vec![]),
            None if sig.attrs.is_empty() => (None, vec![]),
            None => return Err(format!("no attributes known for `{node}`")),
        };
        let (name, doc, span) = match orig {
            Some(o) => {
                let od = &self.old.ops[o];
                let r = od.results[0];
                (self.old.values[r].name.clone(), od.doc.clone(), od.span)
            }
            None => (None, vec![], Span::default()),
        };
        let op = OpData {
            opcode,
            results: vec![],
            operands: args,
            lead,
            tensor: None,
            attrs,
            regions: vec![],
            doc,
            span,
        };
        let oid = self.new.append_op(nb, op, vec![(sig_type(&sig), name)]);
        let v = self.new.ops[oid].results[0];
        self.bind(id, v);
        self.depth -= 1;
        Ok(v)
    }
}

/// Removes pure ops whose results nothing reads, until none is left.
pub fn dce(k: &mut Kernel) {
    loop {
        let mut used = HashSet::new();
        for b in reachable_blocks(k) {
            for &o in &k.dfg.blocks[b].ops {
                used.extend(k.dfg.ops[o].uses());
            }
        }
        let mut removed = false;
        for b in reachable_blocks(k) {
            let ops = std::mem::take(&mut k.dfg.blocks[b].ops);
            let keep: Vec<Op> = ops
                .into_iter()
                .filter(|&o| {
                    let od = &k.dfg.ops[o];
                    let dead = is_pure(od.opcode)
                        && od.regions.is_empty()
                        && od.results.iter().all(|r| !used.contains(r));
                    removed |= dead;
                    !dead
                })
                .collect();
            k.dfg.blocks[b].ops = keep;
        }
        if !removed {
            return;
        }
    }
}

/// Every block reachable from the body, outermost first.
fn reachable_blocks(k: &Kernel) -> Vec<Block> {
    let mut out = vec![];
    let mut stack = vec![k.body];
    while let Some(b) = stack.pop() {
        out.push(b);
        for &o in &k.dfg.blocks[b].ops {
            stack.extend(k.dfg.ops[o].regions.iter().copied());
        }
    }
    out
}

/// The cost model applied to the pure ops of a kernel (each op counted once).
pub fn kernel_cost(k: &Kernel) -> f64 {
    let mut total = 0.0;
    for b in reachable_blocks(k) {
        for &o in &k.dfg.blocks[b].ops {
            let od = &k.dfg.ops[o];
            if !is_pure(od.opcode) || od.results.len() != 1 {
                continue;
            }
            if let Some((d, shape)) = facts_of(k.dfg.ty(od.results[0])) {
                total += node_cost(&TileNode::op(od.opcode, "", d, &shape, vec![]));
            }
        }
    }
    total
}

/// Number of pure ops in a kernel.
pub fn pure_op_count(k: &Kernel) -> usize {
    reachable_blocks(k)
        .iter()
        .flat_map(|&b| k.dfg.blocks[b].ops.iter())
        .filter(|&&o| is_pure(k.dfg.ops[o].opcode))
        .count()
}
