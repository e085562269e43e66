//! The op table: the one place every opcode is declared, with its text syntax and shape.
//!
//! Parser, printer, verifier and interpreter read this table. Besides syntax and shape, each row
//! says what the op does to state ([`Effect`]) and whether it is elementwise ([`Elementwise`],
//! with the dtypes a unary or binary op accepts). Consumers that treat a whole class alike match
//! on these columns or on the pattern macros generated from them ([`unary_ops!`],
//! [`binary_ops!`], [`elementwise_ops!`], [`non_elementwise_ops!`]); consumers that treat ops one
//! by one match exhaustively (on [`Opcode`], [`UnaryOp`] or [`BinaryOp`]), so adding a row makes
//! the compiler list exactly the places that need a new case (docs/ir.md, "Adding an op").

pub use crate::attrs::{Attr, AttrKind, CmpPred, ReduceKind};

/// How many positional operands or results an op has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Fixed(usize),
    /// Any number (control flow).
    Variadic,
}

/// Broad family of an op, used by docs, the verifier's type rules and later the e-graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// Reads the launch context (program id, dims, scalar params) or makes a constant.
    Source,
    /// Builds or reshapes a tile from values.
    Shape,
    /// Reads or writes a global tensor.
    Memory,
    /// Elementwise, one operand.
    Unary,
    /// Elementwise, two operands of one type (a scalar operand broadcasts over a tile).
    Binary,
    /// Everything else that computes (cast, bitcast, select, cmp, fma, reduce, dot, nf4).
    Compute,
    /// Output for people: `print`.
    Debug,
    /// Structured control flow.
    Control,
    /// Scheduled IR: shared-memory stage buffers, asynchronous copies, mbarriers, async dots and
    /// warp roles (introduced by the scheduling passes or written by hand; docs/ir.md).
    Schedule,
}

/// What an op does besides computing its results: which ops may be moved, merged (CSE) or
/// removed when unused (DCE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Its results depend only on its operands, attributes and the launch context (program id,
    /// dims, scalar params); nothing else observes it.
    Pure,
    /// Reads global memory (`load`): movable and removable only where nothing writes the tensor.
    ReadsMemory,
    /// Writes global memory (`store`, `atomic_add`).
    WritesMemory,
    /// Structured control flow (`for`, `if`, `static_if`): its effects are its regions'.
    Control,
    /// Ends a region, handing values to the enclosing op (`yield`).
    Terminator,
    /// Scheduled IR: reads or changes shared-memory stage, barrier, copy-group or partition
    /// state, so it is never moved, merged or removed.
    Schedule,
    /// Writes to the host's output (`print`): never merged or removed, and kept in program
    /// order with every other op that has an effect.
    Output,
}

/// The dtypes an elementwise unary or binary op accepts (the verifier's type rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemTypes {
    /// Floats and integers, not i1.
    Arith,
    /// Floats only.
    Float,
    /// Integers only (not i1).
    Int,
    /// Integers and i1.
    Logic,
}

impl ElemTypes {
    /// Whether an element of dtype `t` is accepted.
    pub fn accepts(self, t: crate::dtype::Dtype) -> bool {
        match self {
            ElemTypes::Arith => t.is_float() || t.is_int(),
            ElemTypes::Float => t.is_float(),
            ElemTypes::Int => t.is_int(),
            ElemTypes::Logic => t.is_int() || t == crate::dtype::Dtype::I1,
        }
    }

    /// The accepted dtypes, for messages.
    pub fn desc(self) -> &'static str {
        match self {
            ElemTypes::Arith => "float or integer (not i1)",
            ElemTypes::Float => "float",
            ElemTypes::Int => "integer",
            ElemTypes::Logic => "integer or i1",
        }
    }
}

/// How an op maps elements: result element i depends only on element i of each tile operand
/// (a scalar operand broadcasts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// One operand of the result's dtype ([`UnaryOp`]); the dtypes it accepts.
    Unary(ElemTypes),
    /// Two operands of one dtype ([`BinaryOp`]); the dtypes they accept.
    Binary(ElemTypes),
    /// Elementwise with its own type rule: `cast`, `bitcast`, `select`, `cmp`, `fma`, `nf4`.
    Other,
}

/// Static facts about an opcode.
#[derive(Debug)]
pub struct OpInfo {
    /// Mnemonic in text.
    pub name: &'static str,
    pub class: OpClass,
    /// What it does to state besides computing results.
    pub effect: Effect,
    /// Whether (and how) it is elementwise; `None` if not.
    pub elementwise: Option<Elementwise>,
    /// A leading attribute written right after the mnemonic (`reduce sum`, `cmp lt`).
    pub lead: Option<AttrKind>,
    /// Whether a tensor reference `name[offsets]` follows (memory ops).
    pub tensor: bool,
    /// Positional value operands.
    pub operands: Arity,
    /// Keyword attributes, in canonical order.
    pub keywords: &'static [(&'static str, AttrKind)],
    /// Results.
    pub results: Arity,
    /// Number of regions (bodies).
    pub regions: usize,
    /// One line of semantics for docs and `--help`.
    pub doc: &'static str,
}

macro_rules! op_table {
    ($( $variant:ident $name:literal $class:ident elem=$elem:ident $(($ety:ident))?
        effect=$effect:ident lead=$lead:expr, tensor=$tensor:expr,
        operands=$ops:expr, kw=[$( ($kw:literal, $kk:ident) ),*], results=$res:expr,
        regions=$reg:expr, $doc:literal; )*) => {
        /// Every opcode of the IR.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opcode { $( #[doc = $doc] $variant, )* }

        impl Opcode {
            /// Every opcode, in table order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$variant, )* ];

            /// The table row of this opcode.
            pub fn info(self) -> &'static OpInfo {
                match self { $( Opcode::$variant => {
                    const I: OpInfo = OpInfo {
                        name: $name, class: OpClass::$class, effect: Effect::$effect,
                        elementwise: elem_column!($elem $(($ety))?), lead: $lead,
                        tensor: $tensor, operands: $ops,
                        keywords: &[ $( ($kw, AttrKind::$kk) ),* ],
                        results: $res, regions: $reg, doc: $doc,
                    };
                    &I
                } )* }
            }
        }

        op_sets!([] [] [] [] $( $variant $elem )*);
        sched_set!([] $( $variant $class )*);
    };
}

/// Collects the rows of class `Schedule` and declares the `schedule_ops!()` pattern over them.
macro_rules! sched_set {
    ([$($s:ident)*]) => {
        /// A pattern matching every scheduled-IR [`Opcode`] (class `Schedule` rows), for a
        /// consumer that treats them all alike (a backend that does not lower scheduled IR).
        #[macro_export]
        macro_rules! schedule_ops {
            () => { $( $crate::Opcode::$s )|* };
        }

        /// The pattern macro by path inside this crate (`crate::ops::schedule_ops!()`).
        #[allow(unused_imports)]
        pub(crate) use schedule_ops;
    };
    ([$($s:ident)*] $v:ident Schedule $($rest:tt)*) => {
        sched_set!([$($s)* $v] $($rest)*);
    };
    ([$($s:ident)*] $v:ident $c:ident $($rest:tt)*) => {
        sched_set!([$($s)*] $($rest)*);
    };
}

/// The `elem=` column as an `Option<Elementwise>`.
macro_rules! elem_column {
    (None) => {
        None
    };
    (Other) => {
        Some(Elementwise::Other)
    };
    ($kind:ident($types:ident)) => {
        Some(Elementwise::$kind(ElemTypes::$types))
    };
}

/// Sorts the rows by their `elem=` column into unary, binary, other elementwise and the rest,
/// then declares [`UnaryOp`], [`BinaryOp`] and the pattern macros over those sets.
macro_rules! op_sets {
    ([$($u:ident)*] [$($b:ident)*] [$($o:ident)*] [$($n:ident)*]) => {
        /// The elementwise unary opcodes (`elem=Unary` rows), for exhaustive per-op matches.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum UnaryOp { $( $u, )* }

        /// The elementwise binary opcodes (`elem=Binary` rows), for exhaustive per-op matches.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BinaryOp { $( $b, )* }

        impl UnaryOp {
            /// Every unary op, in table order.
            pub const ALL: &'static [UnaryOp] = &[ $( UnaryOp::$u, )* ];

            /// The opcode.
            pub fn opcode(self) -> Opcode {
                match self { $( UnaryOp::$u => Opcode::$u, )* }
            }

            /// The mnemonic.
            pub fn name(self) -> &'static str {
                self.opcode().name()
            }
        }

        impl BinaryOp {
            /// Every binary op, in table order.
            pub const ALL: &'static [BinaryOp] = &[ $( BinaryOp::$b, )* ];

            /// The opcode.
            pub fn opcode(self) -> Opcode {
                match self { $( BinaryOp::$b => Opcode::$b, )* }
            }

            /// The mnemonic.
            pub fn name(self) -> &'static str {
                self.opcode().name()
            }
        }

        impl Opcode {
            /// This opcode as a [`UnaryOp`], if it is an elementwise unary op.
            pub fn unary(self) -> Option<UnaryOp> {
                match self {
                    $( Opcode::$u => Some(UnaryOp::$u), )*
                    $( Opcode::$b )|* | $( Opcode::$o )|* | $( Opcode::$n )|* => None,
                }
            }

            /// This opcode as a [`BinaryOp`], if it is an elementwise binary op.
            pub fn binary(self) -> Option<BinaryOp> {
                match self {
                    $( Opcode::$b => Some(BinaryOp::$b), )*
                    $( Opcode::$u )|* | $( Opcode::$o )|* | $( Opcode::$n )|* => None,
                }
            }
        }

        /// A pattern matching every elementwise unary [`Opcode`] (`elem=Unary` rows):
        /// `match op { kir_ir::unary_ops!() => …, … }`.
        #[macro_export]
        macro_rules! unary_ops {
            () => { $( $crate::Opcode::$u )|* };
        }

        /// A pattern matching every elementwise binary [`Opcode`] (`elem=Binary` rows).
        #[macro_export]
        macro_rules! binary_ops {
            () => { $( $crate::Opcode::$b )|* };
        }

        /// A pattern matching every elementwise [`Opcode`]: unary, binary and the others
        /// (`cast`, `bitcast`, `select`, `cmp`, `nf4`, `fma`), i.e. every row with an `elem=` other
        /// than `None`. Arms before it may pick some of them out.
        #[macro_export]
        macro_rules! elementwise_ops {
            () => { $( $crate::Opcode::$u )|* | $( $crate::Opcode::$b )|* | $( $crate::Opcode::$o )|* };
        }

        /// A pattern matching every [`Opcode`] that is not elementwise (`elem=None` rows): the
        /// closing arm of a match that lists elementwise ops one by one.
        #[macro_export]
        macro_rules! non_elementwise_ops {
            () => { $( $crate::Opcode::$n )|* };
        }

        /// The pattern macros by path inside this crate (`crate::ops::unary_ops!()`).
        #[allow(unused_imports)]
        pub(crate) use {binary_ops, elementwise_ops, non_elementwise_ops, unary_ops};
    };
    ([$($u:ident)*] [$($b:ident)*] [$($o:ident)*] [$($n:ident)*] $v:ident Unary $($rest:tt)*) => {
        op_sets!([$($u)* $v] [$($b)*] [$($o)*] [$($n)*] $($rest)*);
    };
    ([$($u:ident)*] [$($b:ident)*] [$($o:ident)*] [$($n:ident)*] $v:ident Binary $($rest:tt)*) => {
        op_sets!([$($u)*] [$($b)* $v] [$($o)*] [$($n)*] $($rest)*);
    };
    ([$($u:ident)*] [$($b:ident)*] [$($o:ident)*] [$($n:ident)*] $v:ident Other $($rest:tt)*) => {
        op_sets!([$($u)*] [$($b)*] [$($o)* $v] [$($n)*] $($rest)*);
    };
    ([$($u:ident)*] [$($b:ident)*] [$($o:ident)*] [$($n:ident)*] $v:ident None $($rest:tt)*) => {
        op_sets!([$($u)*] [$($b)*] [$($o)*] [$($n)* $v] $($rest)*);
    };
}

use Arity::{Fixed as F, Variadic as V};
const E: Option<AttrKind> = Some(AttrKind::Expr);
const N: Option<AttrKind> = Some(AttrKind::Name);
const P: Option<AttrKind> = Some(AttrKind::Cmp);
const R: Option<AttrKind> = Some(AttrKind::Reduce);
const S: Option<AttrKind> = Some(AttrKind::Str);

op_table! {
    ProgramId "program_id" Source elem=None effect=Pure lead=E, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Index (i32) of this program instance along grid axis 0, 1 or 2.";
    NumPrograms "num_programs" Source elem=None effect=Pure lead=E, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Grid size (i32) along axis 0, 1 or 2.";
    Dim "dim" Source elem=None effect=Pure lead=N, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Runtime value (i32) of a symbolic tensor dim of this kernel's params.";
    Param "param" Source elem=None effect=Pure lead=N, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Value of a scalar param of this kernel.";
    Const "const" Source elem=None effect=Pure lead=E, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "A literal (or constant expression) as a scalar, or a tile filled with it; rounded to the dtype.";
    Iota "iota" Shape elem=None effect=Pure lead=None, tensor=false, operands=F(0), kw=[("axis", Expr)], results=F(1), regions=0,
        "Integer tile whose element is its index along `axis` (default 0).";
    Splat "splat" Shape elem=None effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Tile with every element equal to a scalar operand.";
    Broadcast "broadcast" Shape elem=None effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Stretches size-1 dims of a tile to the result shape (same rank).";
    Reshape "reshape" Shape elem=None effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Same elements in row-major order, new shape (same element count).";
    Transpose "transpose" Shape elem=None effect=Pure lead=None, tensor=false, operands=F(1), kw=[("perm", List)], results=F(1), regions=0,
        "Permutes dims: result dim i is operand dim perm[i] (default: reversed).";
    Load "load" Memory elem=None effect=ReadsMemory lead=None, tensor=true, operands=F(0), kw=[("mask", Value), ("other", Expr)], results=F(1), regions=0,
        "Reads a tile at element offsets; with `other`, out-of-bounds or masked-off elements read `other`.";
    Store "store" Memory elem=None effect=WritesMemory lead=None, tensor=true, operands=F(1), kw=[("mask", Value), ("guard", Flag)], results=F(0), regions=0,
        "Writes a tile at element offsets; `mask` skips elements, `guard` skips out-of-bounds ones.";
    AtomicAdd "atomic_add" Memory elem=None effect=WritesMemory lead=None, tensor=true, operands=F(1), kw=[("mask", Value), ("guard", Flag)], results=F(0), regions=0,
        "Atomically adds a tile into a tensor at element offsets (mask and guard as for store).";
    SemWait "sem_wait" Memory elem=None effect=WritesMemory lead=None, tensor=true, operands=F(1), kw=[], results=F(0), regions=0,
        "Waits until the i32 element at the offsets (a counter of `sem_signal`s) is at least the i32 operand, then orders this program's later writes after the writes those signals released (acquire, GPU scope). A program may wait only for programs earlier in grid order (axis 0 fastest), which a GPU starts first.";
    SemSignal "sem_signal" Memory elem=None effect=WritesMemory lead=None, tensor=true, operands=F(0), kw=[("guard", Flag)], results=F(0), regions=0,
        "Once this program's earlier writes and `atomic_add`s are complete, adds 1 to the i32 element at the offsets (release, GPU scope); `guard` skips an out-of-bounds element.";
    Neg "neg" Unary elem=Unary(Arith) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "−x.";
    Abs "abs" Unary elem=Unary(Arith) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "|x|.";
    Exp "exp" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "eˣ (float).";
    Exp2 "exp2" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "2ˣ (float).";
    Log "log" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "ln x (float).";
    Log2 "log2" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "log₂ x (float).";
    Sqrt "sqrt" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "√x (float).";
    Rsqrt "rsqrt" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "1/√x (float).";
    Tanh "tanh" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "tanh x (float).";
    Sigmoid "sigmoid" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "1/(1+e⁻ˣ) (float).";
    Silu "silu" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "x·sigmoid(x) (float).";
    Recip "recip" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "1/x (float).";
    Floor "floor" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "⌊x⌋ (float).";
    Erf "erf" Unary elem=Unary(Float) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "The error function (2/√π)∫₀ˣ e^(−t²) dt (float).";
    Not "not" Unary elem=Unary(Logic) effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "Logical not (i1) or bitwise not (integers).";
    Add "add" Binary elem=Binary(Arith) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x + y.";
    Sub "sub" Binary elem=Binary(Arith) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x − y.";
    Mul "mul" Binary elem=Binary(Arith) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x · y.";
    Div "div" Binary elem=Binary(Arith) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "x / y; integers truncate toward zero, and division by zero is an error.";
    Rem "rem" Binary elem=Binary(Int) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "Remainder with the sign of x (integers only).";
    Max "max" Binary elem=Binary(Arith) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "max(x, y); NaN if either is NaN.";
    Min "min" Binary elem=Binary(Arith) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "min(x, y); NaN if either is NaN.";
    Pow "pow" Binary elem=Binary(Float) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "xʸ (float), with C's `powf` special cases (x < 0 needs an integer y; pow(x, ±0) = 1).";
    And "and" Binary elem=Binary(Logic) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "Logical/bitwise and (i1 or integers).";
    Or "or" Binary elem=Binary(Logic) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "Logical/bitwise or (i1 or integers).";
    Xor "xor" Binary elem=Binary(Logic) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "Logical/bitwise xor (i1 or integers).";
    Shl "shl" Binary elem=Binary(Int) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x << y (integers; y in [0, bits)).";
    Shr "shr" Binary elem=Binary(Int) effect=Pure lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "x >> y (integers; arithmetic for i32/i64, logical for u8; y in [0, bits)).";
    Cast "cast" Compute elem=Other effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Converts to the result dtype: floats round to nearest even, float→int truncates toward zero (saturating).";
    Bitcast "bitcast" Compute elem=Other effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Reinterprets each element's bits as the result dtype of the same width (f32↔i32, f16↔bf16); same shape.";
    Select "select" Compute elem=Other effect=Pure lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "Elementwise c ? x : y (c is i1 of the same shape, or a scalar i1).";
    Cmp "cmp" Compute elem=Other effect=Pure lead=P, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "Elementwise comparison eq|ne|lt|le|gt|ge giving i1 (false when a NaN is involved, except ne).";
    Reduce "reduce" Compute elem=None effect=Pure lead=R, tensor=false, operands=F(1), kw=[("axis", Expr)], results=F(1), regions=0,
        "sum|max|min along `axis`, keeping it as size 1; floats accumulate in f32 in index order.";
    Dot "dot" Compute elem=None effect=Pure lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "acc + a·b for a [M,K], b [K,N], acc [M,N] f32; products and sums in f32, k ascending.";
    Nf4 "nf4" Compute elem=Other effect=Pure lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Looks up the low 4 bits of each u8 in the NF4 codebook, giving f32.";
    Fma "fma" Compute elem=Other effect=Pure lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "a·b + c with one rounding (float; operands of the result's type, a scalar broadcasts).";
    Print "print" Debug elem=None effect=Output lead=S, tensor=false, operands=V, kw=[], results=F(0), regions=0,
        "Prints the program id, a prefix and every element of each value (scalars or tiles), one line per element.";
    SmemAlloc "smem_alloc" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "A shared-memory buffer of S stages, each a tile of the stage shape (`smem<S x R x C x dtype>`); stages start empty.";
    MbarAlloc "mbar_alloc" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(0), kw=[("arrivals", Expr)], results=F(1), regions=0,
        "S mbarriers (`mbar<S>`), each in phase 0 expecting `arrivals` arrivals per phase (default 1) and owing no bytes.";
    AsyncCopy "async_copy" Schedule elem=None effect=Schedule lead=None, tensor=true, operands=F(2), kw=[("mask", Value), ("other", Expr), ("bar", Value), ("multicast", Value)], results=F(0), regions=0,
        "Starts copying a tile (the stage shape) from a global tensor into stage `stage` of `buf`, as `load` reads it; with `bar`, completion delivers the stage's bytes to barrier `bar[stage]`, else the copy joins the open copy group. `multicast %p` (an i1 that is equal in every CTA of the cluster): where it holds, every CTA of the cluster copies this same tile now, so each may fetch a share of it for all.";
    AsyncCommit "async_commit" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(0), kw=[], results=F(0), regions=0,
        "Closes the open copy group of this partition (the copies issued since the last commit).";
    AsyncWait "async_wait" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(0), kw=[("pending", Expr)], results=F(0), regions=0,
        "Waits until at most `pending` (default 0) committed copy groups of this partition are incomplete; their stages become readable here.";
    MbarArrive "mbar_arrive" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(2), kw=[("tx", Expr), ("cluster", Expr)], results=F(0), regions=0,
        "Arrives once on barrier `bar[stage]`; with `tx`, first adds that many bytes to what the barrier's current phase owes. `cluster N`: arrives on `bar[stage]` of each of the cluster's N CTAs, which all make the same arrival, so each barrier counts N.";
    MbarWait "mbar_wait" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(3), kw=[], results=F(0), regions=0,
        "Waits until the phase of `bar[stage]` with parity `parity` (0 or 1) has completed, i.e. until the barrier's current parity differs from it.";
    SmemRead "smem_read" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "Reads stage `stage` of `buf` as a tile; the stage must have been filled and the fill observed by this partition.";
    SmemRelease "smem_release" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(2), kw=[], results=F(0), regions=0,
        "This partition has finished reading stage `stage` of `buf`; the next copy into the stage may start once ordered after it.";
    FenceAsync "fence_async" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(0), kw=[], results=F(0), regions=0,
        "Orders this partition's earlier shared-memory accesses before later asynchronous-proxy accesses (fence.proxy.async).";
    DotAsync "dot_async" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "Starts acc + a·b as `dot` computes it; the result may only be used through `dot_wait`.";
    DotWait "dot_wait" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(1), kw=[("pending", Expr)], results=F(1), regions=0,
        "Waits until at most `pending` (default 0) later `dot_async`s of this partition are in flight, which must include the operand's; gives its value.";
    WarpSpecialize "warp_specialize" Schedule elem=None effect=Schedule lead=None, tensor=false, operands=F(0), kw=[("producer_warps", Expr), ("producer_regs", Expr), ("consumers", Expr), ("consumer_warps", Expr), ("consumer_regs", Expr), ("cluster", Expr)], results=F(0), regions=2,
        "Runs a producer partition and `consumers` consumer partitions (consumer block arg: its index) concurrently; each has a warp count and a per-thread register budget. `cluster N` (1 or 2): the programs run in clusters of N consecutive ids, which share copies (`multicast`) and barrier arrivals (`mbar_arrive … cluster`).";
    For "for" Control elem=None effect=Control lead=None, tensor=false, operands=V, kw=[], results=V, regions=1,
        "for iv = lo; iv < hi; iv += step (i32, step > 0) with loop-carried values.";
    If "if" Control elem=None effect=Control lead=None, tensor=false, operands=V, kw=[], results=V, regions=2,
        "Runs the then or the else region on a scalar i1 and yields its values.";
    StaticIf "static_if" Control elem=None effect=Control lead=E, tensor=false, operands=F(0), kw=[], results=V, regions=2,
        "An `if` on a constant expression; specialization keeps one region and removes the op.";
    Yield "yield" Control elem=None effect=Terminator lead=None, tensor=false, operands=V, kw=[], results=F(0), regions=0,
        "Ends a region, giving the values of the enclosing for/if.";
}

impl Opcode {
    /// Looks an opcode up by mnemonic.
    pub fn from_name(s: &str) -> Option<Opcode> {
        Opcode::ALL.iter().copied().find(|o| o.info().name == s)
    }

    /// The mnemonic.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The op's family.
    pub fn class(self) -> OpClass {
        self.info().class
    }

    /// What the op does to state besides computing its results.
    pub fn effect(self) -> Effect {
        self.info().effect
    }

    /// True if the op's results depend only on its operands, attributes and the launch context
    /// ([`Effect::Pure`]): it may be merged with an equal op, moved, or removed when unused.
    pub fn is_pure(self) -> bool {
        self.effect() == Effect::Pure
    }

    /// Whether (and how) the op is elementwise.
    pub fn elementwise(self) -> Option<Elementwise> {
        self.info().elementwise
    }

    /// True for elementwise ops: unary, binary, `cast`, `bitcast`, `select`, `cmp`, `nf4`, `fma`.
    pub fn is_elementwise(self) -> bool {
        self.elementwise().is_some()
    }

    /// True if the op writes global memory, ends a region, is a scheduled-IR op (which reads
    /// or changes shared-memory, barrier or partition state, so it is never moved or merged),
    /// or writes to the host's output (`print`).
    pub fn has_side_effects(self) -> bool {
        match self.effect() {
            Effect::WritesMemory | Effect::Terminator | Effect::Schedule | Effect::Output => true,
            Effect::Pure | Effect::ReadsMemory | Effect::Control => false,
        }
    }
}

/// The 16-value NF4 (QLoRA) codebook, index = 4-bit code.
pub const NF4_TABLE: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
