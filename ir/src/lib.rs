//! kir-ir: the tile-level IR of kir — entities, types, the one op table, modules and kernels,
//! the text format (lexer, parser, canonical printer), the verifier and the editing toolkit
//! passes use ([`edit`]).
//!
//! A [`Module`] holds specialization constants, kernels and an optional entry [`Program`].
//! Kernels work on whole tiles and never name threads. See `docs/ir.md` for the grammar and the
//! semantics of every op.

pub mod attrs;
pub mod dtype;
pub mod edit;
pub mod entities;
pub mod error;
pub mod expr;
pub mod masks;
pub mod module;
pub mod ops;
pub mod renumber;
pub mod span;
pub mod text;
pub mod types;
pub mod verifier;

pub use dtype::Dtype;
pub use entities::{Block, KernelId, Op, Value};
pub use error::{Diagnostic, Diagnostics};
pub use expr::{BinOp, EvalError, EvalVal, Expr, ExprKind, Func, UnOp};
pub use module::{
    Access, ArgBinding, BlockData, ConstDecl, ConstKind, ConstValues, Dfg, Kernel, Launch, Module,
    Offset, OpData, Param, ParamKind, Program, TempDecl, TensorRef, TuneSet, ValueData, ValueDef,
};
pub use ops::{
    Arity, Attr, AttrKind, BinaryOp, CmpPred, Effect, ElemTypes, Elementwise, OpClass, OpInfo,
    Opcode, ReduceKind, UnaryOp, NF4_TABLE,
};
pub use span::Span;
pub use types::{ElemType, TensorType, Type};
