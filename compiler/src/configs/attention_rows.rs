//! The attention rows of the per-target configuration table (table.rs holds the row type and
//! the other classes): attention_fwd's and attention_bwd's sm_90a schedules, the tiles that keep
//! every head dim and dtype free of spills on every target, and the CUDA-C backend's tiles.
//! Each row's comment names the measurement behind it (docs/benchmarks.md, docs/configs.md).

use super::table::{
    attention_row, bwd_row, cuda_row, tile_row, Row, BWD_128_KEYS, BWD_128_KEYS_DQ128, BWD_16_KEYS,
    BWD_64_KEYS, BWD_64_KEYS_DQ128, BWD_64_KEYS_DQ80,
};
use crate::structure::{Class, Features, Role};
use kir_backends::Target;

/// Causal d128 on sm_90a: 128×128 on 8 warps (warp-specialized in the rows without a mask,
/// [`ATTENTION_ROWS`]).
const CAUSAL_D128: Row = attention_row(
    |f| f.half() && f.head_dim == Some(128) && f.causal,
    &[(Role::QueryBlock, 128), (Role::KeyBlock, 128)],
    8,
    false,
);

/// The attention rows (H200 measurements of 2026-12-01 and 12-02, docs/history/benchmarks-log.md
/// "Hopper fast path" and the sections named below). sm_90a attention: 128-row query blocks on
/// two warpgroups (one 64-row wgmma fragment each, ping-ponging on the tensor cores). Without
/// causal masking the key loop is a TMA ring (docs/passes.md): d128 warp-specialized, a producer
/// warpgroup (tensor copies of K, V and the query block) and three consumer warpgroups on
/// 192×128 tiles at 160 registers (`setmaxnreg`), two stages (calls L2/L3, 2026-12-02:
/// 615.0–619.2 TFLOP/s at 16k against 576.1–576.5 for the unspecialized 128×64 tile at two
/// blocks per SM, 594.3–627.6 against 605.3–613.2 at 4k, and 459.7–461.2 against 517.0–517.2 at
/// 1k, where 1,024 rows fill 5⅓ blocks of 192: docs/history/benchmarks-log.md "The producer
/// stages the query block"), d64 with 128-key blocks (454.7; 64-key blocks 381.5, the 64×128
/// tile on one warpgroup 410.3), d256 with 64-key blocks (560.2). Causal key ranges are TMA
/// rings too (their rows past the range zeroed in shared memory), taking the query blocks with
/// the most keys first: d128 with 128-key blocks (467.9–470.4; 64-key blocks 462.8–464.0;
/// warp-specialized since calls T1/T2, and d256 on the 128×80 tile likewise: the rows below), d64
/// with 128×128 on two warpgroups, two blocks per SM at 128 registers since the loop bound lives
/// in shared memory (408.6–410.2 against 388.0–388.6 for 64×128 on one warpgroup, three stages
/// 340.6: one block per SM; docs/history/benchmarks-log.md "Causal d64 at two blocks per SM"),
/// its programs walking two heads at a time (421.4 against 414.8 one head at a time, four heads
/// 424.2; at 4k tokens 313.9 against 303.7 and 300.8; d128 keeps one head: 485.9 against
/// 479.0). Then the backward's sm_90a rows, the rows where the ops' tiles spill, and the CUDA-C
/// backend's.
pub(super) const ATTENTION_ROWS: &[Row] = &[
    // Short sequences (the query count known from the shapes, at most 2,048): the
    // warp-specialized 192-row tile leaves a third of the last query block empty at 1,024
    // queries (5⅓ blocks) and has fewer key blocks to pipeline; the unspecialized 128×64 tile
    // at two blocks per SM is faster there (call W3, docs/gpu-results/2026-12-04-w3-fwd.txt,
    // B 16, H 16, S 1,024: 517.9 TFLOP/s against 457.9; earlier calls L2/L3: 517.0–517.2
    // against 459.7–461.2 at 1k, 605.3–613.2 against 594.3–627.6 at 4k).
    attention_row(
        |f| f.half() && f.head_dim == Some(128) && !f.causal && f.m.is_some_and(|m| m <= 2048),
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        8,
        false,
    ),
    Row {
        stages: Some(2),
        ..attention_row(
            |f| f.half() && f.head_dim == Some(128) && !f.causal && !f.mask,
            &[(Role::QueryBlock, 192), (Role::KeyBlock, 128)],
            12,
            true,
        )
    },
    // With an additive mask tile the 160-register consumers spill (844 bytes at 192×128):
    // the unspecialized tile, two blocks of two warpgroups per SM.
    attention_row(
        |f| f.half() && f.head_dim == Some(128) && !f.causal,
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        8,
        false,
    ),
    // Causal d128: the 128×128 tile warp-specialized (a producer warpgroup on the K and V
    // copies, two consumer warpgroups). Calls T1/T2 (H100, 2026-12-06,
    // docs/gpu-results/2026-12-06-t1-t3-h100-roles-causal-fwd.txt, `kirc bench`, two rounds,
    // TFLOP/s): B 1 H 16 S 16k 646.2/649.9 against 585.9/598.6 unspecialized (the row before;
    // cuDNN 633.6/628.9), B 4 S 4k 539.1/533.7 against 525.9/522.9, B 16 S 1k 367.4/362.9
    // against 357.6/359.8; the 192×128 tile on three consumers lost at 1k (306.9/309.7) and
    // spread at 16k (633.0/682.4). With an additive mask the consumers spill beside the other
    // features (28 bytes with a soft cap, a window and VARLEN): the unspecialized row below.
    Row {
        when: |f| f.half() && f.head_dim == Some(128) && f.causal && !f.mask,
        warp_specialize: true,
        ..CAUSAL_D128
    },
    CAUSAL_D128,
    attention_row(
        |f| f.half() && f.head_dim == Some(64) && !f.causal,
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 128)],
        8,
        false,
    ),
    attention_row(
        |f| f.half() && f.head_dim == Some(64) && f.causal,
        &[
            (Role::QueryBlock, 128),
            (Role::KeyBlock, 128),
            (Role::Group, 2),
        ],
        8,
        false,
    ),
    // d256 without causal masking, an additive mask or a soft cap at up to 4,096 queries (the
    // query count known from the shapes): FlashAttention-3's 128×80 tile, warp-specialized, a
    // producer warpgroup on the K and V copies, both dots on wgmma (P·V's K of 80 keys in
    // 16-deep slices down the N-major v tile). H100, `kirc bench` (call M1,
    // docs/gpu-results/2026-12-05-m1-m3-h100-tiles-bwd-atomic.txt), B 4 S 4k, TFLOP/s in two
    // rounds: 684.7/683.0 against 651.1/651.5 for the 128×64 tile warp-specialized (the row
    // before), 672.0/670.0 unspecialized; `kirc tune` picked it too (call M3). The 128×64 tile
    // warp-specialized had beaten the unspecialized one on the H200 (calls Y8/Y9,
    // docs/gpu-results/2026-12-04-y8-y9-attention-fwd-configs.txt): B 16, S 1k 557.7/555.7
    // against 529.5/532.9; B 4, S 4k 660.5/659.6 against 648.4/648.1; at 16k it lost
    // (642.1/616.4 against 652.1/638.2), so longer or unknown lengths take the row below. Call
    // M4 (H100, docs/gpu-results/2026-12-05-m4-h100-bwd-order-d256-fwd.txt) confirmed this row
    // at B 16 S 1k (598.2/596.2 against 571.9/571.2 for 128×64 warp-specialized) and B 4 S 4k
    // (688.1/686.2 against 655.7/648.4).
    attention_row(
        |f| {
            f.half()
                && wide(f)
                && !f.causal
                && !f.mask
                && !f.softcap
                && f.m.is_some_and(|m| m <= 4096)
        },
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 80)],
        8,
        true,
    ),
    // d256 without causal masking, an additive mask or a soft cap at longer or unknown lengths:
    // the 128×80 tile unspecialized. Call M4 (H100), B 1 S 16k: 654.7/641.5 TFLOP/s against
    // 630.6/609.0 for the 128×64 tile of the row below (618.3/609.2 warp-specialized); at B 4
    // S 4k 673.3/671.6 (M4; 672.0/670.0 in M1) against 655.7/648.4 for 128×64 warp-specialized.
    attention_row(
        |f| f.half() && wide(f) && !f.causal && !f.mask && !f.softcap,
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 80)],
        8,
        false,
    ),
    // Causal d256 without an additive mask (with one its consumers spill 52 bytes) or a soft
    // cap (not timed): the 128×80 tile warp-specialized. Calls T2/T3 (H100, 2026-12-06, same
    // file as the causal d128 row above, TFLOP/s in two rounds): B 4 H 8 S 4k 601.2/605.4
    // against 572.6/563.7 for the 128×64 tile unspecialized (the row below; cuDNN
    // 599.6/599.2), B 1 S 16k 729.2/762.6 against 706.9/700.1 (cuDNN 652.2/652.6).
    attention_row(
        |f| f.half() && wide(f) && f.causal && !f.mask && !f.softcap,
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 80)],
        8,
        true,
    ),
    attention_row(
        |f| f.half() && wide(f),
        &[(Role::QueryBlock, 128), (Role::KeyBlock, 64)],
        8,
        false,
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
    // With dQ programs of 128 query rows over 128-key blocks (table.rs, `BWD_128_KEYS_DQ128`),
    // but not with a band of keys (a window), which keeps the 64-row dQ below: with a causal
    // window the 128-row dQ kernel (spill-free) lost at a window of 1,024 (0.412–0.415 ms
    // against 0.401–0.406 at S = 16k, 0.380–0.384 against 0.366–0.371 at B 4 S = 4k) and won at
    // 4,096 (1.075–1.078 against 1.168–1.169; an H100, call O10,
    // docs/gpu-results/2026-12-06-o10-h100-dq-tiles-window.txt). With a mask or a soft cap it
    // spills (72–544 bytes on sm_90a).
    bwd_row(
        |f| {
            f.half()
                && f.head_dim == Some(128)
                && !f.mask
                && !f.softcap
                && !f.band
                && f.dots <= 4
                && f.m.is_some_and(|m| m >= 8192)
        },
        BWD_128_KEYS_DQ128,
        None,
    ),
    // d256 warp-specialized (`WsPlan::one_consumer` for each kernel: a producer warpgroup
    // feeding the rings by TMA, the 4-warp block as the consumer). Both d256 kernels hold one
    // block per SM for their shared memory (197–230 KB), so the producer's warps cost no
    // occupancy. H200, call E2 (docs/gpu-results/2026-12-05-e2-bwd-ws-per-kernel.txt), B 4 H 8
    // S 4k, `kirc bench --kernel`: dK/dV 3.110 ms against 3.830, causal 1.834 against 2.199;
    // dQ 1.632 against 1.586, causal 0.917 against 0.865; the program (E1) 287.8 TFLOP/s
    // against 251.3. At d64 and d128 it lost in both kernels (d128 S = 16k: dK/dV 10.83 ms
    // against 8.41, dQ 8.09 against 5.45): the unspecialized dQ kernel runs two blocks per SM;
    // the 128-key dK/dV kernel runs one either way, and why it loses is not known (call G1's
    // ncu: it issues less, with more stalls on L1TEX scoreboards).
    //
    // Its 4-warp consumer takes all 256 registers that `setmaxnreg` allows. With a band of keys
    // (a causal window) the dQ kernel spilled 20 bytes at 240 with key lengths and a KV offset;
    // without causal masking or a band its dQ programs walk 80-key blocks (table.rs,
    // `BWD_64_KEYS_DQ80`: +1.1 % on an H100 at 256, call T5), whose wgmmas ptxas 13.0
    // serializes at 240 for want of registers (its C7512 note; no spill): 246–247 TFLOP/s
    // against 297 at 256 at B 4 H 8 S 4k (an H100, call D2,
    // docs/gpu-results/2026-12-06-d1-d2-h200-h100-bars-d256-bwd-regs.txt; 249 on the H200 in
    // D1). 240 had been this row's budget since call S8 (64-key dQ blocks then: within 0.5 %
    // of 256 without causal masking, docs/gpu-results/2026-12-06-s1-s8-h100-atomic-gemm-tune.txt).
    // Causal d256 (with a band of keys or not) on 64-key dQ blocks, warp-specialized since call
    // L4 of 2026-12-07 (an H100, docs/gpu-results/2026-12-07-l4-l6-h100-d256-bwd-roles-bars.txt,
    // three rounds, B 4 H 8 S 4k): 279.6–281.7 TFLOP/s against 259.6–260.3 with both kernels
    // unspecialized, as the row had been since call F6 (251.5–254.4 against 240.0–240.9 then,
    // docs/gpu-results/2026-12-06-f5-f7-h100-d256-bwd-roles.txt), when the unspecialized
    // kernels had the row loads in pairs and the warp-specialized ones did not (they do since
    // call L3). Specializing the dK/dV kernel alone ran 275.9–276.2 (L5): the dQ kernel alone
    // is 4–5 % faster unspecialized (`kirc bench --kernel`, L4), but beside the specialized
    // dK/dV kernel in the program it is not; without causal masking too (296.8–301.6 against
    // 305.7–310.0 for both specialized, L5). L6 timed this row at 278.4–281.8 against
    // 255.9–258.1, matched the interpreter, ran bit for bit twice and was clean under
    // compute-sanitizer's memcheck, racecheck and synccheck, causal or not.
    //
    // The dK/dV kernel's two programs per key block (dk's accumulator and dv's, grid axis 2)
    // run as two consumers of one block (`roles`, `WsPlan::roles`: 240 registers each, beside a
    // producer warpgroup at 24) since call Q1 of 2026-12-07 (an H100, three rounds, B 4 H 8
    // S 4k, docs/gpu-results/2026-12-07-q1-h100-d256-bwd-two-consumers.txt): they read each q
    // and do stage once, the key and value blocks are filled once by the producer, and one
    // consumer's softmax runs under the other's dots. The program 366.3–389.2 TFLOP/s against
    // 304.5–308.3 with one consumer per block, causal 348.2–352.3 against 279.9–281.2; the dK/dV
    // kernel alone 1.956 ms against 2.925 (`kirc bench --kernel`), 2.137 with ping-pong turns.
    Row {
        warp_specialize: true,
        roles: true,
        ..bwd_row(|f| bwd_d256(f) && (f.causal || f.band), BWD_64_KEYS, None)
    },
    Row {
        warp_specialize: true,
        roles: true,
        ..bwd_row(bwd_d256, BWD_64_KEYS_DQ80, None)
    },
    // d128 with an additive mask or a key window on the causal bound (a band): the 64-key
    // kernel's extra score-sized tile, or its second position comparison, made ptxas 13.0 spill
    // in it (40–44 bytes with a mask, 36 with a causal window, on sm_90a); 128 keys per dK/dV
    // program on 8 warps (two warpgroups of 64 keys, as at long sequences) assemble without
    // spills, causal or not, at any length. Not timed with these features; without them the
    // two rows ran within 2 % of each other up to 4,096 queries (call B2, above).
    bwd_row(
        |f| f.half() && f.head_dim == Some(128) && (f.mask || f.band) && !f.softcap && f.dots <= 4,
        BWD_128_KEYS,
        None,
    ),
    // d128 without a mask, a soft cap or a window: dQ programs of 128 query rows over 128-key
    // blocks (table.rs, `BWD_64_KEYS_DQ128`).
    bwd_row(
        |f| f.half() && f.head_dim == Some(128) && !f.mask && !f.softcap && !f.band && f.dots <= 4,
        BWD_64_KEYS_DQ128,
        None,
    ),
    bwd_row(
        |f| {
            let dim_ok = match f.head_dim {
                Some(64 | 128) => true,
                Some(192 | 256) => !f.mask,
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
    // 359.2). Since dq_acc's padded rows and the dots issued in pairs (an H100, calls S3 and
    // S6, docs/gpu-results/2026-12-06-s1-s8-h100-atomic-gemm-tune.txt): 448.5–459 against
    // the deterministic default's 441–474 in the same calls, within the runs' spread, so the
    // deterministic mode stays the default.
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
    // sm_100a, 16-bit d64, both modes: the op's tiles (64-query steps, 32 keys) with
    // `.minnctapersm 2`. Without a directive ptxas 13.0 capped these 4-warp kernels at 96–128
    // registers by its own occupancy target and spilled: the atomic mode 4 bytes (8 causal
    // with a key length), and with pairs of features 12–20 bytes (a mask with a KV offset in
    // the atomic mode, a soft cap with a window), also in 16-key tiles. With the directive
    // they take 114–154 registers and spill in no combination of the five features, causal
    // or not, in either mode (a ptxas sweep; tests/tests/attention_spills.rs). Speed not
    // measured: no sm_100a GPU here.
    Row {
        targets: &[Target::Sm100a],
        min_blocks: Some(2),
        ..tile_row(
            Class::AttentionBwd,
            |f| f.half() && f.head_dim == Some(64),
            &[],
        )
    },
    // 16-bit d96 on sm_90a and sm_100a, the op's tiles with `.minnctapersm 2`: ptxas 13.0
    // capped the deterministic dQ kernel (4 warps, no directive: its shared memory allows more
    // blocks) at 168 registers for three blocks per SM and spilled 4–12 bytes with a mask, a
    // window on the causal bound, or those with key lengths or a KV offset. Two blocks leave it
    // 255 registers; it takes about 172 and no combination of features spills (a ptxas sweep,
    // both modes, causal or not). Speed not measured.
    Row {
        targets: &[Target::Sm90a, Target::Sm100a],
        min_blocks: Some(2),
        ..tile_row(
            Class::AttentionBwd,
            |f| f.half() && f.head_dim == Some(96),
            &[],
        )
    },
    // sm_100a, the atomic mode with a soft cap at d128: 12 bytes of spills in the op's tiles;
    // 16 keys per dQ block and per dK/dV program assemble without spills with every
    // combination of features, causal or not. Speed not measured.
    Row {
        targets: &[Target::Sm100a],
        ..tile_row(
            Class::AttentionBwd,
            |f| f.half() && f.head_dim == Some(128) && f.dots == 5 && f.softcap,
            BWD_16_KEYS,
        )
    },
    // 16-bit d256 with an additive mask or a soft cap, on every target: in the op's tiles
    // ptxas 13.0 spilled with a soft cap alone on sm_100a (12–20 bytes), with a soft cap and a
    // key length or a KV offset on sm_80 (24), with a mask and a key length on sm_100a (4),
    // with a mask, a soft cap and a causal window on sm_80 and sm_90a (8, 24) and with every
    // feature in sm_80's dQ kernel (4). 16 keys per dQ block and per dK/dV program (64-query
    // steps) assembled without spills in both modes in every case swept (each feature alone,
    // every pair, and those triples), on all four targets; 32-query steps spilled 28 bytes in
    // the atomic mode with a mask and a soft cap. Speed not measured.
    tile_row(
        Class::AttentionBwd,
        |f| f.half() && f.head_dim == Some(256) && (f.mask || f.softcap),
        BWD_16_KEYS,
    ),
    // f32 d96 in the atomic mode: the op's 32 keys per dK/dV program spilled 4–12 bytes on
    // sm_80 with a soft cap and a mask or a causal window (255 registers); 16 keys per program
    // take about 211 and no combination of features spills on any target (a ptxas sweep).
    // Speed not measured (f32 attention is the parity path).
    tile_row(
        Class::AttentionBwd,
        |f| f.dtype == "f32" && f.head_dim == Some(96) && f.dots == 5,
        &[(Role::KvBlock, 16)],
    ),
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
];

/// The d256 backward rows' condition: 16-bit, no mask or soft cap, at most four dots (the
/// deterministic mode).
fn bwd_d256(f: &Features) -> bool {
    f.half() && wide(f) && !f.mask && !f.softcap && f.dots <= 4
}

/// The head dims the d256 rows take: 256, and 192, whose tiles are smaller in the same layouts
/// (a multiple of 64 columns, as tensor copies into wgmma's 128-byte swizzle need; 160 is not),
/// so the d256 schedules fit its shared memory and registers with room to spare. At d192 on an
/// H100 (call Q4 of 2026-12-07, B 4 H 8 S 4k) they ran the forward at 1.86× the op's tiles
/// (0.97× cuDNN) and the backward at 2.6× (0.87× cuDNN); docs/configs.md.
fn wide(f: &Features) -> bool {
    matches!(f.head_dim, Some(192 | 256))
}
