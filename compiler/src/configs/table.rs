//! The table of per-target default configurations that compiler/src/configs.rs applies: each
//! row a class, the targets and backend it is for, a condition on a kernel's structural
//! features and the values it sets by role, with the warps, ring depth, warp specialization and
//! persistence it asks for. Each row's comment names the H200 measurement behind it
//! (docs/benchmarks.md; the calls in docs/history/benchmarks-log.md). This file holds the row
//! type, the constructors of common rows and the rows of dot loops (GEMM), row reductions
//! (norms) and elementwise kernels; the attention rows, forward and backward, are
//! attention_rows.rs's. Rows are tried in order within a class (the first that matches
//! applies); classes never compete, so the two tables are one in effect.

use crate::structure::{Class, Features, Role};
use kir_backends::Target;

/// One row of the table.
pub(super) struct Row {
    pub(super) class: Class,
    /// The targets the row is for.
    pub(super) targets: &'static [Target],
    /// A row of the CUDA-C parity backend (tiles only) rather than of PTX and IR emission.
    pub(super) cuda: bool,
    /// The condition on the kernel's structural features.
    pub(super) when: fn(&Features) -> bool,
    /// Values by role, in the order they are defined.
    pub(super) set: &'static [(Role, i64)],
    pub(super) warps: Option<u32>,
    pub(super) stages: Option<usize>,
    pub(super) warp_specialize: bool,
    pub(super) persistent: bool,
    pub(super) overlap: bool,
    /// Compute the dot loop's accumulator transposed (`swap_operands`).
    pub(super) swap_operands: bool,
    /// With warp specialization on a persistent grid: clusters of two programs sharing their
    /// copies (`cluster`).
    pub(super) cluster: bool,
    /// With a persistent grid: its last tiles shared out by K iterations (`stream_k`).
    pub(super) stream_k: bool,
    /// Blocks per SM that ptxas must fit (`.minnctapersm`; `PtxOptions::min_blocks`).
    pub(super) min_blocks: Option<u32>,
    /// With warp specialization: at most this many registers a consumer thread (a multiple of
    /// 8), below what the block leaves it (`WsPlan::one_consumer`).
    pub(super) consumer_regs: Option<u32>,
    /// With warp specialization: a kernel whose grid has the constant extent 2 along axis 2
    /// runs its two programs of a tile as two consumers of one block (`WsPlan::roles`).
    pub(super) roles: bool,
}

/// The rows of dot loops, row reductions and elementwise kernels (H200 measurements of
/// 2026-12-01 and 12-02, docs/history/benchmarks-log.md "Hopper fast path" and the sections
/// named below). sm_90a GEMM: a 128×256 tile with 64-deep K blocks on two warpgroups and a
/// 4-stage held ring, each wgmma group left in flight for one iteration (461 TFLOP/s at 8192³;
/// 3 stages 408, 2 stages 396, the op's 64×64 tile 149), warp-specialized: a producer warpgroup
/// on tensor copies and the two warpgroups as its consumer (599–614 against 507–543 unspecialized
/// at 8192³, 4096³ 544 against 472; docs/history/benchmarks-log.md "Warp specialization"), its
/// tiles in groups of block rows (8 then: 8192³ 619–645 against 583–606 in row order,
/// 16384×14336×4096 524–541 against 483–492; 16 since call Y6, below), on a persistent grid of
/// the target's SM count (8192³ 695–698 against 634–654, 4096³ 640–650 against 609–622;
/// 16384×14336×4096 both ways between calls; docs/history/benchmarks-log.md "Persistent
/// GEMM"); swiglu (two dots sharing A) takes its own 128×128 row. A stored transposed (`TRANS_A = 1`,
/// read M-major by wgmma: the weight gradient dB = Aᵀ·dC) takes the same rows but the swapped
/// ones; it matched none before call W5 (an H100,
/// docs/gpu-results/2026-12-06-w5-h100-gemm-trans-a.txt, `kirc bench`, two rounds): 4096³
/// 765–771 TFLOP/s against 159–160 on the op's tiles (torch's `a.t() @ b` 790), 8192³ 768–804
/// against 161 (748–796), 16384×14336×4096 752–761 against 151 (724–784).
pub(super) const ROWS: &[Row] = &[
    // At most 32 rows (M known): the accumulator computed transposed (`swap_operands`), so the
    // weight's 128 columns of a block are the M of two 64-row warpgroups and the few rows are
    // wgmma's N (16 or 32), six stages, one role. H200, ncu kernel time, N = 14336, K = 4096
    // (calls Z3/Z4, docs/gpu-results/2026-12-04-z3-z4-gemm-swapped.txt): as the default, M = 16
    // 29.38 µs against 36.03 for the 64×128 warp-specialized row below (cuBLAS 30.43), M = 32
    // 31.14 against 32.86 (cuBLAS 30.94); at M = 64 the swapped tile only evened out (32.58
    // against 32.26), and warp-specialized swapped tiles were slower (31.2–33.5 µs at M = 16).
    swapped_gemm_row(
        |f| f.half() && f.dots == 1 && !f.trans_a && f.m.is_some_and(|m| m <= 16),
        &[
            (Role::MTile, 16),
            (Role::NTile, 128),
            (Role::KTile, 64),
            (Role::Group, 8),
        ],
    ),
    swapped_gemm_row(
        |f| f.half() && f.dots == 1 && !f.trans_a && f.m.is_some_and(|m| m <= 32),
        &[
            (Role::MTile, 32),
            (Role::NTile, 128),
            (Role::KTile, 64),
            (Role::Group, 8),
        ],
    ),
    // Few rows (the problem's M known, from the shapes a plan is made for): the 128×256 tile
    // leaves most SMs idle. H200, 2026-12-03 (docs/gpu-results/2026-12-03-gemm-shape-sweep.txt):
    // M = 16, N = 14336, K = 4096: 64×128 on one warpgroup, six stages, 0.0411 ms against
    // 0.0521 for the default row; M = 128: 128×128, five stages, 0.0404 against 0.0579. Both
    // warp-specialized, on a grid of one program per tile (a persistent grid was slower).
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.dots == 1 && f.m.is_some_and(|m| m <= 64),
        set: &[
            (Role::MTile, 64),
            (Role::NTile, 128),
            (Role::KTile, 64),
            (Role::Group, 8),
        ],
        warps: Some(4),
        stages: Some(6),
        warp_specialize: true,
        persistent: false,
        overlap: false,
        swap_operands: false,
        cluster: false,
        stream_k: false,
        min_blocks: None,
        consumer_regs: None,
        roles: false,
    },
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.dots == 1 && f.m.is_some_and(|m| m <= 128),
        set: &[
            (Role::MTile, 128),
            (Role::NTile, 128),
            (Role::KTile, 64),
            (Role::Group, 8),
        ],
        warps: Some(8),
        stages: Some(5),
        warp_specialize: true,
        persistent: false,
        overlap: false,
        swap_operands: false,
        cluster: false,
        stream_k: false,
        min_blocks: None,
        consumer_regs: None,
        roles: false,
    },
    // A tile of the output's shape added in the epilogue (gemm's `C_IN = 1`, the backward's
    // `dA += dC·Bᵀ`): on the 128×256 rows below each consumer thread held the c_in tile's 128
    // values beside its 128 accumulator registers and ptxas spilled 900–904 bytes. 128×128
    // halves both; groups of 8 block rows and a 4-stage ring won the sweep (calls W1–W4, an
    // H100, docs/gpu-results/2026-12-06-w1-w4-h100-bars-gemm-c-in.txt, `kirc bench` TFLOP/s,
    // two rounds each in W3 and W4): 4096³ 565–573 against the 128×256 row's 436–440, 8192³
    // 654–660 against 568–592, 16384×14336×4096 583–596 against 381–385 (torch's addmm 691–696,
    // 648–667, 620–656).
    Row {
        warp_specialize: true,
        persistent: true,
        ..sm90a_gemm_row(
            |f| f.half() && f.dots == 1 && f.acc_loads > 0,
            &[
                (Role::MTile, 128),
                (Role::NTile, 128),
                (Role::KTile, 64),
                (Role::Group, 8),
            ],
            4,
        )
    },
    // Two dots sharing A (gemm's `EPILOGUE=swiglu`: silu(a·b) ⊙ a·b2, an MLP's gate and up
    // projections in one kernel, and a user's two GEMMs over the same activations once fused):
    // two 128×128 accumulators take the registers of one 128×256 tile, so the same ring and
    // roles with B and B2 in their own rings (three, 193 KB at 4 stages), no spill (ptxas 13.0,
    // tests/tests/shape_configs.rs). An H100, M = 8192, K = N = 4096 (calls Y2/Y3,
    // docs/gpu-results/2026-12-07-y2-y4-h100-swiglu-row-fused-config-launch-pairs.txt, `kirc
    // bench`): 0.734–0.737 ms against 2.707–2.709 on the op's 64×64 tiles before (torch's
    // `silu(x @ wg) * (x @ wu)` 0.817–0.829); the sweep of tiles is not done.
    Row {
        warp_specialize: true,
        persistent: true,
        ..sm90a_gemm_row(
            |f| f.half() && f.dots == 2 && f.acc_loads == 0,
            &[
                (Role::MTile, 128),
                (Role::NTile, 128),
                (Role::KTile, 64),
                (Role::Group, 8),
            ],
            4,
        )
    },
    // One wave (the output's shape known, and no more 128×256 tiles than SMs: 2048³,
    // 1024×4096×4096): the persistent grid's tile loop only adds work to the one tile each SM
    // runs. H200, ncu kernel time (call Y4, docs/gpu-results/2026-12-04-y3-y4-gemm-configs.txt; 1.5–1.7 % from cuBLAS in Y6):
    // 2048³ 25.41–25.44 µs against 27.42 persistent, 1024×4096×4096 45.18 against 46.91; at
    // 4096³ (512 tiles) the persistent grid stays ahead, 180.90 against 182.56.
    wide_gemm_row(
        |f| {
            f.half()
                && f.dots == 1
                && f.output_tiles(128, 256)
                    .is_some_and(|t| t <= u64::from(Target::Sm90a.sm_count()))
        },
        WIDE_GROUP_8,
        false,
        false,
    ),
    // At least 1,024 output tiles and at most 8,192 output columns (the output's shape known):
    // the persistent grid's programs in clusters of two that multicast the B tile both need
    // (`cluster`). By `kirc bench` medians on an H100 (call N1,
    // docs/gpu-results/2026-12-05-n1-h100-gemm-clusters.txt, three rounds) clusters looked
    // level or ahead from 1,024 tiles, within rounds that spread 5–10 %; by kernel time (ncu,
    // clocks left alone, median of 5 launches; calls V1 and O5 on two H100s,
    // docs/gpu-results/2026-12-06-v1-v3-h100-gemm-wg-bulk.txt and
    // 2026-12-06-o1-o9-h100-ordered-dq-gemm-clusters.txt, five rounds in all) they gain only at
    // 8192³ (1,349–1,351 µs against 1,352–1,353 in O5, 1,369 against 1,374–1,375 in V1) and
    // lose where N ≥ 14,336: 16384×14336×4096 2,390–2,398 against 2,382–2,386 (O5; V1: 2,436–2,450
    // against 2,418–2,421), 4096×128256×4096 5,348–5,386 against 5,287–5,292 (O5; V1:
    // 5,528–5,530 against 5,373–5,375), 8192×14336×4096 level (1,205–1,206 both, O5). With
    // fewer tiles no gain: 4096³ (512) 0.180 ms both, 8192×1024×8192 (256) 0.176 against 0.174.
    wide_gemm_row(
        |f| {
            f.half()
                && f.dots == 1
                && f.output_tiles(128, 256).is_some_and(|t| t >= 1024)
                && f.output_cols().is_some_and(|n| n <= 8192)
        },
        WIDE_GROUP_16,
        true,
        true,
    ),
    // Groups of 16 block rows on the persistent grid: H200, ncu kernel time against groups of
    // 8 (calls Y4/Y6, docs/gpu-results/2026-12-04-y5-y6-bwd-pairs-gemm.txt): 4096³ 183.68 µs
    // against 184.61, 8192³ 1,412.9 against 1,421.1, 16384×14336×4096 2,507–2,454 against
    // 2,529–2,471, 4096×128256×4096 5,570 against 5,622; 8192×1024×8192 178.8 against 178.5.
    wide_gemm_row(|f| f.half() && f.dots == 1, WIDE_GROUP_16, true, false),
    // layernorm_bwd's dx kernel (a whole row in 16-bit tiles, over four tensors loaded, the next
    // row's x, dy, mean and rstd in flight) on 8 warps keeps 2 blocks per SM (128 registers; 75
    // and one block on 16): H200, 16384×4096 bf16, 3.33 TB/s against 2.58 on 16 warps and 2.78
    // for the kernel without the next row's loads (call X5, docs/benchmarks.md).
    Row {
        warps: Some(8),
        ..tile_row(
            Class::RowReduce,
            |f| f.half() && !f.row_block && f.whole_row && f.inputs > 4,
            &[(Role::ColumnBlock, 4096)],
        )
    },
    // A row in one chunk whose reductions run one after the other (layernorm_fwd: the centred
    // squares need the mean), 16-bit tiles: 8 warps, half the partial sums to combine at each
    // of the row's two block reductions. H200, 16384×4096 bf16 (call X7, docs/benchmarks.md):
    // layernorm_fwd 3.02–3.07 TB/s on 8 warps against 2.32–2.36 on 16 (its three-pass form
    // before: 2.79–2.83); rmsnorm_fwd and rmsnorm_bwd, one reduction or two independent ones,
    // lose on 8 (3.06 against 3.44, 2.99 against 3.60), so they keep 16.
    Row {
        warps: Some(8),
        ..tile_row(
            Class::RowReduce,
            |f| f.half() && !f.row_block && f.whole_row && f.chained,
            &[(Role::ColumnBlock, 4096)],
        )
    },
    // Row reductions (norm statistics), H200 at 16,384 rows (docs/benchmarks.md "Per-kernel
    // configurations"): a kernel that keeps a row in one chunk when it fits is fastest with
    // chunks as long as the row (rmsnorm_fwd at 4096 columns: 4096-column chunks 0.080 ms,
    // 1024 0.089; at 1024 columns 1024 is fastest), so it takes 4096, a common hidden size;
    // one that keeps running sums over chunks is fastest with 1024 columns at every width
    // measured (layernorm_fwd when it took three passes, at 1024, 4096 and 8192 columns: 0.046,
    // 0.109, 0.198 ms against 0.197, 0.167, 0.252 with 4096). One row per tile fits registers.
    // A block of rows per program has no row: 8 rows of 1024-column chunks ran faster on the
    // H200 (call C5, docs/gpu-results/2026-12-03-c5-norm-bwd.txt: the norm backward's dx
    // kernels of that time, rmsnorm_bwd 1.546 ms against 2.299) but spilled on the backend's 16
    // warps. Those kernels now take one row per program (the whole-row row below applies).
    tile_row(
        Class::RowReduce,
        |f| !f.row_block && f.whole_row,
        &[(Role::ColumnBlock, 4096)],
    ),
    tile_row(
        Class::RowReduce,
        |f| !f.row_block,
        &[(Role::ColumnBlock, 1024)],
    ),
    // Elementwise tiles: the built-in swiglu's 4×1024.
    tile_row(
        Class::Elementwise,
        |_| true,
        &[(Role::RowBlock, 4), (Role::ColumnBlock, 1024)],
    ),
    // A row kept whole in 4096 columns outgrows sm_120a's 99 KB in CUDA C when the kernel also
    // holds the next row (rmsnorm_bwd's prefetch: 147,472 bytes at 4096); 2048-column chunks
    // fit (a row of 4096 then takes the two-pass path there).
    cuda_row(
        Class::RowReduce,
        &[Target::Sm120a],
        |f| !f.row_block && f.whole_row,
        &[(Role::ColumnBlock, 2048)],
    ),
];

/// A row of PTX and IR emission on every target that sets tiles only (the backend's policy
/// chooses the warps; no ring, warp roles or persistence).
pub(super) const fn tile_row(
    class: Class,
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
) -> Row {
    Row {
        cuda: false,
        class,
        targets: &Target::ALL,
        when,
        set,
        warps: None,
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
        cluster: false,
        stream_k: false,
        min_blocks: None,
        consumer_regs: None,
        roles: false,
    }
}

/// A row of sm_90a's attention forward: `set`'s tiles on `warps` warps, warp-specialized or
/// not, no ring depth, persistence, overlap or clusters of its own.
pub(super) const fn attention_row(
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
    warps: u32,
    warp_specialize: bool,
) -> Row {
    Row {
        targets: &[Target::Sm90a],
        warps: Some(warps),
        warp_specialize,
        ..tile_row(Class::Attention, when, set)
    }
}

/// The sm_90a attention-backward tiles: 64-row query and key blocks for dQ, 64-query dK/dV
/// steps, and 64 or 128 keys per dK/dV program.
pub(super) const BWD_64_KEYS: &[(Role, i64)] = &[
    (Role::QueryBlock, 64),
    (Role::KeyBlock, 64),
    (Role::KvBlock, 64),
    (Role::QueryStep, 64),
];
pub(super) const BWD_128_KEYS: &[(Role, i64)] = &[
    (Role::QueryBlock, 64),
    (Role::KeyBlock, 64),
    (Role::KvBlock, 128),
    (Role::QueryStep, 64),
];

/// The d128 tiles of the recomputing backward: as [`BWD_64_KEYS`] and [`BWD_128_KEYS`], but dQ
/// programs of 128 query rows (8 warps) over 128-key blocks. An H100, `kirc bench --kernel
/// attention_bwd_dq` (call O7, docs/gpu-results/2026-12-06-o7-h100-dq-tiles.txt, two rounds):
/// d128 S = 16k 4.75–4.83 ms against 5.55 for 64×64, causal 2.33–2.37 against 2.77–2.78, S = 1k
/// (B 16) 0.348–0.350 against 0.366; 128×64 on 8 warps 5.23–5.29 and 64×128 on 4 warps
/// 6.58–6.66. At d64 every one of them lost (1.33 ms for 64×64, 1.34–1.65 for the others).
pub(super) const BWD_64_KEYS_DQ128: &[(Role, i64)] = &[
    (Role::QueryBlock, 128),
    (Role::KeyBlock, 128),
    (Role::KvBlock, 64),
    (Role::QueryStep, 64),
];
pub(super) const BWD_128_KEYS_DQ128: &[(Role, i64)] = &[
    (Role::QueryBlock, 128),
    (Role::KeyBlock, 128),
    (Role::KvBlock, 128),
    (Role::QueryStep, 64),
];

/// The d256 tiles of the warp-specialized backward: as [`BWD_64_KEYS`], but dQ programs over
/// 80-key blocks (two stages of 80-row K and V tiles, 230,400 bytes of shared memory). An
/// H100, `kirc bench`, B 4 H 8 S 4k, three interleaved rounds (call T5,
/// docs/gpu-results/2026-12-06-t4-t6-h100-gemm-store-bound-dq80.txt): 299.1–300.1 TFLOP/s
/// against 294.7–297.6 for 64-key blocks.
pub(super) const BWD_64_KEYS_DQ80: &[(Role, i64)] = &[
    (Role::QueryBlock, 64),
    (Role::KeyBlock, 80),
    (Role::KvBlock, 64),
    (Role::QueryStep, 64),
];

/// Attention-backward tiles where ptxas spilled in the op's 32-key ones (attention_rows.rs): 64-row
/// dQ query blocks and dK/dV steps, 16 keys per dQ block and per dK/dV program.
pub(super) const BWD_16_KEYS: &[(Role, i64)] = &[
    (Role::QueryBlock, 64),
    (Role::QueryStep, 64),
    (Role::KeyBlock, 16),
    (Role::KvBlock, 16),
];

/// A row of sm_90a's attention backward: `set`'s tiles, `warps` (or the backend's policy), no
/// ring depth, warp roles, persistence or overlap of its own.
pub(super) const fn bwd_row(
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
    warps: Option<u32>,
) -> Row {
    Row {
        targets: &[Target::Sm90a],
        warps,
        ..tile_row(Class::AttentionBwd, when, set)
    }
}

/// The 128×256 GEMM tile with 64-deep K blocks, in groups of 8 block rows.
const WIDE_GROUP_8: &[(Role, i64)] = &[
    (Role::MTile, 128),
    (Role::NTile, 256),
    (Role::KTile, 64),
    (Role::Group, 8),
];

/// The 128×256 GEMM tile with 64-deep K blocks, in groups of 16 block rows.
const WIDE_GROUP_16: &[(Role, i64)] = &[
    (Role::MTile, 128),
    (Role::NTile, 256),
    (Role::KTile, 64),
    (Role::Group, 16),
];

/// An sm_90a row of the 128×256 GEMM tile (`set`): 8 warps, a 4-stage ring, warp-specialized,
/// on a persistent grid or not, in clusters of two or not.
const fn wide_gemm_row(
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
    persistent: bool,
    cluster: bool,
) -> Row {
    Row {
        warp_specialize: true,
        persistent,
        cluster,
        ..sm90a_gemm_row(when, set, 4)
    }
}

/// An sm_90a GEMM row with the operands swapped (`swap_operands`): 8 warps, a 6-stage ring.
const fn swapped_gemm_row(when: fn(&Features) -> bool, set: &'static [(Role, i64)]) -> Row {
    Row {
        swap_operands: true,
        ..sm90a_gemm_row(when, set, 6)
    }
}

/// The fields the sm_90a GEMM rows share: a dot loop on 8 warps with `stages`, nothing else on.
const fn sm90a_gemm_row(
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
    stages: usize,
) -> Row {
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when,
        set,
        warps: Some(8),
        stages: Some(stages),
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
        cluster: false,
        stream_k: false,
        min_blocks: None,
        consumer_regs: None,
        roles: false,
    }
}

/// A row of the CUDA-C backend: tiles only (it has no warps, rings or warp roles).
pub(super) const fn cuda_row(
    class: Class,
    target: &'static [Target],
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
) -> Row {
    Row {
        cuda: true,
        class,
        targets: target,
        when,
        set,
        warps: None,
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
        cluster: false,
        stream_k: false,
        min_blocks: None,
        consumer_regs: None,
        roles: false,
    }
}
