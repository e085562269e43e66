//! Parser: tokens to a [`Module`], with spans on everything. Stops at the first syntax error;
//! semantic checks are the verifier's job. Never panics on any input.

use super::lexer::{lex, Tok, Token};
use crate::dtype::Dtype;
use crate::entities::{Block, Value};
use crate::error::{Diagnostic, Diagnostics};
use crate::expr::{BinOp, Expr, ExprKind, F64Bits, Func, UnOp};
use crate::module::*;
use crate::ops::{Arity, Attr, AttrKind, Opcode};
use crate::span::Span;
use crate::types::{ElemType, TensorType, Type};
use cranelift_entity::PrimaryMap;
use std::collections::HashMap;

/// Parses a whole module. The result is not verified.
pub fn parse(src: &str) -> Result<Module, Diagnostics> {
    let toks = lex(src)?;
    let mut p = Parser { toks, pos: 0, depth: 0 };
    p.module().map_err(Diagnostics::from)
}

type PResult<T> = Result<T, Diagnostic>;

/// Deepest nesting of regions and expressions accepted (keeps recursion bounded).
const MAX_DEPTH: usize = 200;

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    depth: usize,
}

/// Per-kernel state: arenas plus lexical scopes of value names.
struct KState {
    dfg: Dfg,
    scopes: Vec<HashMap<String, Value>>,
}

/// True for value names the printer generates (`v12`) or all-digit names: they carry no name.
fn anonymous(name: &str) -> bool {
    let digits = name.strip_prefix('v').unwrap_or(name);
    !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())
}

impl Parser {
    // ---- token plumbing -------------------------------------------------------------------
    /// Index of the next non-comment token at or after `pos`.
    fn next_index(&self) -> usize {
        let mut i = self.pos;
        while matches!(self.toks.get(i), Some(Token { tok: Tok::Comment(_), .. })) {
            i += 1;
        }
        i.min(self.toks.len().saturating_sub(1))
    }

    fn peek(&mut self) -> &Tok {
        let i = self.next_index();
        self.toks.get(i).map_or(&Tok::Eof, |t| &t.tok)
    }

    fn span(&mut self) -> Span {
        let i = self.next_index();
        self.toks.get(i).map_or(Span::default(), |t| t.span)
    }

    fn prev_span(&self) -> Span {
        let mut i = self.pos;
        while i > 0 {
            i -= 1;
            if !matches!(self.toks[i].tok, Tok::Comment(_)) {
                return self.toks[i].span;
            }
        }
        Span::default()
    }

    fn bump(&mut self) -> Token {
        let i = self.next_index();
        let t = self.toks.get(i).cloned().unwrap_or(Token {
            tok: Tok::Eof,
            span: Span::default(),
            spaced: true,
        });
        if !matches!(t.tok, Tok::Eof) {
            self.pos = i + 1;
        }
        t
    }

    /// Comment lines directly before the next token.
    fn comments(&mut self) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(Token { tok: Tok::Comment(c), .. }) = self.toks.get(self.pos) {
            v.push(c.clone());
            self.pos += 1;
        }
        v
    }

    fn err<T>(&mut self, what: &str) -> PResult<T> {
        let sp = self.span();
        let found = self.peek().describe();
        Err(Diagnostic::new(sp, format!("expected {what}, found {found}")))
    }

    fn is_punct(&mut self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, p: &str) -> PResult<Span> {
        if self.is_punct(p) {
            Ok(self.bump().span)
        } else {
            self.err(&format!("`{p}`"))
        }
    }

    fn is_kw(&mut self, kw: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == kw)
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw(kw) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect_kw(&mut self, kw: &str) -> PResult<Span> {
        if self.is_kw(kw) {
            Ok(self.bump().span)
        } else {
            self.err(&format!("`{kw}`"))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<(String, Span)> {
        if let Tok::Ident(s) = self.peek() {
            let s = s.clone();
            Ok((s, self.bump().span))
        } else {
            self.err(what)
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let sp = self.span();
            return Err(Diagnostic::new(sp, "nesting is too deep"));
        }
        Ok(())
    }

    fn comma_list<T>(
        &mut self,
        close: &str,
        mut f: impl FnMut(&mut Parser) -> PResult<T>,
    ) -> PResult<Vec<T>> {
        let mut v = Vec::new();
        if self.eat_punct(close) {
            return Ok(v);
        }
        loop {
            v.push(f(self)?);
            if self.eat_punct(close) {
                return Ok(v);
            }
            self.expect_punct(",")?;
            if self.eat_punct(close) {
                return Ok(v);
            }
        }
    }

    // ---- module level ---------------------------------------------------------------------
    fn module(&mut self) -> PResult<Module> {
        let doc = self.comments();
        self.expect_kw("module")?;
        let (name, _) = self.ident("a module name")?;
        let mut m = Module { doc, name, consts: vec![], kernels: PrimaryMap::new(), program: None };
        loop {
            let doc = self.comments();
            match self.peek().clone() {
                Tok::Eof => return Ok(m),
                Tok::Ident(s) if s == "const" => m.consts.push(self.const_decl(doc)?),
                Tok::Ident(s) if s == "kernel" => {
                    let k = self.kernel(doc)?;
                    m.kernels.push(k);
                }
                Tok::Ident(s) if s == "program" => {
                    if m.program.is_some() {
                        let sp = self.span();
                        return Err(Diagnostic::new(sp, "a module has at most one program"));
                    }
                    m.program = Some(self.program(doc)?);
                }
                _ => return self.err("`const`, `kernel` or `program`"),
            }
        }
    }

    fn const_decl(&mut self, doc: Vec<String>) -> PResult<ConstDecl> {
        let start = self.expect_kw("const")?;
        let (name, _) = self.ident("a constant name")?;
        self.expect_punct(":")?;
        let kind = if self.eat_kw("int") {
            ConstKind::Int
        } else if self.eat_punct("{") {
            ConstKind::Enum(self.comma_list("}", |p| Ok(p.ident("a variant name")?.0))?)
        } else {
            return self.err("`int` or `{variants}`");
        };
        self.expect_punct("=")?;
        let default = self.expr()?;
        let require = if self.eat_kw("where") { Some(self.expr()?) } else { None };
        let span = start.to(self.prev_span());
        Ok(ConstDecl { name, kind, default, require, doc, span })
    }

    fn elem(&mut self) -> PResult<ElemType> {
        let (s, sp) = self.ident("an element type")?;
        Ok(match Dtype::from_name(&s) {
            Some(d) => ElemType::Known(d),
            None => ElemType::Named(s, sp),
        })
    }

    fn tensor_type(&mut self) -> PResult<TensorType> {
        self.expect_kw("tensor")?;
        self.expect_punct("<")?;
        let elem = self.elem()?;
        self.expect_punct(">")?;
        self.expect_punct("[")?;
        let dims = self.comma_list("]", |p| p.expr())?;
        let strides = if self.eat_kw("strides") {
            self.expect_punct("[")?;
            Some(self.comma_list("]", |p| p.expr())?)
        } else {
            None
        };
        Ok(TensorType { elem, dims, strides })
    }

    fn param(&mut self) -> PResult<Param> {
        let (name, start) = self.ident("a param name")?;
        self.expect_punct(":")?;
        let access = if self.eat_kw("in") {
            Some(Access::In)
        } else if self.eat_kw("out") {
            Some(Access::Out)
        } else if self.eat_kw("inout") {
            Some(Access::InOut)
        } else {
            None
        };
        let kind = match access {
            Some(a) => ParamKind::Tensor(a, self.tensor_type()?),
            None if self.is_kw("tensor") => {
                return self.err("`in`, `out` or `inout` before `tensor`");
            }
            None => ParamKind::Scalar(self.elem()?),
        };
        let cond = if self.eat_kw("if") { Some(self.expr()?) } else { None };
        Ok(Param { name, kind, cond, span: start.to(self.prev_span()) })
    }

    fn program(&mut self, doc: Vec<String>) -> PResult<Program> {
        let start = self.expect_kw("program")?;
        self.expect_punct("(")?;
        let params = self.comma_list(")", |p| p.param())?;
        self.expect_punct("{")?;
        let (mut temps, mut launches) = (vec![], vec![]);
        while !self.eat_punct("}") {
            if self.eat_kw("temp") {
                let (name, sp) = self.ident("a temp name")?;
                self.expect_punct(":")?;
                let ty = self.tensor_type()?;
                temps.push(TempDecl { name, ty, span: sp.to(self.prev_span()) });
            } else if self.is_kw("launch") {
                let sp = self.bump().span;
                let kernel = match self.bump() {
                    Token { tok: Tok::At(k), .. } => k,
                    _ => return Err(Diagnostic::new(sp, "expected a kernel name `@name` after `launch`")),
                };
                self.expect_punct("(")?;
                let args = self.comma_list(")", |p| {
                    let (param, psp) = p.ident("a kernel param name")?;
                    let arg = if p.eat_punct("=") { p.ident("a buffer name")?.0 } else { param.clone() };
                    Ok(ArgBinding { param, arg, span: psp.to(p.prev_span()) })
                })?;
                launches.push(Launch { kernel, args, span: sp.to(self.prev_span()) });
            } else {
                return self.err("`temp`, `launch` or `}`");
            }
        }
        Ok(Program { params, temps, launches, doc, span: start.to(self.prev_span()) })
    }

    fn kernel(&mut self, doc: Vec<String>) -> PResult<Kernel> {
        let start = self.expect_kw("kernel")?;
        let name = match self.peek().clone() {
            Tok::At(k) => {
                self.bump();
                k
            }
            _ => return self.err("a kernel name `@name`"),
        };
        self.expect_punct("(")?;
        let params = self.comma_list(")", |p| p.param())?;
        self.expect_kw("grid")?;
        self.expect_punct("[")?;
        let grid = self.comma_list("]", |p| p.expr())?;
        let requires = if self.eat_kw("requires") {
            self.expect_punct("[")?;
            self.comma_list("]", |p| p.expr())?
        } else {
            vec![]
        };
        let span = start.to(self.prev_span());
        let mut ks = KState { dfg: Dfg::default(), scopes: vec![HashMap::new()] };
        let body = ks.dfg.new_block();
        self.expect_punct("{")?;
        self.block_ops(&mut ks, body)?;
        Ok(Kernel { name, params, grid, requires, body, dfg: ks.dfg, doc, span })
    }

    // ---- ops ------------------------------------------------------------------------------
    /// Parses ops up to and including the closing `}` into block `b`; appends an empty
    /// `yield` if the block does not end with one.
    fn block_ops(&mut self, ks: &mut KState, b: Block) -> PResult<()> {
        self.enter()?;
        loop {
            let doc = self.comments();
            if self.is_punct("}") {
                let sp = self.bump().span;
                let ends = ks.dfg.blocks[b].ops.last().is_some_and(|&o| ks.dfg.ops[o].opcode == Opcode::Yield);
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

    fn value_use(&mut self, ks: &KState) -> PResult<Value> {
        match self.peek().clone() {
            Tok::Value(name) => {
                let sp = self.bump().span;
                ks.scopes.iter().rev().find_map(|s| s.get(&name).copied()).ok_or_else(|| {
                    Diagnostic::new(sp, format!("use of undefined value `%{name}`"))
                })
            }
            _ => self.err("a value `%name`"),
        }
    }

    fn value_def(&mut self) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Value(name) => Ok((name, self.bump().span)),
            _ => self.err("a value `%name`"),
        }
    }

    fn define(&mut self, ks: &mut KState, name: &str, v: Value, sp: Span) -> PResult<()> {
        if ks.scopes.iter().any(|s| s.contains_key(name)) {
            return Err(Diagnostic::new(sp, format!("value `%{name}` is already defined")));
        }
        if let Some(s) = ks.scopes.last_mut() {
            s.insert(name.to_string(), v);
        }
        Ok(())
    }

    fn types(&mut self) -> PResult<Vec<Type>> {
        let mut v = vec![self.ty()?];
        while self.eat_punct(",") {
            v.push(self.ty()?);
        }
        Ok(v)
    }

    fn ty(&mut self) -> PResult<Type> {
        if !self.is_kw("tile") {
            return Ok(Type::Scalar(self.elem()?));
        }
        self.bump();
        self.expect_punct("<")?;
        let mut dims = Vec::new();
        loop {
            let sp = self.span();
            let item = match self.peek().clone() {
                Tok::Int(v) => {
                    self.bump();
                    Expr { kind: ExprKind::Int(v), span: sp }
                }
                Tok::Ident(s) => {
                    self.bump();
                    Expr { kind: ExprKind::Ident(s), span: sp }
                }
                Tok::Punct("(") => {
                    self.bump();
                    let e = self.expr()?;
                    self.expect_punct(")")?;
                    e
                }
                _ => return self.err("a tile dim or element type"),
            };
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
                _ => return Err(Diagnostic::new(item.span, "expected an element type last in `tile<...>`")),
            };
            if dims.is_empty() {
                return Err(Diagnostic::new(item.span, "a tile needs at least one dim"));
            }
            return Ok(Type::Tile(dims, elem));
        }
    }

    fn region(&mut self, ks: &mut KState, args: Vec<(String, Span, Type)>) -> PResult<Block> {
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

    fn op(&mut self, ks: &mut KState, b: Block, doc: Vec<String>) -> PResult<()> {
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
                    return Err(Diagnostic::new(sp, format!(
                        "`for` carries {} value(s) but lists {} type(s)", carried.len(), types.len())));
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
            _ => self.generic_op(ks, &mut op, info)?,
        }
        if opcode != Opcode::For && opcode != Opcode::If && opcode != Opcode::StaticIf && self.eat_punct(":") {
            types = self.types()?;
        }
        if types.len() != results.len() {
            return Err(Diagnostic::new(start.to(self.prev_span()), format!(
                "`{mnemonic}` defines {} value(s) but gives {} type(s) (write `: TYPE` after the op)",
                results.len(), types.len())));
        }
        op.span = start.to(self.prev_span());
        let rt = results.iter().zip(types).map(|((n, _), t)| (t, (!anonymous(n)).then(|| n.clone()))).collect();
        let id = ks.dfg.append_op(b, op, rt);
        let vals = ks.dfg.ops[id].results.clone();
        for ((name, sp), v) in results.iter().zip(vals) {
            ks.dfg.values[v].span = *sp;
            self.define(ks, name, v, *sp)?;
        }
        Ok(())
    }

    fn generic_op(&mut self, ks: &KState, op: &mut OpData, info: &crate::ops::OpInfo) -> PResult<()> {
        match info.lead {
            Some(AttrKind::Name) => {
                let (n, sp) = self.ident("a name")?;
                op.lead = Some(Attr::Name(n, sp));
            }
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
            op.tensor = Some(TensorRef { param, offsets, span: sp.to(self.prev_span()) });
            if info.operands != Arity::Fixed(0) {
                self.expect_punct(",")?;
            }
        }
        if info.operands != Arity::Fixed(0) && matches!(self.peek(), Tok::Value(_)) {
            op.operands.push(self.value_use(ks)?);
            while self.eat_punct(",") {
                op.operands.push(self.value_use(ks)?);
            }
        }
        while let Tok::Ident(kw) = self.peek().clone() {
            let Some(&(key, kind)) = info.keywords.iter().find(|(k, _)| *k == kw) else { break };
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
            };
            op.attrs.push((key.to_string(), a));
        }
        // Canonical order: the op table's.
        op.attrs.sort_by_key(|(k, _)| info.keywords.iter().position(|(kk, _)| kk == k));
        Ok(())
    }

    // ---- expressions (precedence climbing) ------------------------------------------------
    fn expr(&mut self) -> PResult<Expr> {
        self.enter()?;
        let e = self.binary(1);
        self.depth -= 1;
        e
    }

    fn binop(&mut self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::Punct("+") => BinOp::Add,
            Tok::Punct("-") => BinOp::Sub,
            Tok::Punct("*") => BinOp::Mul,
            Tok::Punct("/") => BinOp::Div,
            Tok::Punct("%") => BinOp::Rem,
            Tok::Punct("==") => BinOp::Eq,
            Tok::Punct("!=") => BinOp::Ne,
            Tok::Punct("<") => BinOp::Lt,
            Tok::Punct("<=") => BinOp::Le,
            Tok::Punct(">") => BinOp::Gt,
            Tok::Punct(">=") => BinOp::Ge,
            Tok::Punct("&&") => BinOp::And,
            Tok::Punct("||") => BinOp::Or,
            _ => return None,
        })
    }

    fn binary(&mut self, min_prec: u8) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.binop() {
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.bump();
            self.enter()?;
            let rhs = self.binary(prec + 1)?;
            self.depth -= 1;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> PResult<Expr> {
        let sp = self.span();
        if self.eat_punct("-") {
            self.enter()?;
            let a = self.unary()?;
            self.depth -= 1;
            let span = sp.to(a.span);
            // Negative literals are literals, so printing and reparsing is the identity.
            return Ok(match a.kind {
                ExprKind::Int(v) if v >= 0 => Expr { kind: ExprKind::Int(-v), span },
                ExprKind::Float(x) if !x.0.is_sign_negative() => {
                    Expr { kind: ExprKind::Float(F64Bits(-x.0)), span }
                }
                _ => Expr { kind: ExprKind::Unary(UnOp::Neg, Box::new(a)), span },
            });
        }
        if self.eat_punct("!") {
            self.enter()?;
            let a = self.unary()?;
            self.depth -= 1;
            let span = sp.to(a.span);
            return Ok(Expr { kind: ExprKind::Unary(UnOp::Not, Box::new(a)), span });
        }
        self.primary()
    }

    fn primary(&mut self) -> PResult<Expr> {
        let sp = self.span();
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Expr { kind: ExprKind::Int(v), span: sp })
            }
            Tok::Float(x) => {
                self.bump();
                Ok(Expr { kind: ExprKind::Float(F64Bits(x)), span: sp })
            }
            Tok::Ident(s) => {
                self.bump();
                if let (Some(f), true) = (Func::from_name(&s), self.is_punct("(")) {
                    self.bump();
                    let args = self.comma_list(")", |p| p.expr())?;
                    let span = sp.to(self.prev_span());
                    if args.len() != f.arity() {
                        return Err(Diagnostic::new(span, format!(
                            "`{}` takes {} argument(s), found {}", f.name(), f.arity(), args.len())));
                    }
                    return Ok(Expr { kind: ExprKind::Call(f, args), span });
                }
                Ok(Expr { kind: ExprKind::Ident(s), span: sp })
            }
            Tok::Punct("(") => {
                self.bump();
                let mut e = self.expr()?;
                let end = self.expect_punct(")")?;
                e.span = sp.to(end);
                Ok(e)
            }
            _ => self.err("an expression"),
        }
    }
}

/// An op with no operands, attributes, regions or results.
pub fn bare_op(opcode: Opcode, span: Span, doc: Vec<String>) -> OpData {
    OpData {
        opcode,
        results: vec![],
        operands: vec![],
        lead: None,
        tensor: None,
        attrs: vec![],
        regions: vec![],
        doc,
        span,
    }
}
