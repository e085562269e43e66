//! Cloning ops from one kernel into another ([`Cloner`]) with value, param and dim renaming,
//! and renaming the identifiers of an expression ([`rename_expr`]).

use crate::entities::{Block, Op, Value};
use crate::expr::{Expr, ExprKind};
use crate::module::{Dfg, Offset, OpData};
use crate::ops::{Attr, Opcode};
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
