//! Parsing of constant expressions (precedence climbing; negative literals fold to literals).

use super::{PResult, Parser};
use crate::error::Diagnostic;
use crate::expr::{BinOp, Expr, ExprKind, F64Bits, Func, UnOp};
use crate::text::lexer::Tok;

impl Parser {
    // ---- expressions (precedence climbing) ------------------------------------------------
    pub(super) fn expr(&mut self) -> PResult<Expr> {
        self.enter()?;
        let e = self.binary(1);
        self.depth -= 1;
        e
    }

    pub(super) fn binop(&mut self) -> Option<BinOp> {
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

    /// A chain of binary operators at `min_prec` or tighter. Each operator of a flat chain
    /// (`1 + 1 + … + 1`) adds a level to the tree it builds (the chain is left-deep), so each
    /// counts against the nesting limit like a parenthesis: every later pass walks expressions
    /// recursively, and a tree deeper than the limit would overflow their stacks.
    pub(super) fn binary(&mut self, min_prec: u8) -> PResult<Expr> {
        let outer = self.depth;
        let mut lhs = self.unary()?;
        while let Some(op) = self.binop() {
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.bump();
            self.enter()?;
            let rhs = self.binary(prec + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        self.depth = outer;
        Ok(lhs)
    }

    pub(super) fn unary(&mut self) -> PResult<Expr> {
        let sp = self.span();
        if self.eat_punct("-") {
            self.enter()?;
            let a = self.unary()?;
            self.depth -= 1;
            let span = sp.to(a.span);
            // Negative literals are literals, so printing and reparsing is the identity.
            return Ok(match a.kind {
                ExprKind::Int(v) if v >= 0 => Expr {
                    kind: ExprKind::Int(-v),
                    span,
                },
                ExprKind::Float(x) if !x.0.is_sign_negative() => Expr {
                    kind: ExprKind::Float(F64Bits(-x.0)),
                    span,
                },
                _ => Expr {
                    kind: ExprKind::Unary(UnOp::Neg, Box::new(a)),
                    span,
                },
            });
        }
        if self.eat_punct("!") {
            self.enter()?;
            let a = self.unary()?;
            self.depth -= 1;
            let span = sp.to(a.span);
            return Ok(Expr {
                kind: ExprKind::Unary(UnOp::Not, Box::new(a)),
                span,
            });
        }
        self.primary()
    }

    pub(super) fn primary(&mut self) -> PResult<Expr> {
        let sp = self.span();
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Int(v),
                    span: sp,
                })
            }
            Tok::Float(x) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Float(F64Bits(x)),
                    span: sp,
                })
            }
            Tok::Ident(s) => {
                self.bump();
                if let (Some(f), true) = (Func::from_name(&s), self.is_punct("(")) {
                    self.bump();
                    let args = self.comma_list(")", |p| p.expr())?;
                    let span = sp.to(self.prev_span());
                    if args.len() != f.arity() {
                        return Err(Diagnostic::new(
                            span,
                            format!(
                                "`{}` takes {} argument(s), found {}",
                                f.name(),
                                f.arity(),
                                args.len()
                            ),
                        ));
                    }
                    return Ok(Expr {
                        kind: ExprKind::Call(f, args),
                        span,
                    });
                }
                Ok(Expr {
                    kind: ExprKind::Ident(s),
                    span: sp,
                })
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
