//! Parsing of ops, regions, value names and types inside kernel bodies.

use super::{anonymous, bare_op, KState, PResult, Parser};
use crate::dtype::Dtype;
use crate::entities::{Block, Value};
use crate::error::Diagnostic;
use crate::expr::{Expr, ExprKind};
use crate::module::*;
use crate::ops::{Arity, Attr, AttrKind, CmpPred, Opcode, ReduceKind};
use crate::span::Span;
use crate::text::lexer::Tok;
use crate::types::{ElemType, Type};
use std::collections::HashMap;

impl Parser {
    // ---- ops ------------------------------------------------------------------------------
    /// Parses ops up to and including the closing `}` into block `b`; appends an empty
    /// `yield` if the block does not end with one.
    pub(super) fn block_ops(&mut self, ks: &mut KState, b: Block) -> PResult<()> {
        self.enter()?;
        loop {
            let doc = self.comments();
            if self.is_punct("}") {
                let sp = self.bump().span;
                let ends = ks.dfg.blocks[b]
                    .ops
                    .last()
                    .is_some_and(|&o| ks.dfg.ops[o].opcode == Opcode::Yield);
                if !ends {
                    let y = bare_op(Opcode::Yield, sp, vec![]);
                    ks.dfg.append_op(b, y, vec![]);
                }
                self.depth -= 1;
                return Ok(());
            }
            if matches!(self.peek(), Tok::Eof) {
                return self.err("an op or `}`");
            }
            self.op(ks, b, doc)?;
        }
    }

    pub(super) fn value_use(&mut self, ks: &KState) -> PResult<Value> {
        match self.peek().clone() {
            Tok::Value(name) => {
                let sp = self.bump().span;
                ks.scopes
                    .iter()
                    .rev()
                    .find_map(|s| s.get(&name).copied())
                    .ok_or_else(|| Diagnostic::new(sp, format!("use of undefined value `%{name}`")))
            }
            _ => self.err("a value `%name`"),
        }
    }

    pub(super) fn value_def(&mut self) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Value(name) => Ok((name, self.bump().span)),
            _ => self.err("a value `%name`"),
        }
    }

    pub(super) fn define(
        &mut self,
        ks: &mut KState,
        name: &str,
        v: Value,
        sp: Span,
    ) -> PResult<()> {
        if ks.scopes.iter().any(|s| s.contains_key(name)) {
            return Err(Diagnostic::new(
                sp,
                format!("value `%{name}` is already defined"),
            ));
        }
        if let Some(s) = ks.scopes.last_mut() {
            s.insert(name.to_string(), v);
        }
        Ok(())
    }

    pub(super) fn types(&mut self) -> PResult<Vec<Type>> {
        let mut v = vec![self.ty()?];
        while self.eat_punct(",") {
            v.push(self.ty()?);
        }
        Ok(v)
    }

    /// One dim of a type (or a tile's element type, read as a name): a literal, a name or a
    /// parenthesized expression; `what` names it in the error.
    fn dim_item(&mut self, what: &str) -> PResult<Expr> {
        let sp = self.span();
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Int(v),
                    span: sp,
                })
            }
            Tok::Ident(s) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Ident(s),
                    span: sp,
                })
            }
            Tok::Punct("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect_punct(")")?;
                Ok(e)
            }
            _ => self.err(what),
        }
    }

    pub(super) fn ty(&mut self) -> PResult<Type> {
        if self.is_kw("mbar") {
            self.bump();
            self.expect_punct("<")?;
            let n = self.dim_item("a barrier count")?;
            self.expect_punct(">")?;
            return Ok(Type::Mbar(n));
        }
        let smem = self.is_kw("smem");
        if !smem && !self.is_kw("tile") {
            return Ok(Type::Scalar(self.elem()?));
        }
        self.bump();
        self.expect_punct("<")?;
        let mut dims = Vec::new();
        loop {
            let item = self.dim_item("a tile dim or element type")?;
            let sep = matches!(self.peek(), Tok::X) || self.is_kw("x");
            if sep {
                self.bump();
                dims.push(item);
                continue;
            }
            self.expect_punct(">")?;
            let elem = match item.kind {
                ExprKind::Ident(s) => match Dtype::from_name(&s) {
                    Some(d) => ElemType::Known(d),
                    None => ElemType::Named(s, item.span),
                },
                _ => {
                    return Err(Diagnostic::new(
                        item.span,
                        "expected an element type last in `tile<...>`",
                    ))
                }
            };
            if dims.is_empty() {
                return Err(Diagnostic::new(item.span, "a tile needs at least one dim"));
            }
            if smem {
                return Ok(Type::Smem(dims, elem));
            }
            return Ok(Type::Tile(dims, elem));
        }
    }

    pub(super) fn region(
        &mut self,
        ks: &mut KState,
        args: Vec<(String, Span, Type)>,
    ) -> PResult<Block> {
        let b = ks.dfg.new_block();
        ks.scopes.push(HashMap::new());
        for (name, sp, ty) in args {
            let nm = (!anonymous(&name)).then(|| name.clone());
            let v = ks.dfg.add_block_arg(b, ty, nm, sp);
            self.define(ks, &name, v, sp)?;
        }
        self.expect_punct("{")?;
        self.block_ops(ks, b)?;
        ks.scopes.pop();
        Ok(b)
    }

    pub(super) fn op(&mut self, ks: &mut KState, b: Block, doc: Vec<String>) -> PResult<()> {
        let start = self.span();
        let mut results = Vec::new();
        if matches!(self.peek(), Tok::Value(_)) {
            results.push(self.value_def()?);
            while self.eat_punct(",") {
                results.push(self.value_def()?);
            }
            self.expect_punct("=")?;
        }
        let (mnemonic, msp) = self.ident("an op name")?;
        let opcode = Opcode::from_name(&mnemonic)
            .ok_or_else(|| Diagnostic::new(msp, format!("unknown op `{mnemonic}`")))?;
        let mut op = bare_op(opcode, start, doc);
        let info = opcode.info();
        let mut types: Vec<Type> = Vec::new();
        match opcode {
            Opcode::For => {
                let (iv, ivsp) = self.value_def()?;
                self.expect_punct("=")?;
                let lo = self.value_use(ks)?;
                self.expect_kw("to")?;
                let hi = self.value_use(ks)?;
                self.expect_kw("step")?;
                let step = self.value_use(ks)?;
                op.operands = vec![lo, hi, step];
                let mut carried = Vec::new();
                if self.eat_kw("iter") {
                    self.expect_punct("(")?;
                    carried = self.comma_list(")", |p| {
                        let (n, sp) = p.value_def()?;
                        p.expect_punct("=")?;
                        Ok((n, sp, p.value_use(ks)?))
                    })?;
                }
                if self.eat_punct(":") {
                    types = self.types()?;
                }
                if types.len() != carried.len() {
                    let sp = self.prev_span();
                    return Err(Diagnostic::new(
                        sp,
                        format!(
                            "`for` carries {} value(s) but lists {} type(s)",
                            carried.len(),
                            types.len()
                        ),
                    ));
                }
                let mut args = vec![(iv, ivsp, Type::scalar(Dtype::I32))];
                for ((n, sp, init), t) in carried.into_iter().zip(&types) {
                    op.operands.push(init);
                    args.push((n, sp, t.clone()));
                }
                op.regions.push(self.region(ks, args)?);
            }
            Opcode::If | Opcode::StaticIf => {
                if opcode == Opcode::If {
                    op.operands.push(self.value_use(ks)?);
                } else {
                    op.lead = Some(Attr::Expr(self.expr()?));
                }
                if self.eat_punct(":") {
                    types = self.types()?;
                }
                op.regions.push(self.region(ks, vec![])?);
                if self.eat_kw("else") {
                    op.regions.push(self.region(ks, vec![])?);
                } else {
                    let e = ks.dfg.new_block();
                    let y = bare_op(Opcode::Yield, self.prev_span(), vec![]);
                    ks.dfg.append_op(e, y, vec![]);
                    op.regions.push(e);
                }
            }
            Opcode::WarpSpecialize => {
                self.generic_op(ks, &mut op, info)?;
                op.regions.push(self.region(ks, vec![])?);
                self.expect_kw("consumer")?;
                self.expect_punct("(")?;
                let (n, sp) = self.value_def()?;
                self.expect_punct(")")?;
                op.regions
                    .push(self.region(ks, vec![(n, sp, Type::scalar(Dtype::I32))])?);
            }
            _ => self.generic_op(ks, &mut op, info)?,
        }
        if opcode != Opcode::For
            && opcode != Opcode::If
            && opcode != Opcode::StaticIf
            && self.eat_punct(":")
        {
            types = self.types()?;
        }
        if types.len() != results.len() {
            return Err(Diagnostic::new(start.to(self.prev_span()), format!(
                "`{mnemonic}` defines {} value(s) but gives {} type(s) (write `: TYPE` after the op)",
                results.len(), types.len())));
        }
        op.span = start.to(self.prev_span());
        let rt = results
            .iter()
            .zip(types)
            .map(|((n, _), t)| (t, (!anonymous(n)).then(|| n.clone())))
            .collect();
        let id = ks.dfg.append_op(b, op, rt);
        let vals = ks.dfg.ops[id].results.clone();
        for ((name, sp), v) in results.iter().zip(vals) {
            ks.dfg.values[v].span = *sp;
            self.define(ks, name, v, *sp)?;
        }
        Ok(())
    }

    pub(super) fn generic_op(
        &mut self,
        ks: &KState,
        op: &mut OpData,
        info: &crate::ops::OpInfo,
    ) -> PResult<()> {
        match info.lead {
            Some(AttrKind::Name) => {
                let (n, sp) = self.ident("a name")?;
                op.lead = Some(Attr::Name(n, sp));
            }
            Some(k @ (AttrKind::Cmp | AttrKind::Reduce)) => op.lead = Some(self.keyword_attr(k)?),
            Some(AttrKind::Str) => op.lead = Some(Attr::Str(self.string()?)),
            Some(_) => op.lead = Some(Attr::Expr(self.expr()?)),
            None => {}
        }
        if info.tensor {
            let (param, sp) = self.ident("a tensor param name")?;
            self.expect_punct("[")?;
            let offsets = self.comma_list("]", |p| {
                if matches!(p.peek(), Tok::Value(_)) {
                    Ok(Offset::Value(p.value_use(ks)?))
                } else {
                    Ok(Offset::Expr(p.expr()?))
                }
            })?;
            op.tensor = Some(TensorRef {
                param,
                offsets,
                span: sp.to(self.prev_span()),
            });
            if info.operands != Arity::Fixed(0) {
                // The comma promises an operand: `store y[%o],` is an error, not a store
                // without a value (which would print as `store y[%o]` and not parse back).
                self.expect_punct(",")?;
                op.operands.push(self.value_use(ks)?);
                while self.eat_punct(",") {
                    op.operands.push(self.value_use(ks)?);
                }
            }
        } else if info.operands != Arity::Fixed(0)
            && matches!(self.peek(), Tok::Value(_))
            && !(info.operands == Arity::Variadic && self.at_results())
        {
            op.operands.push(self.value_use(ks)?);
            while self.eat_punct(",") {
                op.operands.push(self.value_use(ks)?);
            }
        }
        while let Tok::Ident(kw) = self.peek().clone() {
            let Some(&(key, kind)) = info.keywords.iter().find(|(k, _)| *k == kw) else {
                break;
            };
            let ksp = self.bump().span;
            if op.attrs.iter().any(|(k, _)| k == key) {
                return Err(Diagnostic::new(ksp, format!("`{key}` given twice")));
            }
            let a = match kind {
                AttrKind::Expr => Attr::Expr(self.expr()?),
                AttrKind::Name => {
                    let (n, sp) = self.ident("a name")?;
                    Attr::Name(n, sp)
                }
                AttrKind::Value => Attr::Value(self.value_use(ks)?),
                AttrKind::List => {
                    self.expect_punct("[")?;
                    Attr::List(self.comma_list("]", |p| p.expr())?)
                }
                AttrKind::Flag => Attr::Flag,
                AttrKind::Cmp | AttrKind::Reduce => self.keyword_attr(kind)?,
                AttrKind::Str => Attr::Str(self.string()?),
            };
            op.attrs.push((key.to_string(), a));
        }
        // Canonical order: the op table's.
        op.attrs
            .sort_by_key(|(k, _)| info.keywords.iter().position(|(kk, _)| kk == k));
        Ok(())
    }

    /// A string literal (`"acc"`), unescaped.
    fn string(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Tok::Str(s) => {
                self.bump();
                Ok(s)
            }
            _ => self.err("a string `\"...\"`"),
        }
    }

    /// A `cmp` predicate or `reduce` kind: typed when known, else kept as a name (with its
    /// span) for the verifier to report.
    fn keyword_attr(&mut self, kind: AttrKind) -> PResult<Attr> {
        let (n, sp) = self.ident("a name")?;
        let typed = match kind {
            AttrKind::Cmp => CmpPred::from_name(&n).map(Attr::Cmp),
            AttrKind::Reduce => ReduceKind::from_name(&n).map(Attr::Reduce),
            _ => None,
        };
        Ok(typed.unwrap_or(Attr::Name(n, sp)))
    }
}
