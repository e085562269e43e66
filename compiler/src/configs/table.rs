//! The table of per-target default configurations that compiler/src/configs.rs applies: each
//! row a class, the targets and backend it is for, a condition on a kernel's structural
//! features and the values it sets by role, with the warps, ring depth, warp specialization and
//! persistence it asks for. Each row's comment names the H200 measurement behind it
//! (docs/benchmarks.md; the calls in docs/history/benchmarks-log.md).

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
/// groups of block rows (8 then: 8192³ 619–645 against 583–606 in row order, 16384×14336×4096
/// 524–541 against 483–492; 16 since call Y6, below), on a persistent grid of the target's SM count (8192³ 695–698 against
/// 634–654, 4096³ 640–650 against 609–622; 16384×14336×4096 both ways between calls;
/// docs/history/benchmarks-log.md "Persistent GEMM"); swiglu (two dots sharing A) keeps the op's tile.
pub(super) const ROWS: &[Row] = &[
    // Short sequences (the query count known from the shapes, at most 2,048): the
    // warp-specialized 192-row tile leaves a third of the last query block empty at 1,024
    // queries (5⅓ blocks) and has fewer key blocks to pipeline; the unspecialized 128×64 tile
    // at two blocks per SM is faster there (call W3, docs/gpu-results/2026-12-04-w3-fwd.txt,
    // B 16, H 16, S 1,024: 517.9 TFLOP/s against 457.9; earlier calls L2/L3: 517.0–517.2
    // against 459.7–461.2 at 1k, 605.3–613.2 against 594.3–627.6 at 4k).
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| {
            f.half() && f.head_dim == Some(128) && !f.causal && f.m.is_some_and(|m| m <= 2048)
        },
        set: &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.head_dim == Some(128) && !f.causal && !f.mask,
        set: &[(Role::QueryBlock, 192), (Role::KeyBlock, 128)],
        warps: Some(12),
        stages: Some(2),
        warp_specialize: true,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    // With an additive mask tile the 160-register consumers spill (844 bytes at 192×128):
    // the unspecialized tile, two blocks of two warpgroups per SM.
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.head_dim == Some(128) && !f.causal,
        set: &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.head_dim == Some(128) && f.causal,
        set: &[(Role::QueryBlock, 128), (Role::KeyBlock, 128)],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.head_dim == Some(64) && !f.causal,
        set: &[(Role::QueryBlock, 128), (Role::KeyBlock, 128)],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.head_dim == Some(64) && f.causal,
        set: &[
            (Role::QueryBlock, 128),
            (Role::KeyBlock, 128),
            (Role::Group, 2),
        ],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    // d256 without causal masking, an additive mask or a soft cap at up to 4,096 queries (the
    // query count known from the shapes): the row below's 128×64 tile warp-specialized, a
    // producer warpgroup on the K and V copies. H200, `kirc bench` (calls Y8/Y9,
    // docs/gpu-results/2026-12-04-y8-y9-attention-fwd-configs.txt), TFLOP/s against the
    // unspecialized tile in the same call: B 16, S 1k 557.7/555.7 against 529.5/532.9; B 4,
    // S 4k 660.5/659.6 against 648.4/648.1 (660.4/660.7 against 646.4/646.9 in Y8); at 16k
    // it loses (642.1/616.4 against 652.1/638.2), so longer or unknown lengths keep the row
    // below.
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| {
            f.half()
                && f.head_dim == Some(256)
                && !f.causal
                && !f.mask
                && !f.softcap
                && f.m.is_some_and(|m| m <= 4096)
        },
        set: &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        warps: Some(8),
        stages: None,
        warp_specialize: true,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    Row {
        cuda: false,
        class: Class::Attention,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.head_dim == Some(256),
        set: &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        warps: Some(8),
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
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
        when: |f| f.half() && f.dots == 1 && !f.trans_a && f.m.is_some_and(|m| m <= 64),
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
    },
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.dots == 1 && !f.trans_a && f.m.is_some_and(|m| m <= 128),
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
    },
    // One wave (the output's shape known, and no more 128×256 tiles than SMs: 2048³,
    // 1024×4096×4096): the persistent grid's tile loop only adds work to the one tile each SM
    // runs. H200, ncu kernel time (call Y4, docs/gpu-results/2026-12-04-y3-y4-gemm-configs.txt; 1.5–1.7 % from cuBLAS in Y6):
    // 2048³ 25.41–25.44 µs against 27.42 persistent, 1024×4096×4096 45.18 against 46.91; at
    // 4096³ (512 tiles) the persistent grid stays ahead, 180.90 against 182.56.
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when: |f| {
            f.half()
                && f.dots == 1
                && !f.trans_a
                && f.output_tiles(128, 256)
                    .is_some_and(|t| t <= u64::from(Target::Sm90a.sm_count()))
        },
        set: &[
            (Role::MTile, 128),
            (Role::NTile, 256),
            (Role::KTile, 64),
            (Role::Group, 8),
        ],
        warps: Some(8),
        stages: Some(4),
        warp_specialize: true,
        persistent: false,
        overlap: false,
        swap_operands: false,
    },
    // Groups of 16 block rows on the persistent grid: H200, ncu kernel time against groups of
    // 8 (calls Y4/Y6, docs/gpu-results/2026-12-04-y5-y6-bwd-pairs-gemm.txt): 4096³ 183.68 µs
    // against 184.61, 8192³ 1,412.9 against 1,421.1, 16384×14336×4096 2,507–2,454 against
    // 2,529–2,471, 4096×128256×4096 5,570 against 5,622; 8192×1024×8192 178.8 against 178.5.
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when: |f| f.half() && f.dots == 1 && !f.trans_a,
        set: &[
            (Role::MTile, 128),
            (Role::NTile, 256),
            (Role::KTile, 64),
            (Role::Group, 16),
        ],
        warps: Some(8),
        stages: Some(4),
        warp_specialize: true,
        persistent: true,
        overlap: false,
        swap_operands: false,
    },
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
    // Attention backward at head dims 64 and 128 on sm_90a (the measured ones): 64 keys per dK/dV program and
    // 64-query steps, 64-row query and key blocks for dQ, on 4 warps, so that every dot of the
    // key-major dK/dV kernel (sᵀ = k·qᵀ, dv += pᵀ·do, dpᵀ = v·doᵀ, dk += dsᵀ·q) and of the dQ
    // kernel is one 64-row wgmma (call W1, docs/gpu-results/2026-12-04-w1-bwd-wgmma.txt, `kirc
    // bench`, TFLOP/s: d128 S = 16k 349.6 against 147.4 for the op's 64/32/32 and 322.8 for
    // 128 keys on 8 warps; causal 341.9 against 146.1; d64 B 4 S 4k 297.2 against 135.8;
    // d128 B 16 S 1k 286.8 against 130.9). Before the key-major form, 64-row blocks were the
    // tuner's best at d64 too (call C4: 1.955 ms against 2.328). With a soft cap the cap's
    // derivative is one more [keys, queries] tile, and the 64-key dK/dV kernel spills (16 bytes
    // at d128, 88 with every feature): it keeps the op's 32-key tiles, spill-free; so does the
    // atomic mode (`DETERMINISTIC=0`), whose fifth dot (dS·k into dq) spills 16 bytes there.
    // At d256 the two dK/dV accumulators (2 × 64×256 f32, 256 registers a thread on 4 warps)
    // are split between two programs by the op (dk's and dv's, grid z = 2; 243 registers, no
    // spills) and the 256-column k and v tiles are copied into the core layout in two column
    // groups on 128 threads (call Z1, docs/gpu-results/2026-12-04-z1-bwd-d256-split.txt, B 4 S
    // 4k: 253.4 TFLOP/s against 119.4 for the op's 32-key tiles on mma.sync, cuDNN 405.5). A
    // mask there keeps the op's tiles: its tile makes the 64-query dQ kernel spill (84 bytes).
    // d128 at long sequences (the query count known, at least 8192): 128 keys per dK/dV program
    // on 8 warps (two warpgroups of 64 keys sharing each q and do stage), the rest as below.
    // H200, `kirc bench`, three alternating rounds against the 64-key row below (call B2,
    // docs/gpu-results/2026-12-04-b1-b2-bwd-kv128.txt): S = 16k 393.4–395.6 TFLOP/s against
    // 381.9–384.3, causal 390.1–393.1 against 377.1–378.7; at S = 4k the two were within the
    // runs' spread (non-causal 386.8–406.7 against 377.4–385.9, causal 360.0–362.3 against
    // 354.0–365.7), at 2k even, and at 1k (B 16) 128 keys lost 1.3–1.9 %.
    bwd_row(
        |f| {
            f.half()
                && f.head_dim == Some(128)
                && !f.mask
                && !f.softcap
                && f.dots <= 4
                && f.m.is_some_and(|m| m >= 8192)
        },
        BWD_128_KEYS,
        None,
    ),
    // d256 warp-specialized (`WsPlan::one_consumer` for each kernel: a producer warpgroup
    // feeding the rings by TMA, the 4-warp block as the consumer). Both d256 kernels hold one
    // block per SM for their shared memory (197–199 KB), so the producer's warps cost no
    // occupancy. H200, call E2 (docs/gpu-results/2026-12-05-e2-bwd-ws-per-kernel.txt), B 4 H 8
    // S 4k, `kirc bench --kernel`: dK/dV 3.110 ms against 3.830, causal 1.834 against 2.199;
    // dQ 1.632 against 1.586, causal 0.917 against 0.865; the program (E1) 287.8 TFLOP/s
    // against 251.3. At d64 and d128 it lost in both kernels (d128 S = 16k: dK/dV 10.83 ms
    // against 8.41, dQ 8.09 against 5.45): the unspecialized dQ kernel runs two blocks per SM;
    // the 128-key dK/dV kernel runs one either way, and why it loses is not known (call G1's
    // ncu: it issues less, with more stalls on L1TEX scoreboards).
    Row {
        warp_specialize: true,
        ..bwd_row(
            |f| f.half() && f.head_dim == Some(256) && !f.mask && !f.softcap && f.dots <= 4,
            BWD_64_KEYS,
            None,
        )
    },
    bwd_row(
        |f| {
            let dim_ok = match f.head_dim {
                Some(64 | 128) => true,
                Some(256) => !f.mask,
                _ => false,
            };
            f.half() && dim_ok && !f.softcap && f.dots <= 4
        },
        BWD_64_KEYS,
        None,
    ),
    // The atomic mode (`DETERMINISTIC=0`) on sm_90a: the dK/dV kernel's fifth dot is
    // dqᵀ = kᵀ·dSᵀ, [HEAD_DIM, queries], whose rows are the head dim: one 64-row wgmma per
    // warpgroup when HEAD_DIM = 16·warps, with kᵀ read M-major from the k tile and dSᵀ stored
    // from the accumulator into the core layout. So d64 takes 64 keys on 4 warps and d128 128
    // keys on 8 warps (two warpgroups, 64 keys each); every dot is a wgmma, no spills (244
    // registers at d128). H200, d128 S = 16k (call E1,
    // docs/gpu-results/2026-12-05-e1-torch-shapes-bwd-ws.txt): 322.2 TFLOP/s against the
    // deterministic default's 392.6 (warp-specialized 335.4; with a 24-register producer
    // 359.2), so the deterministic mode stays the default.
    bwd_row(
        |f| f.half() && f.head_dim == Some(64) && !f.softcap && f.dots == 5,
        BWD_64_KEYS,
        Some(4),
    ),
    bwd_row(
        |f| f.half() && f.head_dim == Some(128) && !f.softcap && f.dots == 5,
        BWD_128_KEYS,
        Some(8),
    ),
    // The forward where the op's 64×64 tiles spill (ptxas 13.0 over every head dim, dtype,
    // causal or not, target: docs/configs.md, "Tiles that do not spill"): f32 above head dim
    // 128 (the FMA path; 28 bytes at d160, 2,036 at d384 on sm_90a) and 16-bit at 384
    // (mma.sync, up to 32 bytes). These query and key blocks assembled without spills on all
    // four targets, causal or not, and with every feature but a mask at 16-bit d384 (40 to 76
    // bytes there, against 264 to 416 with the op's tiles); speed was not measured.
    tile_row(
        Class::Attention,
        |f| f.dtype == "f32" && f.head_dim.is_some_and(|d| d > 128 && d < 256),
        &[(Role::QueryBlock, 32), (Role::KeyBlock, 32)],
    ),
    tile_row(
        Class::Attention,
        |f| f.dtype == "f32" && f.head_dim == Some(256),
        &[(Role::QueryBlock, 32), (Role::KeyBlock, 16)],
    ),
    tile_row(
        Class::Attention,
        |f| f.dtype == "f32" && f.head_dim == Some(384),
        &[(Role::QueryBlock, 8), (Role::KeyBlock, 16)],
    ),
    tile_row(
        Class::Attention,
        |f| f.half() && f.head_dim == Some(384),
        &[(Role::QueryBlock, 64), (Role::KeyBlock, 16)],
    ),
    // Attention backward where the op's tiles spill on every target (ptxas 13.0, every
    // (head dim, dtype) from 64 to 384, causal or not: docs/configs.md, "Tiles that do not
    // spill"): f32 above head dim 128, on the FMA path, and 16-bit at 384, on mma.sync. The dQ
    // kernel's [query block, head dim] accumulator and the dK/dV kernel's two [keys, head dim]
    // ones outgrow the registers (f32 at d256: 1,208 and 660 bytes of spills; bf16 at d384:
    // 36). These tiles assembled without spills on all four targets, causal or not; speed was
    // not measured (f32 attention is the parity path; d384 has no peer to time against here).
    tile_row(
        Class::AttentionBwd,
        |f| f.dtype == "f32" && f.head_dim == Some(384) && f.dots <= 4,
        &[
            (Role::QueryBlock, 16),
            (Role::QueryStep, 16),
            (Role::KeyBlock, 16),
            (Role::KvBlock, 8),
        ],
    ),
    // The atomic mode (`DETERMINISTIC=0`) at 16-bit d64, causal, on sm_100a: with the op's
    // 64-query steps ptxas held the 4-warp dK/dV kernel at 128 registers (shared memory allows
    // three blocks per SM) and spilled 4 bytes; with 32-query steps it takes 125, no spills
    // (ptxas 13.0; tests/tests/attention_spills.rs). Speed not measured: no sm_100a GPU here.
    Row {
        targets: &[Target::Sm100a],
        ..tile_row(
            Class::AttentionBwd,
            |f| f.half() && f.head_dim == Some(64) && f.causal && f.dots == 5,
            &[
                (Role::QueryBlock, 32),
                (Role::QueryStep, 32),
                (Role::KeyBlock, 32),
                (Role::KvBlock, 32),
            ],
        )
    },
    // The atomic mode's fifth dot (dqᵀ, 384 rows) puts the dK/dV kernel on 8 warps, where 8
    // keys made ptxas cap sm_80's registers at 128 and spill; 16 keys assemble without spills
    // on every target (on sm_120a, where its tiles shrink to fit shared memory, with the
    // backend's `.minnctapersm 1`: backends/src/ptx/lower/kernel.rs).
    tile_row(
        Class::AttentionBwd,
        |f| f.dtype == "f32" && f.head_dim == Some(384),
        &[
            (Role::QueryBlock, 16),
            (Role::QueryStep, 16),
            (Role::KeyBlock, 16),
            (Role::KvBlock, 16),
        ],
    ),
    tile_row(
        Class::AttentionBwd,
        |f| f.dtype == "f32" && f.head_dim.is_some_and(|d| d > 128),
        &[
            (Role::QueryBlock, 32),
            (Role::QueryStep, 32),
            (Role::KeyBlock, 16),
            (Role::KvBlock, 16),
        ],
    ),
    tile_row(
        Class::AttentionBwd,
        |f| f.half() && f.head_dim == Some(384),
        &[
            (Role::QueryBlock, 32),
            (Role::QueryStep, 32),
            (Role::KeyBlock, 16),
            (Role::KvBlock, 16),
        ],
    ),
    // CUDA C stores every live tile as 32-bit values in shared memory, so the op's default
    // tiles outgrow the smaller targets (`Target::smem_per_block`): sm_120a's 99 KB does not
    // hold attention_fwd at d128 (119,296 bytes) or attention_bwd's dK/dV (165,888), sm_80's
    // 163 KB not attention_fwd at d256 (213,760) or causal attention_bwd (170,496). These rows
    // take smaller query and key blocks that fit with every feature (fit checked by
    // tests/tests/configs.rs; the parity backend is checked for results, not timed).
    cuda_row(
        Class::Attention,
        &[Target::Sm120a],
        |f| f.head_dim.is_some_and(|d| d <= 128),
        &[(Role::QueryBlock, 32), (Role::KeyBlock, 32)],
    ),
    cuda_row(
        Class::Attention,
        &[Target::Sm120a],
        |_| true,
        &[(Role::QueryBlock, 16), (Role::KeyBlock, 16)],
    ),
    cuda_row(
        Class::Attention,
        &[Target::Sm80],
        |f| f.head_dim.is_some_and(|d| d > 128) && !f.causal,
        &[(Role::QueryBlock, 32)],
    ),
    cuda_row(
        Class::Attention,
        &[Target::Sm80],
        |f| f.head_dim.is_some_and(|d| d > 128),
        &[(Role::QueryBlock, 32), (Role::KeyBlock, 32)],
    ),
    cuda_row(
        Class::AttentionBwd,
        &[Target::Sm120a],
        |_| true,
        &[
            (Role::QueryBlock, 32),
            (Role::QueryStep, 32),
            (Role::KeyBlock, 16),
            (Role::KvBlock, 16),
        ],
    ),
    cuda_row(
        Class::AttentionBwd,
        &[Target::Sm80],
        |f| f.causal,
        &[(Role::QueryBlock, 32), (Role::QueryStep, 32)],
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
const fn tile_row(class: Class, when: fn(&Features) -> bool, set: &'static [(Role, i64)]) -> Row {
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
    }
}

/// An sm_90a dot-loop row with the operands swapped (`swap_operands`): the few rows as wgmma's
/// N, the 128 columns of `set`'s N tile on 8 warps (two 64-row warpgroups), six stages, one role.
/// The sm_90a attention-backward tiles: 64-row query and key blocks for dQ, 64-query dK/dV
/// steps, and 64 or 128 keys per dK/dV program.
const BWD_64_KEYS: &[(Role, i64)] = &[
    (Role::QueryBlock, 64),
    (Role::KeyBlock, 64),
    (Role::KvBlock, 64),
    (Role::QueryStep, 64),
];
const BWD_128_KEYS: &[(Role, i64)] = &[
    (Role::QueryBlock, 64),
    (Role::KeyBlock, 64),
    (Role::KvBlock, 128),
    (Role::QueryStep, 64),
];

/// A row of sm_90a's attention backward: `set`'s tiles, `warps` (or the backend's policy), no
/// ring depth, warp roles, persistence or overlap of its own.
const fn bwd_row(
    when: fn(&Features) -> bool,
    set: &'static [(Role, i64)],
    warps: Option<u32>,
) -> Row {
    Row {
        cuda: false,
        class: Class::AttentionBwd,
        targets: &[Target::Sm90a],
        when,
        set,
        warps,
        stages: None,
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: false,
    }
}

const fn swapped_gemm_row(when: fn(&Features) -> bool, set: &'static [(Role, i64)]) -> Row {
    Row {
        cuda: false,
        class: Class::DotLoop,
        targets: &[Target::Sm90a],
        when,
        set,
        warps: Some(8),
        stages: Some(6),
        warp_specialize: false,
        persistent: false,
        overlap: false,
        swap_operands: true,
    }
}

/// A row of the CUDA-C backend: tiles only (it has no warps, rings or warp roles).
const fn cuda_row(
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
    }
}
