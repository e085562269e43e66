//! Modules, kernels, params, programs and the per-kernel dataflow graph (arenas of values, ops, blocks).

use crate::entities::{Block, KernelId, Op, Value};
use crate::expr::{EvalVal, Expr};
use crate::ops::{Attr, Opcode};
use crate::span::Span;
use crate::types::{ElemType, TensorType, Type};
use cranelift_entity::PrimaryMap;

/// The kind of a specialization constant.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstKind {
    /// An integer (booleans are 0/1 integers).
    Int,
    /// One of a fixed set of names (`{none, bias, silu}`); a set of dtype names makes a
    /// dtype-valued constant usable as an element type.
    Enum(Vec<String>),
}

/// `const NAME: KIND = DEFAULT [tune {V, …}] [where COND]` — a specialization constant,
/// overridable with `-D`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstDecl {
    pub name: String,
    pub kind: ConstKind,
    /// May refer to earlier constants.
    pub default: Expr,
    /// The values a tuner tries for this constant (`tune {32, 64, 128}`; int constants only,
    /// docs/tuning.md). `None`: not tunable.
    pub tune: Option<TuneSet>,
    /// A condition every value must satisfy (checked at specialization).
    pub require: Option<Expr>,
    /// Comment lines written directly above the declaration.
    pub doc: Vec<String>,
    pub span: Span,
}

/// `tune {V0, V1, …}` on an int constant: the values `kirc tune` tries for it, in the order
/// written. The verifier requires a non-empty set of distinct values, each satisfying the
/// constant's `where` with the earlier constants at their defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneSet {
    /// The values, in the order written.
    pub values: Vec<i64>,
    /// The span of each value (same length as `values`).
    pub spans: Vec<Span>,
    /// From `tune` to the closing `}`.
    pub span: Span,
}

/// Direction of a tensor param.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    In,
    Out,
    InOut,
}

impl Access {
    /// The keyword in text.
    pub fn name(self) -> &'static str {
        match self {
            Access::In => "in",
            Access::Out => "out",
            Access::InOut => "inout",
        }
    }

    /// True for `out` and `inout`.
    pub fn writes(self) -> bool {
        !matches!(self, Access::In)
    }
}

/// What a param is.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamKind {
    Tensor(Access, TensorType),
    Scalar(ElemType),
}

/// A kernel or program param. A param with a `cond` exists only when the condition holds
/// after specialization (`mask: in tensor<DTYPE>[P, Sq, Sk] if MASK == 1`).
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    pub cond: Option<Expr>,
    pub span: Span,
}

impl Param {
    /// An unconditional tensor param `name: access tensor<d>[dims]` (contiguous, no source
    /// position): what a pass adds to a kernel, or a test builds.
    pub fn tensor(name: &str, access: Access, d: crate::dtype::Dtype, dims: Vec<Expr>) -> Param {
        Param {
            name: name.to_string(),
            kind: ParamKind::Tensor(
                access,
                TensorType {
                    elem: ElemType::Known(d),
                    dims,
                    strides: None,
                },
            ),
            cond: None,
            span: Span::default(),
        }
    }
}

/// Where an SSA value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDef {
    /// The n-th result of an op.
    Result(Op, u32),
    /// The n-th argument of a block (loop induction variable, loop-carried value).
    Arg(Block, u32),
}

/// Facts about one SSA value.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    pub ty: Type,
    /// A readable name from the source (`%acc`); `None` prints as `%vN`.
    pub name: Option<String>,
    pub def: ValueDef,
    pub span: Span,
}

/// A block: arguments and an ordered op list. Region bodies end with `yield` when they produce values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockData {
    pub args: Vec<Value>,
    pub ops: Vec<Op>,
}

/// One element offset of a tensor access: an SSA scalar or a constant expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Offset {
    Value(Value),
    Expr(Expr),
}

/// `name[off, ...]`: the tensor param a memory op accesses and the element offset per tensor dim.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRef {
    pub param: String,
    pub offsets: Vec<Offset>,
    pub span: Span,
}

/// One operation.
#[derive(Clone, Debug, PartialEq)]
pub struct OpData {
    pub opcode: Opcode,
    pub results: Vec<Value>,
    /// Positional operands. For `for`: lo, hi, step, then the initial carried values.
    pub operands: Vec<Value>,
    /// The leading attribute (`reduce sum`, `program_id 0`).
    pub lead: Option<Attr>,
    pub tensor: Option<TensorRef>,
    /// Keyword attributes in the op table's canonical order.
    pub attrs: Vec<(String, Attr)>,
    pub regions: Vec<Block>,
    /// Comment lines written directly above the op.
    pub doc: Vec<String>,
    pub span: Span,
}

impl OpData {
    /// A keyword attribute by name.
    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, a)| a)
    }

    /// The predicate of a `cmp` (`None` if missing or unknown, which the verifier reports).
    pub fn cmp_pred(&self) -> Option<crate::ops::CmpPred> {
        match self.lead {
            Some(Attr::Cmp(p)) => Some(p),
            _ => None,
        }
    }

    /// The kind of a `reduce` (`None` if missing or unknown, which the verifier reports).
    pub fn reduce_kind(&self) -> Option<crate::ops::ReduceKind> {
        match self.lead {
            Some(Attr::Reduce(k)) => Some(k),
            _ => None,
        }
    }

    /// Every SSA value this op reads directly (not counting its regions' contents).
    pub fn uses(&self) -> Vec<Value> {
        let mut v = self.operands.clone();
        if let Some(t) = &self.tensor {
            for o in &t.offsets {
                if let Offset::Value(x) = o {
                    v.push(*x);
                }
            }
        }
        for (_, a) in &self.attrs {
            if let Attr::Value(x) = a {
                v.push(*x);
            }
        }
        v
    }
}

/// Arenas for one kernel's values, ops and blocks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dfg {
    pub values: PrimaryMap<Value, ValueData>,
    pub ops: PrimaryMap<Op, OpData>,
    pub blocks: PrimaryMap<Block, BlockData>,
}

impl Dfg {
    /// Creates an empty block.
    pub fn new_block(&mut self) -> Block {
        self.blocks.push(BlockData::default())
    }

    /// Appends a block argument of type `ty`.
    pub fn add_block_arg(&mut self, b: Block, ty: Type, name: Option<String>, span: Span) -> Value {
        let idx = self.blocks[b].args.len() as u32;
        let v = self.values.push(ValueData {
            ty,
            name,
            def: ValueDef::Arg(b, idx),
            span,
        });
        self.blocks[b].args.push(v);
        v
    }

    /// Appends `op` (whose `results` is ignored) to block `b`, creating one result per type.
    pub fn append_op(
        &mut self,
        b: Block,
        mut op: OpData,
        result_types: Vec<(Type, Option<String>)>,
    ) -> Op {
        op.results.clear();
        let span = op.span;
        let id = self.ops.push(op);
        for (i, (ty, name)) in result_types.into_iter().enumerate() {
            let v = self.values.push(ValueData {
                ty,
                name,
                def: ValueDef::Result(id, i as u32),
                span,
            });
            self.ops[id].results.push(v);
        }
        self.blocks[b].ops.push(id);
        id
    }

    /// The type of a value.
    pub fn ty(&self, v: Value) -> &Type {
        &self.values[v].ty
    }
}

/// A kernel: params, a launch grid over dims and constants, requirements, and a body.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    /// Three expressions over the params' dims and the module constants.
    pub grid: Vec<Expr>,
    /// Conditions on dims and constants that must hold at launch (`Hq % Hkv == 0`).
    pub requires: Vec<Expr>,
    pub body: Block,
    pub dfg: Dfg,
    /// Comment lines written directly above the kernel.
    pub doc: Vec<String>,
    pub span: Span,
}

impl Kernel {
    /// A param by name.
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// `temp NAME: tensor<...>[dims]` — a buffer the runner of a program allocates.
#[derive(Clone, Debug, PartialEq)]
pub struct TempDecl {
    pub name: String,
    pub ty: TensorType,
    pub span: Span,
}

/// `kernel_param = buffer` in a launch.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgBinding {
    pub param: String,
    pub arg: String,
    pub span: Span,
}

/// `launch @kernel(bindings)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub kernel: String,
    pub args: Vec<ArgBinding>,
    pub span: Span,
}

/// The entry program: params (the op's interface), temporaries and launches in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub params: Vec<Param>,
    pub temps: Vec<TempDecl>,
    pub launches: Vec<Launch>,
    /// Comment lines written directly above the program.
    pub doc: Vec<String>,
    pub span: Span,
}

/// A module: constants, kernels and an optional entry program. Without a program the module
/// must hold exactly one kernel, which is the entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The file's header comment (lines above `module`), e.g. an op's interface.
    pub doc: Vec<String>,
    pub name: String,
    pub consts: Vec<ConstDecl>,
    pub kernels: PrimaryMap<KernelId, Kernel>,
    pub program: Option<Program>,
}

impl Module {
    /// A kernel by name.
    pub fn kernel(&self, name: &str) -> Option<(KernelId, &Kernel)> {
        self.kernels.iter().find(|(_, k)| k.name == name)
    }

    /// The params of the entry: the program's, or the single kernel's. `None` if the module
    /// has no program and not exactly one kernel.
    pub fn entry_params(&self) -> Option<&[Param]> {
        match &self.program {
            Some(p) => Some(&p.params),
            None if self.kernels.len() == 1 => self.kernels.values().next().map(|k| &k.params[..]),
            None => None,
        }
    }

    /// A constant declaration by name.
    pub fn const_decl(&self, name: &str) -> Option<&ConstDecl> {
        self.consts.iter().find(|c| c.name == name)
    }
}

/// Values of every constant after specialization, by name.
pub type ConstValues = Vec<(String, EvalVal)>;
