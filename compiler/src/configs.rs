//! Per-target default configurations of the built-in ops: the tile constants and warps that
//! `kirc compile/run/bench` use when the user gives none, chosen per target, dtype and head dim
//! from H200 measurements (docs/benchmarks.md; the calls behind each row in
//! docs/history/benchmarks-log.md). An op's `.kir` file keeps the defaults that fit
//! every target (and the CUDA-C parity backend, which never takes these rows); a row here
//! replaces them on the targets it names.
//!
//! Rule: the first row whose op, target and condition match is applied, unless the user set
//! any of the row's constants, `--warps` or `--stages` — then the user's tile choice stands as given and
//! no row is applied, so a row never mixes with a partial user choice. Rows apply only to the
//! built-in op of that name (a user file whose module is called `attention_fwd` gets none).
//! This is the seam where measured (autotuned) configurations will be looked up first.

use kir_backends::Target;
use kir_ir::EvalVal;

/// What a row sets: tile constants (as `-D` values) and the warps per block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Constants to define, in the row's order.
    pub defines: Vec<(String, String)>,
    /// Warps per block (`None`: the backend's policy).
    pub warps: Option<u32>,
    /// The ring depth to try first (`None`: the compile driver's default); a ring that does
    /// not fit the target's shared memory gets fewer stages, as the default does.
    pub stages: Option<usize>,
    /// Warp-specialize (a producer warpgroup on tensor copies and `setmaxnreg` budgets) where
    /// the kernel qualifies; the compile driver keeps the unspecialized kernel where it does not.
    pub warp_specialize: bool,
    /// With warp specialization: a persistent grid of the target's SM count (`persistent`).
    pub persistent: bool,
    /// Pair the TMA rings' q·kᵀ of block j with the p·v of block j − 1 (`dot_overlap`).
    pub overlap: bool,
}

/// One row of the table.
struct Row {
    op: &'static str,
    target: Target,
    /// A row of the CUDA-C parity backend (tiles only) rather than of PTX and IR emission.
    cuda: bool,
    /// The condition on the op's constant values (user `-D`s and declared defaults).
    when: fn(&Values) -> bool,
    set: &'static [(&'static str, &'static str)],
    warps: Option<u32>,
    stages: Option<usize>,
    warp_specialize: bool,
    persistent: bool,
    overlap: bool,
}

/// The constant values of one specialization, by name.
pub struct Values<'a>(pub &'a [(String, EvalVal)]);

impl Values<'_> {
    fn int(&self, name: &str) -> Option<i64> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| match v {
                EvalVal::Int(i) => Some(*i),
                _ => None,
            })
    }

    fn sym(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| match v {
                EvalVal::Sym(s) => Some(s.as_str()),
                _ => None,
            })
    }

    /// bf16 or f16 (the dtypes the matrix units take).
    fn half(&self) -> bool {
        matches!(self.sym("DTYPE"), Some("bf16" | "f16"))
    }
}

/// The table (H200 measurements of 2026-12-01 and 12-02, docs/history/benchmarks-log.md "Hopper
/// fast path" and the sections named below).
/// sm_90a attention: 128-row query blocks on two warpgroups (one 64-row wgmma fragment each,
/// ping-ponging on the tensor cores). Without causal masking the key loop is a TMA ring
/// (docs/passes.md): d128 warp-specialized, a producer warpgroup (tensor copies of K, V and the
/// query block) and three consumer warpgroups on 192×128 tiles at 160 registers (`setmaxnreg`),
/// two stages (calls L2/L3, 2026-12-02: 615.0–619.2 TFLOP/s at 16k against 576.1–576.5 for the
/// unspecialized 128×64 tile at two blocks per SM, 594.3–627.6 against 605.3–613.2 at 4k, and
/// 459.7–461.2 against 517.0–517.2 at 1k, where 1,024 rows fill 5⅓ blocks of 192:
/// docs/history/benchmarks-log.md "The producer stages the query block"), d64 with 128-key blocks (454.7; 64-key blocks 381.5, the
/// 64×128 tile on one warpgroup 410.3), d256 with 64-key blocks (560.2). Causal key ranges are
/// TMA rings too (their rows past the range zeroed in shared memory), taking the query blocks
/// with the most keys first: d128 with 128-key blocks (467.9–470.4; 64-key blocks 462.8–464.0),
/// d64 with 128×128 on two warpgroups, two blocks per SM at 128 registers since the loop bound
/// lives in shared memory (408.6–410.2 against 388.0–388.6 for 64×128 on one warpgroup, three
/// stages 340.6: one block per SM; docs/history/benchmarks-log.md "Causal d64 at two blocks per SM"), its
/// programs walking two heads at a time (421.4 against 414.8 one head at a time, four heads
/// 424.2; at 4k tokens 313.9 against 303.7 and 300.8; d128 keeps one head: 485.9 against 479.0). sm_90a GEMM: a 128×256 tile with 64-deep K blocks on two warpgroups and a
/// 4-stage held ring, each wgmma group left in flight for one iteration (461 TFLOP/s at 8192³;
/// 3 stages 408, 2 stages 396, the op's 64×64 tile 149), warp-specialized: a producer warpgroup
/// on tensor copies and the two warpgroups as its consumer (599–614 against 507–543 unspecialized
/// at 8192³, 4096³ 544 against 472; docs/history/benchmarks-log.md "Warp specialization"), its tiles in
/// groups of 8 block rows (8192³ 619–645 against 583–606 in row order, 16384×14336×4096 524–541
/// against 483–492), on a persistent grid of the target's SM count (8192³ 695–698 against
/// 634–654, 4096³ 640–650 against 609–622; 16384×14336×4096 both ways between calls;
/// docs/history/benchmarks-log.md "Persistent GEMM"); swiglu (two dots sharing A) keeps the op's tile.
const ROWS: &[Row] = &[
    Row {
        cuda: false,
        op: "attention_fwd",
        target: Target::Sm90a,
        when: |v| {
            v.half()
                && v.int("HEAD_DIM") == Some(128)
                && v.int("CAUSAL") == Some(0)
                && v.int("MASK") == Some(0)
        },
        set: &[("BLOCK_M", "192"), ("BLOCK_N", "128")],
        warps: Some(12),
        stages: Some(2),
        warp_specialize: true,
        persistent: false,
        overlap: false,
    },
    // With an additive mask tile the 160-register consumers spill (844 bytes at 192×128):
    // the unspecialized tile, two blocks of two warpgroups per SM.
    Row {
        cuda: false,
        op: "attention_fwd",
        target: Target::Sm90a,
        when: |v| v.half() && v.int("HEAD_DIM") == Some(128) && v.int("CAUSAL") == Some(0),
        set: &[("BLOCK_M", "128"), ("BLOCK_N", "64")],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
    },
    Row {
        cuda: false,
        op: "attention_fwd",
        target: Target::Sm90a,
        when: |v| v.half() && v.int("HEAD_DIM") == Some(128) && v.int("CAUSAL") == Some(1),
        set: &[("BLOCK_M", "128"), ("BLOCK_N", "128")],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
    },
    Row {
        cuda: false,
        op: "attention_fwd",
        target: Target::Sm90a,
        when: |v| v.half() && v.int("HEAD_DIM") == Some(64) && v.int("CAUSAL") == Some(0),
        set: &[("BLOCK_M", "128"), ("BLOCK_N", "128")],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
    },
    Row {
        cuda: false,
        op: "attention_fwd",
        target: Target::Sm90a,
        when: |v| v.half() && v.int("HEAD_DIM") == Some(64) && v.int("CAUSAL") == Some(1),
        set: &[("BLOCK_M", "128"), ("BLOCK_N", "128"), ("GROUP_H", "2")],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
    },
    Row {
        cuda: false,
        op: "attention_fwd",
        target: Target::Sm90a,
        when: |v| v.half() && v.int("HEAD_DIM") == Some(256),
        set: &[("BLOCK_M", "128"), ("BLOCK_N", "64")],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
    },
    Row {
        cuda: false,
        op: "gemm",
        target: Target::Sm90a,
        when: |v| v.half() && v.sym("EPILOGUE") != Some("swiglu") && v.int("TRANS_A") == Some(0),
        set: &[
            ("BLOCK_M", "128"),
            ("BLOCK_N", "256"),
            ("BLOCK_K", "64"),
            ("GROUP_M", "8"),
        ],
        warps: Some(8),
        stages: Some(4),
        warp_specialize: true,
        persistent: true,
        overlap: false,
    },
    // CUDA C stores every live tile as 32-bit values in shared memory, so the op's default
    // tiles outgrow the smaller targets (`Target::smem_per_block`): sm_120a's 99 KB does not
    // hold attention_fwd at d128 (119,296 bytes) or attention_bwd's dK/dV (165,888), sm_80's
    // 163 KB not attention_fwd at d256 (213,760) or causal attention_bwd (170,496). These rows
    // take smaller query and key blocks that fit with every feature (fit checked by
    // tests/tests/configs.rs; the parity backend is checked for results, not timed).
    cuda_row(
        "attention_fwd",
        Target::Sm120a,
        |v| v.int("HEAD_DIM").is_some_and(|d| d <= 128),
        &[("BLOCK_M", "32"), ("BLOCK_N", "32")],
    ),
    cuda_row(
        "attention_fwd",
        Target::Sm120a,
        |_| true,
        &[("BLOCK_M", "16"), ("BLOCK_N", "16")],
    ),
    cuda_row(
        "attention_fwd",
        Target::Sm80,
        |v| v.int("HEAD_DIM").is_some_and(|d| d > 128) && v.int("CAUSAL") == Some(0),
        &[("BLOCK_M", "32")],
    ),
    cuda_row(
        "attention_fwd",
        Target::Sm80,
        |v| v.int("HEAD_DIM").is_some_and(|d| d > 128),
        &[("BLOCK_M", "32"), ("BLOCK_N", "32")],
    ),
    cuda_row(
        "attention_bwd",
        Target::Sm120a,
        |_| true,
        &[("BLOCK_M", "32"), ("BLOCK_N", "16"), ("BLOCK_KV", "16")],
    ),
    cuda_row(
        "attention_bwd",
        Target::Sm80,
        |v| v.int("CAUSAL") == Some(1),
        &[("BLOCK_M", "32")],
    ),
];

/// A row of the CUDA-C backend: tiles only (it has no warps, rings or warp roles).
const fn cuda_row(
    op: &'static str,
    target: Target,
    when: fn(&Values) -> bool,
    set: &'static [(&'static str, &'static str)],
) -> Row {
    Row {
        cuda: true,
        op,
        target,
        when,
        set,
        warps: None,
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
    }
}

/// The configuration for built-in op `op` on `target` (for the CUDA-C backend when `cuda`) with
/// constant `values`, given the
/// constants the user defined and whether the user chose the warps or the stages. Empty when no
/// row applies.
pub fn target_config(
    op: &str,
    target: Target,
    cuda: bool,
    values: &[(String, EvalVal)],
    user_defines: &[(String, String)],
    user_tiles: bool,
) -> Config {
    let vals = Values(values);
    let Some(row) = ROWS
        .iter()
        .find(|r| r.op == op && r.target == target && r.cuda == cuda && (r.when)(&vals))
    else {
        return Config::default();
    };
    let user_set = |n: &str| user_defines.iter().any(|(u, _)| u == n);
    if user_tiles || row.set.iter().any(|(n, _)| user_set(n)) {
        return Config::default();
    }
    Config {
        defines: row
            .set
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        warps: row.warps,
        stages: row.stages,
        warp_specialize: row.warp_specialize,
        persistent: row.persistent,
        overlap: row.overlap,
    }
}
