//! Parser: tokens to a [`Module`], with spans on everything. Stops at the first syntax error;
//! semantic checks are the verifier's job. Never panics on any input.

use super::lexer::{lex, Tok, Token};
use crate::dtype::Dtype;
use crate::entities::Value;
use crate::error::{Diagnostic, Diagnostics};
use crate::expr::Expr;
use crate::module::*;

mod expr;
mod ops;
use crate::ops::Opcode;
use crate::span::Span;
use crate::types::{ElemType, TensorType};
use cranelift_entity::PrimaryMap;
use std::collections::HashMap;

/// Parses a whole module. The result is not verified.
pub fn parse(src: &str) -> Result<Module, Diagnostics> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    p.module().map_err(Diagnostics::from)
}

/// Parses one expression of the module grammar (a grid formula `cdiv(M, 128)`, a requirement
/// `Hq % Hkv == 0`) that makes up all of `src`, as META.json writes them. Spans are byte
/// offsets into `src`. Never panics on any input.
pub fn parse_expr(src: &str) -> Result<Expr, Diagnostics> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    let e = p.expr()?;
    if !matches!(p.peek(), Tok::Eof) {
        return Err(p.err::<()>("the end of the expression").unwrap_err().into());
    }
    Ok(e)
}

type PResult<T> = Result<T, Diagnostic>;

/// Deepest nesting of regions and expressions accepted (keeps recursion bounded): regions,
/// parentheses, unary operators and each operator of a chain of binary operators count one
/// level each, so no expression tree the parser builds is deeper than twice this.
pub const MAX_DEPTH: usize = 200;

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
        while matches!(
            self.toks.get(i),
            Some(Token {
                tok: Tok::Comment(_),
                ..
            })
        ) {
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
        while let Some(Token {
            tok: Tok::Comment(c),
            ..
        }) = self.toks.get(self.pos)
        {
            v.push(c.clone());
            self.pos += 1;
        }
        v
    }

    fn err<T>(&mut self, what: &str) -> PResult<T> {
        let sp = self.span();
        let found = self.peek().describe();
        Err(Diagnostic::new(
            sp,
            format!("expected {what}, found {found}"),
        ))
    }

    /// True if the tokens ahead are a result list `VALUE (, VALUE)* =`: the next op's results,
    /// not operands (which a `print` without values would otherwise take).
    fn at_results(&self) -> bool {
        let tok = |i: usize| self.toks.get(i).map(|t| &t.tok);
        let skip = |mut i: usize| {
            while matches!(tok(i), Some(Tok::Comment(_))) {
                i += 1;
            }
            i
        };
        let mut i = self.pos;
        loop {
            i = skip(i);
            if !matches!(tok(i), Some(Tok::Value(_))) {
                return false;
            }
            i = skip(i + 1);
            match tok(i) {
                Some(Tok::Punct(",")) => i += 1,
                Some(Tok::Punct("=")) => return true,
                _ => return false,
            }
        }
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
            return Err(Diagnostic::new(
                sp,
                format!(
                    "nesting is too deep: more than {MAX_DEPTH} levels of regions, parentheses, \
                     unary operators or chained binary operators"
                ),
            ));
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
        let mut m = Module {
            doc,
            name,
            consts: vec![],
            kernels: PrimaryMap::new(),
            program: None,
        };
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
        let tune = if self.is_kw("tune") {
            Some(self.tune_set()?)
        } else {
            None
        };
        let require = if self.eat_kw("where") {
            Some(self.expr()?)
        } else {
            None
        };
        let span = start.to(self.prev_span());
        Ok(ConstDecl {
            name,
            kind,
            default,
            tune,
            require,
            doc,
            span,
        })
    }

    /// `tune {V, …}`: integer literals, each optionally negated (an empty set parses; the
    /// verifier reports it).
    fn tune_set(&mut self) -> PResult<TuneSet> {
        let start = self.expect_kw("tune")?;
        self.expect_punct("{")?;
        let items = self.comma_list("}", |p| {
            let neg = p.is_punct("-");
            let sign = if neg { Some(p.bump().span) } else { None };
            match p.peek().clone() {
                Tok::Int(v) => {
                    let sp = p.bump().span;
                    let sp = sign.map_or(sp, |s| s.to(sp));
                    Ok((if neg { -v } else { v }, sp))
                }
                _ => p.err("an integer literal (a tune value)"),
            }
        })?;
        let (values, spans) = items.into_iter().unzip();
        Ok(TuneSet {
            values,
            spans,
            span: start.to(self.prev_span()),
        })
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
        Ok(TensorType {
            elem,
            dims,
            strides,
        })
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
        let cond = if self.eat_kw("if") {
            Some(self.expr()?)
        } else {
            None
        };
        Ok(Param {
            name,
            kind,
            cond,
            span: start.to(self.prev_span()),
        })
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
                temps.push(TempDecl {
                    name,
                    ty,
                    span: sp.to(self.prev_span()),
                });
            } else if self.is_kw("launch") {
                let sp = self.bump().span;
                let kernel = match self.bump() {
                    Token {
                        tok: Tok::At(k), ..
                    } => k,
                    _ => {
                        return Err(Diagnostic::new(
                            sp,
                            "expected a kernel name `@name` after `launch`",
                        ))
                    }
                };
                self.expect_punct("(")?;
                let args = self.comma_list(")", |p| {
                    let (param, psp) = p.ident("a kernel param name")?;
                    let arg = if p.eat_punct("=") {
                        p.ident("a buffer name")?.0
                    } else {
                        param.clone()
                    };
                    Ok(ArgBinding {
                        param,
                        arg,
                        span: psp.to(p.prev_span()),
                    })
                })?;
                launches.push(Launch {
                    kernel,
                    args,
                    span: sp.to(self.prev_span()),
                });
            } else {
                return self.err("`temp`, `launch` or `}`");
            }
        }
        Ok(Program {
            params,
            temps,
            launches,
            doc,
            span: start.to(self.prev_span()),
        })
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
        let mut ks = KState {
            dfg: Dfg::default(),
            scopes: vec![HashMap::new()],
        };
        let body = ks.dfg.new_block();
        self.expect_punct("{")?;
        self.block_ops(&mut ks, body)?;
        Ok(Kernel {
            name,
            params,
            grid,
            requires,
            body,
            dfg: ks.dfg,
            doc,
            span,
        })
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
