//! The op table: the one place every opcode is declared, with its text syntax and shape.
//!
//! Parser, printer, verifier and interpreter read this table; everything else matches on
//! [`Opcode`] exhaustively, so adding a row makes the compiler list every place to update.

use crate::entities::Value;
use crate::expr::Expr;
use crate::span::Span;

/// How an attribute is written and stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// A constant expression (`0`, `BLOCK_M`, `-inf`).
    Expr,
    /// A bare name (`sum`, `lt`, a dim or scalar-param name).
    Name,
    /// An SSA value (`mask %m`).
    Value,
    /// A bracketed list of constant expressions (`perm [1, 0]`).
    List,
    /// A keyword with no value (`guard`).
    Flag,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Expr(Expr),
    Name(String, Span),
    Value(Value),
    List(Vec<Expr>),
    Flag,
}

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
    /// Everything else that computes (cast, bitcast, select, cmp, reduce, dot, nf4).
    Compute,
    /// Structured control flow.
    Control,
    /// Scheduled IR: shared-memory stage buffers, asynchronous copies, mbarriers, async dots and
    /// warp roles (introduced by the scheduling passes or written by hand; docs/ir.md).
    Schedule,
}

/// Static facts about an opcode.
#[derive(Debug)]
pub struct OpInfo {
    /// Mnemonic in text.
    pub name: &'static str,
    pub class: OpClass,
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
    ($( $variant:ident $name:literal $class:ident lead=$lead:expr, tensor=$tensor:expr,
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
                        name: $name, class: OpClass::$class, lead: $lead, tensor: $tensor,
                        operands: $ops, keywords: &[ $( ($kw, AttrKind::$kk) ),* ],
                        results: $res, regions: $reg, doc: $doc,
                    };
                    &I
                } )* }
            }
        }
    };
}

use Arity::{Fixed as F, Variadic as V};
const E: Option<AttrKind> = Some(AttrKind::Expr);
const N: Option<AttrKind> = Some(AttrKind::Name);

op_table! {
    ProgramId "program_id" Source lead=E, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Index (i32) of this program instance along grid axis 0, 1 or 2.";
    NumPrograms "num_programs" Source lead=E, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Grid size (i32) along axis 0, 1 or 2.";
    Dim "dim" Source lead=N, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Runtime value (i32) of a symbolic tensor dim of this kernel's params.";
    Param "param" Source lead=N, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "Value of a scalar param of this kernel.";
    Const "const" Source lead=E, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "A literal (or constant expression) as a scalar, or a tile filled with it; rounded to the dtype.";
    Iota "iota" Shape lead=None, tensor=false, operands=F(0), kw=[("axis", Expr)], results=F(1), regions=0,
        "Integer tile whose element is its index along `axis` (default 0).";
    Splat "splat" Shape lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Tile with every element equal to a scalar operand.";
    Broadcast "broadcast" Shape lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Stretches size-1 dims of a tile to the result shape (same rank).";
    Reshape "reshape" Shape lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Same elements in row-major order, new shape (same element count).";
    Transpose "transpose" Shape lead=None, tensor=false, operands=F(1), kw=[("perm", List)], results=F(1), regions=0,
        "Permutes dims: result dim i is operand dim perm[i] (default: reversed).";
    Load "load" Memory lead=None, tensor=true, operands=F(0), kw=[("mask", Value), ("other", Expr)], results=F(1), regions=0,
        "Reads a tile at element offsets; with `other`, out-of-bounds or masked-off elements read `other`.";
    Store "store" Memory lead=None, tensor=true, operands=F(1), kw=[("mask", Value), ("guard", Flag)], results=F(0), regions=0,
        "Writes a tile at element offsets; `mask` skips elements, `guard` skips out-of-bounds ones.";
    AtomicAdd "atomic_add" Memory lead=None, tensor=true, operands=F(1), kw=[("mask", Value), ("guard", Flag)], results=F(0), regions=0,
        "Atomically adds a tile into a tensor at element offsets (mask and guard as for store).";
    Neg "neg" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "−x.";
    Abs "abs" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "|x|.";
    Exp "exp" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "eˣ (float).";
    Exp2 "exp2" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "2ˣ (float).";
    Log "log" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "ln x (float).";
    Log2 "log2" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "log₂ x (float).";
    Sqrt "sqrt" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "√x (float).";
    Rsqrt "rsqrt" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "1/√x (float).";
    Tanh "tanh" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "tanh x (float).";
    Sigmoid "sigmoid" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "1/(1+e⁻ˣ) (float).";
    Silu "silu" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "x·sigmoid(x) (float).";
    Recip "recip" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "1/x (float).";
    Floor "floor" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "⌊x⌋ (float).";
    Not "not" Unary lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0, "Logical not (i1) or bitwise not (integers).";
    Add "add" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x + y.";
    Sub "sub" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x − y.";
    Mul "mul" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x · y.";
    Div "div" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "x / y; integers truncate toward zero, and division by zero is an error.";
    Rem "rem" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "Remainder with the sign of x (integers only).";
    Max "max" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "max(x, y); NaN if either is NaN.";
    Min "min" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "min(x, y); NaN if either is NaN.";
    And "and" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "Logical/bitwise and (i1 or integers).";
    Or "or" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "Logical/bitwise or (i1 or integers).";
    Xor "xor" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "Logical/bitwise xor (i1 or integers).";
    Shl "shl" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0, "x << y (integers; y in [0, bits)).";
    Shr "shr" Binary lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "x >> y (integers; arithmetic for i32/i64, logical for u8; y in [0, bits)).";
    Cast "cast" Compute lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Converts to the result dtype: floats round to nearest even, float→int truncates toward zero (saturating).";
    Bitcast "bitcast" Compute lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Reinterprets each element's bits as the result dtype of the same width (f32↔i32, f16↔bf16); same shape.";
    Select "select" Compute lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "Elementwise c ? x : y (c is i1 of the same shape, or a scalar i1).";
    Cmp "cmp" Compute lead=N, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "Elementwise comparison eq|ne|lt|le|gt|ge giving i1 (false when a NaN is involved, except ne).";
    Reduce "reduce" Compute lead=N, tensor=false, operands=F(1), kw=[("axis", Expr)], results=F(1), regions=0,
        "sum|max|min along `axis`, keeping it as size 1; floats accumulate in f32 in index order.";
    Dot "dot" Compute lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "acc + a·b for a [M,K], b [K,N], acc [M,N] f32; products and sums in f32, k ascending.";
    Nf4 "nf4" Compute lead=None, tensor=false, operands=F(1), kw=[], results=F(1), regions=0,
        "Looks up the low 4 bits of each u8 in the NF4 codebook, giving f32.";
    SmemAlloc "smem_alloc" Schedule lead=None, tensor=false, operands=F(0), kw=[], results=F(1), regions=0,
        "A shared-memory buffer of S stages, each a tile of the stage shape (`smem<S x R x C x dtype>`); stages start empty.";
    MbarAlloc "mbar_alloc" Schedule lead=None, tensor=false, operands=F(0), kw=[("arrivals", Expr)], results=F(1), regions=0,
        "S mbarriers (`mbar<S>`), each in phase 0 expecting `arrivals` arrivals per phase (default 1) and owing no bytes.";
    AsyncCopy "async_copy" Schedule lead=None, tensor=true, operands=F(2), kw=[("mask", Value), ("other", Expr), ("bar", Value)], results=F(0), regions=0,
        "Starts copying a tile (the stage shape) from a global tensor into stage `stage` of `buf`, as `load` reads it; with `bar`, completion delivers the stage's bytes to barrier `bar[stage]`, else the copy joins the open copy group.";
    AsyncCommit "async_commit" Schedule lead=None, tensor=false, operands=F(0), kw=[], results=F(0), regions=0,
        "Closes the open copy group of this partition (the copies issued since the last commit).";
    AsyncWait "async_wait" Schedule lead=None, tensor=false, operands=F(0), kw=[("pending", Expr)], results=F(0), regions=0,
        "Waits until at most `pending` (default 0) committed copy groups of this partition are incomplete; their stages become readable here.";
    MbarArrive "mbar_arrive" Schedule lead=None, tensor=false, operands=F(2), kw=[("tx", Expr)], results=F(0), regions=0,
        "Arrives once on barrier `bar[stage]`; with `tx`, first adds that many bytes to what the barrier's current phase owes.";
    MbarWait "mbar_wait" Schedule lead=None, tensor=false, operands=F(3), kw=[], results=F(0), regions=0,
        "Waits until the phase of `bar[stage]` with parity `parity` (0 or 1) has completed, i.e. until the barrier's current parity differs from it.";
    SmemRead "smem_read" Schedule lead=None, tensor=false, operands=F(2), kw=[], results=F(1), regions=0,
        "Reads stage `stage` of `buf` as a tile; the stage must have been filled and the fill observed by this partition.";
    SmemRelease "smem_release" Schedule lead=None, tensor=false, operands=F(2), kw=[], results=F(0), regions=0,
        "This partition has finished reading stage `stage` of `buf`; the next copy into the stage may start once ordered after it.";
    FenceAsync "fence_async" Schedule lead=None, tensor=false, operands=F(0), kw=[], results=F(0), regions=0,
        "Orders this partition's earlier shared-memory accesses before later asynchronous-proxy accesses (fence.proxy.async).";
    DotAsync "dot_async" Schedule lead=None, tensor=false, operands=F(3), kw=[], results=F(1), regions=0,
        "Starts acc + a·b as `dot` computes it; the result may only be used through `dot_wait`.";
    DotWait "dot_wait" Schedule lead=None, tensor=false, operands=F(1), kw=[("pending", Expr)], results=F(1), regions=0,
        "Waits until at most `pending` (default 0) later `dot_async`s of this partition are in flight, which must include the operand's; gives its value.";
    WarpSpecialize "warp_specialize" Schedule lead=None, tensor=false, operands=F(0), kw=[("producer_warps", Expr), ("producer_regs", Expr), ("consumers", Expr), ("consumer_warps", Expr), ("consumer_regs", Expr)], results=F(0), regions=2,
        "Runs a producer partition and `consumers` consumer partitions (consumer block arg: its index) concurrently; each has a warp count and a per-thread register budget.";
    For "for" Control lead=None, tensor=false, operands=V, kw=[], results=V, regions=1,
        "for iv = lo; iv < hi; iv += step (i32, step > 0) with loop-carried values.";
    If "if" Control lead=None, tensor=false, operands=V, kw=[], results=V, regions=2,
        "Runs the then or the else region on a scalar i1 and yields its values.";
    StaticIf "static_if" Control lead=E, tensor=false, operands=F(0), kw=[], results=V, regions=2,
        "An `if` on a constant expression; specialization keeps one region and removes the op.";
    Yield "yield" Control lead=None, tensor=false, operands=V, kw=[], results=F(0), regions=0,
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

    /// True if the op writes global memory, ends a region, or is a scheduled-IR op (which reads
    /// or changes shared-memory, barrier or partition state, so it is never moved or merged).
    pub fn has_side_effects(self) -> bool {
        matches!(self, Opcode::Store | Opcode::AtomicAdd | Opcode::Yield)
            || self.info().class == OpClass::Schedule
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
