//! attention_fwd and attention_bwd at their defaults assemble without spills: every head dim
//! kir takes from 64 to 384 (64, 96, 128, 160, 192, 256, 384) in f32, f16 and bf16, causal or
//! not, on all four targets, with the pinned ptxas (13.0). The ops' own tiles spilled for f32
//! above head dim 128 and for 16-bit at 384 (1,208 bytes in the backward at f32 d256 on
//! sm_90a, 2,036 in the forward at f32 d384); the rows of compiler/src/configs/attention_rows.rs for
//! them ("The forward where the op's 64×64 tiles spill", "Attention backward where the op's
//! tiles spill") choose smaller tiles, and this test fails when one spills again. Needs
//! `KIR_PTXAS`. The atomic mode (`DETERMINISTIC=0`) is checked where it spilled (f32 d384, and
//! 16-bit d64 on sm_100a) and at the head dims that have sm_90a rows, and features of the
//! backward, alone or together, where a sweep found spills (an additive mask, a window, key
//! lengths, a KV offset, a soft cap).

use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};

const HEAD_DIMS: [&str; 7] = ["64", "96", "128", "160", "192", "256", "384"];

/// The kernels of ptxas's report `log` that spill, with their spill lines, and ptxas's
/// performance-loss notes (`kir_tests::ptxas::performance_losses`: wgmma serialized for want of
/// registers, no spill but a slow kernel).
fn spills(log: &str) -> Vec<String> {
    let mut out: Vec<String> = kir_tests::ptxas::performance_losses(log)
        .into_iter()
        .map(String::from)
        .collect();
    let mut kernel = "";
    let mut lines = 0;
    for line in log.lines() {
        if let Some(k) = line.split("Compiling entry function '").nth(1) {
            kernel = k.split('\'').next().unwrap_or("");
        }
        if line.contains("bytes spill stores") {
            lines += 1;
            if !(line.contains(" 0 bytes spill stores") && line.contains(" 0 bytes spill loads")) {
                out.push(format!("{kernel}: {}", line.trim()));
            }
        }
    }
    assert!(lines > 0, "no spill lines in ptxas's report:\n{log}");
    out
}

fn check(op: &str, dtype: &str) {
    check_dims(op, dtype, &HEAD_DIMS, &[]);
}

/// `op` in `dtype` at each of `dims`, causal or not (causal only with a KV offset, which needs
/// it), with `extra` defines, on every target.
fn check_dims(op: &str, dtype: &str, dims: &[&str], extra: &[(&str, &str)]) {
    let src = kir_compiler::internal::oplib::builtin(op).expect("a built-in op");
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)")
    });
    let mut bad = vec![];
    for &d in dims {
        for causal in ["0", "1"] {
            if causal == "0" && extra.contains(&("KV_OFFSET", "1")) {
                continue;
            }
            let defs: Vec<(String, String)> =
                [("DTYPE", dtype), ("HEAD_DIM", d), ("CAUSAL", causal)]
                    .iter()
                    .chain(extra)
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect();
            for target in Target::ALL {
                let what = format!(
                    "{op} {dtype} d{d} causal {causal} {extra:?} {}",
                    target.name()
                );
                let c = compile(src, &defs, None, target, Emit::Ptx)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let (_, log) = kir_backends::nvrtc::assemble(&ptxas, &c.text, target.name())
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                bad.extend(spills(&log).into_iter().map(|s| format!("{what}: {s}")));
            }
        }
    }
    assert!(bad.is_empty(), "spills:\n{}", bad.join("\n"));
}

#[test]
fn backward_f32_defaults_do_not_spill() {
    check("attention_bwd", "f32");
}

#[test]
fn backward_f16_defaults_do_not_spill() {
    check("attention_bwd", "f16");
}

#[test]
fn backward_bf16_defaults_do_not_spill() {
    check("attention_bwd", "bf16");
}

#[test]
fn forward_f32_defaults_do_not_spill() {
    check("attention_fwd", "f32");
}

#[test]
fn forward_16_bit_defaults_do_not_spill() {
    check("attention_fwd", "f16");
    check("attention_fwd", "bf16");
}

/// The atomic mode's f32 dK/dV kernel at d384 (8 warps, one block per SM for its shared
/// memory) spilled 100 bytes on sm_120a, where ptxas capped it at 128 registers as if two
/// blocks could share an SM; `.minnctapersm 1` (backends/src/ptx/lower/kernel.rs) lets it
/// take 150.
#[test]
fn backward_f32_atomic_mode_at_the_largest_head_dims_does_not_spill() {
    check_dims(
        "attention_bwd",
        "f32",
        &["256", "384"],
        &[("DETERMINISTIC", "0")],
    );
}

/// The atomic mode in 16 bits at the head dims with sm_90a rows (64, 128, 256), causal or not,
/// on every target: the d64 dK/dV kernel spilled 4 bytes on sm_100a in the op's tiles (128
/// registers: ptxas fitted four 4-warp blocks where shared memory allows three); the sm_100a
/// row of compiler/src/configs/attention_rows.rs states `.minnctapersm 2` there.
#[test]
fn backward_16_bit_atomic_mode_does_not_spill() {
    for dtype in ["bf16", "f16"] {
        check_dims(
            "attention_bwd",
            dtype,
            &["64", "128", "256"],
            &[("DETERMINISTIC", "0")],
        );
    }
}

/// The backward with `features` on (bf16, every target, causal or not), where a sweep found
/// spills: of every feature alone (both modes, causal or not, head dims 64 to 384, bf16, four
/// targets), on sm_90a at d128 the 64-key dK/dV kernel with an additive mask (40–44 bytes) or a
/// causal window (36), and on sm_100a the atomic mode at d64 with a key length (4–8) and at
/// d128 with a soft cap (12), and the deterministic mode at d256 with a soft cap (12–20); the
/// tests below name the cases of later sweeps. The rows of
/// compiler/src/configs/attention_rows.rs that fix them are checked here.
fn check_features(dim: &str, features: &[&str], deterministic: &str) {
    check_features_in("bf16", dim, features, deterministic);
}

/// [`check_features`] in `dtype`.
fn check_features_in(dtype: &str, dim: &str, features: &[&str], deterministic: &str) {
    let extra: Vec<(&str, &str)> = features
        .iter()
        .map(|&f| (f, "1"))
        .chain([("DETERMINISTIC", deterministic)])
        .collect();
    check_dims("attention_bwd", dtype, &[dim], &extra);
}

#[test]
fn backward_d128_with_a_mask_does_not_spill() {
    check_features("128", &["MASK"], "1");
}

#[test]
fn backward_d128_with_a_window_does_not_spill() {
    check_features("128", &["WINDOW"], "1");
}

#[test]
fn backward_atomic_d64_with_key_lengths_does_not_spill() {
    check_features("64", &["VARLEN"], "0");
}

#[test]
fn backward_atomic_d128_with_a_soft_cap_does_not_spill() {
    check_features("128", &["SOFTCAP"], "0");
}

#[test]
fn backward_d256_with_a_soft_cap_does_not_spill() {
    check_features("256", &["SOFTCAP"], "1");
}

/// 16-bit d256 with a mask, a soft cap and a window together (causal or not, both modes, every
/// target): the op's tiles spilled 8 bytes on sm_80 and 24 on sm_90a with the causal window,
/// before the row of 16-key tiles for a mask or a soft cap at d256.
#[test]
fn backward_d256_with_a_mask_a_soft_cap_and_a_window_does_not_spill() {
    for deterministic in ["1", "0"] {
        check_features("256", &["MASK", "SOFTCAP", "WINDOW"], deterministic);
    }
}

/// Pairs of features at 16-bit d256 where the sweep of every pair found spills in the op's
/// tiles: a soft cap with a key length (24 bytes on sm_80) and a mask with a key length (4 on
/// sm_100a).
#[test]
fn backward_feature_pairs_do_not_spill() {
    for pair in [["SOFTCAP", "VARLEN"], ["MASK", "VARLEN"]] {
        check_features("256", &pair, "1");
    }
}

/// Pairs at 16-bit d64 that spilled on sm_100a, where ptxas 13.0 capped the 4-warp kernels at
/// 96–128 registers: a mask with a KV offset in the atomic mode (20 bytes, also in 16-key
/// tiles) and a soft cap with a window in the deterministic mode (12). The sm_100a row's
/// `.minnctapersm 2` lets them take up to 154.
#[test]
fn backward_d64_feature_pairs_do_not_spill() {
    check_features("64", &["MASK", "KV_OFFSET"], "0");
    check_features("64", &["WINDOW", "SOFTCAP"], "1");
}

/// A causal window with a key length and a KV offset at 16-bit d256 (deterministic): the
/// warp-specialized sm_90a kernels' consumer at 240 registers spilled 20 bytes; the one
/// consumer's budget is now what its block leaves, up to `setmaxnreg`'s 256
/// (compiler/src/passes/schedule/warp_specialize/types.rs), on every d256 row of
/// compiler/src/configs/attention_rows.rs, and the key lengths and the KV offset fit it.
#[test]
fn backward_d256_with_a_window_key_lengths_and_a_kv_offset_does_not_spill() {
    check_features("256", &["WINDOW", "VARLEN", "KV_OFFSET"], "1");
    check_features("256", &["VARLEN", "KV_OFFSET"], "1");
}

/// The d256 kernels' roles by row, causal or not, with a causal window or not: the dK/dV
/// kernel's two programs per key block (dk and dv) as two consumers of one block at 240
/// registers each (`WsPlan::roles`, since call Q1 of 2026-12-07), the dQ kernel's one consumer
/// at 256 (at 240 ptxas serialized the 80-key dQ kernel's wgmmas, call D2; causal without a
/// window ran unspecialized from call F6 to call L6 of 2026-12-07,
/// docs/history/benchmarks-log.md); an additive mask keeps the op's tiles, unspecialized.
#[test]
fn the_d256_consumers_take_their_registers_where_specialized() {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    // (features, the two kernels' consumer budgets, whether dK/dV has two consumers)
    for (features, want, roles) in [
        (&[][..], &["240;", "256;"][..], true),
        (&[("CAUSAL", "1")][..], &["240;", "256;"][..], true),
        (
            &[("CAUSAL", "1"), ("WINDOW", "1")][..],
            &["240;", "256;"][..],
            true,
        ),
        // Key lengths and a KV offset mask the key and value loads, which the producer's
        // tensor copies cannot make: one consumer per kernel (outer_split.rs).
        (&[("VARLEN", "1")][..], &["256;", "256;"][..], false),
        (
            &[("CAUSAL", "1"), ("VARLEN", "1"), ("KV_OFFSET", "1")][..],
            &["256;", "256;"][..],
            false,
        ),
        (&[("MASK", "1")][..], &[][..], false),
    ] {
        let defs: Vec<(String, String)> = [("HEAD_DIM", "256")]
            .iter()
            .chain(features)
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let ptx = compile(src, &defs, None, Target::Sm90a, Emit::Ptx)
            .unwrap_or_else(|e| panic!("{features:?}: {e}"))
            .text;
        let budgets: Vec<&str> = ptx
            .lines()
            .filter_map(|l| l.trim().strip_prefix("setmaxnreg.inc.sync.aligned.u32 "))
            .collect();
        // The dK/dV kernel (two consumers are lowered as one consumer's code), then dQ.
        assert_eq!(budgets, want, "{features:?}");
        assert_eq!(
            ptx.matches(".maxntid 384, 1, 1").count(),
            usize::from(roles),
            "{features:?}: a producer and two consumers in the dK/dV kernel's block"
        );
    }
    // Head dim 192 takes the d256 rows, two consumers included.
    for causal in ["0", "1"] {
        let defs: Vec<(String, String)> = [("HEAD_DIM", "192"), ("CAUSAL", causal)]
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let ptx = compile(src, &defs, None, Target::Sm90a, Emit::Ptx)
            .unwrap_or_else(|e| panic!("d192 causal {causal}: {e}"))
            .text;
        assert_eq!(
            ptx.matches(".maxntid 384, 1, 1").count(),
            1,
            "d192 causal {causal}: the dK/dV kernel's two consumers"
        );
    }
}

/// 16-bit d96 (the op's tiles), where ptxas 13.0 capped the deterministic dQ kernel at 168
/// registers for three blocks per SM and spilled 4–12 bytes on sm_90a and sm_100a with a mask,
/// a causal window, or those with key lengths and a KV offset; the d96 row asks for
/// `.minnctapersm 2` there.
#[test]
fn backward_d96_with_a_mask_or_a_window_does_not_spill() {
    check_features("96", &["MASK"], "1");
    check_features("96", &["WINDOW"], "1");
    check_features("96", &["MASK", "WINDOW", "VARLEN", "KV_OFFSET"], "1");
}

/// f32 d96 in the atomic mode with a soft cap and a mask or a causal window: the op's 32 keys
/// per dK/dV program spilled 4–12 bytes on sm_80; the f32 d96 row takes 16.
#[test]
fn backward_f32_atomic_d96_with_a_soft_cap_does_not_spill() {
    for pair in [["MASK", "SOFTCAP"], ["WINDOW", "SOFTCAP"]] {
        check_features_in("f32", "96", &pair, "0");
    }
}
