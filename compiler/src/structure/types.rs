//! What the structural analysis finds (compiler/src/structure/): the class of a module's kernel
//! or kernels, the roles its constants play and the features the configuration rows'
//! conditions read. A leaf: the analysis and the configuration table (compiler/src/configs.rs)
//! both import it.

use std::fmt;

/// What a kernel is, read from its IR (docs/configs.md, "Classes").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// A loop over K whose body loads an M×K and a K×N tile (possibly through `transpose`) and
    /// accumulates `dot`s into f32 carried values: one dot (GEMM-like), or two sharing A
    /// (SwiGLU-like).
    DotLoop,
    /// A key loop with a score dot (q·kᵀ into a zero accumulator), exp, a row max and a second
    /// dot into a carried accumulator (online softmax): attention forward.
    Attention,
    /// A query loop accumulating key-block gradients (dK, dV): attention backward.
    AttentionBwdKv,
    /// A key loop accumulating a query-block gradient (dQ): attention backward.
    AttentionBwdQ,
    /// No dot; one row (or a block of rows) per program, walked in column chunks whose tiles
    /// are summed along the row: a norm's statistics (RMSNorm and LayerNorm, forward, and the
    /// backward's dx kernel).
    RowReduce,
    /// No dot, no loop and no reduction: one 2-D tile per program, loaded, combined elementwise
    /// and stored (SwiGLU, activations).
    Elementwise,
    /// Anything else (why, in words: "no dot", "a dot whose B operand is computed", ...).
    Other(String),
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelKind::DotLoop => f.write_str("a dot loop"),
            KernelKind::Attention => f.write_str("attention (online softmax)"),
            KernelKind::AttentionBwdKv => f.write_str("attention backward, dK/dV"),
            KernelKind::AttentionBwdQ => f.write_str("attention backward, dQ"),
            KernelKind::RowReduce => f.write_str("a row reduction"),
            KernelKind::Elementwise => f.write_str("an elementwise tile"),
            KernelKind::Other(why) => write!(f, "no class ({why})"),
        }
    }
}

/// One kernel's classification: its kind, the constant playing each role (`None`: not a bare
/// constant) and its features.
pub type Found = (KernelKind, Vec<(Role, Option<String>)>, Features);

/// The class of a whole module, which the configuration rows are keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// One dot-loop kernel.
    DotLoop,
    /// One attention-forward kernel.
    Attention,
    /// A dK/dV kernel and a dQ kernel (with any number of unclassified helpers).
    AttentionBwd,
    /// One row-reduction kernel.
    RowReduce,
    /// One elementwise kernel.
    Elementwise,
}

impl Class {
    /// The class as the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Class::DotLoop => "dot-loop",
            Class::Attention => "attention",
            Class::AttentionBwd => "attention-backward",
            Class::RowReduce => "row-reduction",
            Class::Elementwise => "elementwise",
        }
    }
}

/// The part a constant plays, which a row sets a value for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Dot loop: the accumulator's rows.
    MTile,
    /// Dot loop: the accumulator's columns.
    NTile,
    /// Dot loop: the contraction tile (the loop step).
    KTile,
    /// The program-order group (a constant feeding the block indices besides the tiles: GEMM's
    /// grouped tile order, causal attention's head groups).
    Group,
    /// Attention: the query rows of a block (the accumulator's rows; attention backward: the dQ
    /// kernel's).
    QueryBlock,
    /// Attention: the keys of one loop step (attention backward: the dQ kernel's).
    KeyBlock,
    /// Attention backward: the key rows of the dK/dV kernel's accumulators.
    KvBlock,
    /// Attention backward: the queries of one step of the dK/dV kernel's loop.
    QueryStep,
    /// Row reduction, elementwise: the rows of a program's tile.
    RowBlock,
    /// Row reduction: the columns of one chunk (the column loop's step); elementwise: the
    /// columns of a program's tile.
    ColumnBlock,
}

impl Role {
    /// The role as the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Role::MTile => "M tile",
            Role::NTile => "N tile",
            Role::KTile => "K tile",
            Role::Group => "group",
            Role::QueryBlock => "query block",
            Role::KeyBlock => "key block",
            Role::KvBlock => "dK/dV key block",
            Role::QueryStep => "dK/dV query step",
            Role::RowBlock => "row block",
            Role::ColumnBlock => "column block",
        }
    }
}

/// The structural facts the rows' conditions read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// The dtype of the dot operands (the score dot's for attention), by name.
    pub dtype: String,
    /// Dots accumulating in the loop (dot loop: 1, or 2 sharing A).
    pub dots: usize,
    /// Row reduction, elementwise: tensors the program loads tiles of.
    pub inputs: usize,
    /// Dot loop: tiles of the accumulator's dims loaded outside the loop (a tile of the output's
    /// shape added in the epilogue, as gemm's `c_in` is), each held beside the accumulator.
    pub acc_loads: usize,
    /// Dot loop: the runtime dim of the output tensor's rows (the problem's M: `M` of
    /// `c: out tensor<T>[Bt, M, N]`), where the accumulator is stored to a tensor whose
    /// second-to-last dim is a bare name. Attention: the rows dim of the tensor the score
    /// dot's left operand is loaded from (`Sq` of `q: in tensor<T>[B, Hq, Sq, D]`).
    pub m_dim: Option<String>,
    /// The value of `m_dim` (a dot loop's M, attention's query count), when the plan knows the
    /// shapes it is compiled for (`kirc bench --shape`, `kirc run`'s inputs); `None` otherwise.
    pub m: Option<u64>,
    /// Dot loop: the runtime dims of the tensor the accumulator is stored to (`[Bt, M, N]`),
    /// when each is a bare name; empty otherwise.
    pub out_dims: Vec<String>,
    /// The values of `out_dims`, when the plan knows the shapes it is compiled for.
    pub out_shape: Option<Vec<u64>>,
    /// Row reduction: a program takes a block of rows (a constant), not one row.
    pub row_block: bool,
    /// Row reduction: some reduction takes one chunk of a row on its own (the row kept in one
    /// tile when it fits a chunk), not a loop's running sum over the row's chunks.
    pub whole_row: bool,
    /// Row reduction: a chunk reduced on its own is computed from another reduction of the row
    /// (layernorm's centred squares from its mean), so the row's reductions run one after the
    /// other.
    pub chained: bool,
    /// The dot loop's A operand is a transposed load.
    pub trans_a: bool,
    /// The dot loop's B operand is a transposed load.
    pub trans_b: bool,
    /// Attention: the head dim (the accumulator's columns).
    pub head_dim: Option<i64>,
    /// Attention: the score mask compares query and key positions.
    pub causal: bool,
    /// Attention backward: the score mask compares query and key positions twice, bounding each
    /// query's keys from below too (a causal bound and a window: a band of keys). Not read in
    /// the forward, whose key loop carries the mask_split pass's comparison beside the causal
    /// one.
    pub band: bool,
    /// Attention: the key loop loads an extra tile into the scores (an additive mask).
    pub mask: bool,
    /// Attention: the scores pass through a `tanh` (a logit soft cap).
    pub softcap: bool,
}

impl Features {
    /// bf16 or f16 operands (the dtypes the matrix units take).
    pub fn half(&self) -> bool {
        matches!(self.dtype.as_str(), "bf16" | "f16")
    }

    /// A dot loop's output columns (N, the output's last dim), when the shapes are known.
    pub fn output_cols(&self) -> Option<u64> {
        self.out_shape.as_ref()?.last().copied()
    }

    /// A dot loop's output tiles of `rows`×`cols` (the leading dims' product times the row and
    /// column blocks), when the shapes are known.
    pub fn output_tiles(&self, rows: u64, cols: u64) -> Option<u64> {
        let s = self.out_shape.as_ref()?;
        let [lead @ .., m, n] = &s[..] else {
            return None;
        };
        let batch: u64 = lead.iter().product();
        Some(batch * m.div_ceil(rows) * n.div_ceil(cols))
    }
}

/// Why a kernel has no constant for a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRole {
    /// The kernel has no such part (no group constant): a row's value for it is skipped.
    Absent,
    /// The part is there but its tile is not a bare constant (a literal): a row cannot set it.
    NotConstant,
}

/// One kernel's analysis.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelShape {
    /// The kernel's name (for the report only; never matched on).
    pub name: String,
    pub kind: KernelKind,
    /// Each role found, with the constant that plays it (`None`: the tile is not a bare
    /// constant, e.g. a literal).
    pub roles: Vec<(Role, Option<String>)>,
    pub features: Features,
}

/// A module's analysis: its class (when its kernels make one), the roles of its constants and
/// the features, plus every kernel's own analysis for the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Structure {
    pub class: Option<Class>,
    pub roles: Vec<(Role, Option<String>)>,
    pub features: Features,
    pub kernels: Vec<KernelShape>,
}

impl Structure {
    /// The structure with the problem's dims known (`(name, value)` of the entry's runtime
    /// dims): each dot loop's and attention kernel's [`Features::m`] is its rows dim's value.
    pub fn with_dims(mut self, dims: &[(String, u64)]) -> Structure {
        let m_of = |f: &Features| {
            let d = f.m_dim.as_ref()?;
            dims.iter().find(|(n, _)| n == d).map(|(_, v)| *v)
        };
        let shape_of = |f: &Features| {
            if f.out_dims.is_empty() {
                return None;
            }
            f.out_dims
                .iter()
                .map(|d| dims.iter().find(|(n, _)| n == d).map(|(_, v)| *v))
                .collect::<Option<Vec<u64>>>()
        };
        self.features.m = m_of(&self.features);
        self.features.out_shape = shape_of(&self.features);
        for k in &mut self.kernels {
            k.features.m = m_of(&k.features);
            k.features.out_shape = shape_of(&k.features);
        }
        self
    }

    /// The constant playing `role`, or why there is none.
    pub fn role(&self, role: Role) -> Result<&str, NoRole> {
        match self.roles.iter().find(|(r, _)| *r == role) {
            Some((_, Some(c))) => Ok(c),
            Some((_, None)) => Err(NoRole::NotConstant),
            None => Err(NoRole::Absent),
        }
    }

    /// The facts the report gives after "matched:".
    pub fn describe(&self) -> String {
        let f = &self.features;
        let mut parts = vec![];
        match self.class {
            Some(Class::DotLoop) => {
                parts.push(match f.dots {
                    1 => "one dot loop".to_string(),
                    n => format!("a dot loop of {n} dots sharing A"),
                });
                parts.push(format!("{} operands", f.dtype));
                parts.push(format!(
                    "A {}transposed",
                    if f.trans_a { "" } else { "not " }
                ));
                if f.trans_b {
                    parts.push("B transposed".into());
                }
                match f.acc_loads {
                    0 => {}
                    1 => parts.push("a tile of the output's shape loaded".into()),
                    n => parts.push(format!("{n} tiles of the output's shape loaded")),
                }
                if let Some(m) = f.m {
                    parts.push(format!("M = {m}"));
                }
                if let Some(s) = &f.out_shape {
                    let s: Vec<String> = s.iter().map(u64::to_string).collect();
                    parts.push(format!("output {}", s.join("×")));
                }
            }
            Some(Class::Attention) | Some(Class::AttentionBwd) => {
                parts.push(if self.class == Some(Class::Attention) {
                    "an online-softmax key loop".to_string()
                } else {
                    "dK/dV and dQ loops".to_string()
                });
                parts.push(format!("{} operands", f.dtype));
                if let Some(d) = f.head_dim {
                    parts.push(format!("head dim {d}"));
                }
                parts.push(if f.causal { "causal" } else { "not causal" }.into());
                if f.band {
                    parts.push("a key window".into());
                }
                if f.mask {
                    parts.push("an additive mask".into());
                }
                if f.softcap {
                    parts.push("a soft cap".into());
                }
                if let Some(m) = f.m {
                    parts.push(format!("{} queries", m));
                }
            }
            Some(Class::RowReduce) | Some(Class::Elementwise) => {
                parts.push(match (self.class, f.row_block) {
                    (Some(Class::RowReduce), true) => {
                        "a block of rows per program, reduced in column chunks".to_string()
                    }
                    (Some(Class::RowReduce), false) => {
                        "one row per program, reduced in column chunks".to_string()
                    }
                    _ => "one 2-D tile per program, elementwise".to_string(),
                });
                parts.push(format!("{} tiles", f.dtype));
                parts.push(format!("{} tensors loaded", f.inputs));
                if self.class == Some(Class::RowReduce) {
                    parts.push(if f.whole_row {
                        "a row in one chunk reduced on its own".into()
                    } else {
                        "running sums over chunks".into()
                    });
                    if f.chained {
                        parts.push("one reduction computed from another".into());
                    }
                }
            }
            None => {}
        }
        parts.join(", ")
    }
}
