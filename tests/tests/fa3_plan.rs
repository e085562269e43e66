//! The FA3 planner's feature, as kir expresses it: the tile plan is a specialization
//! (`BLOCK_M`, `BLOCK_N` of attention_fwd), the interpreter proves the planned configuration
//! computes attention exactly as the f64 oracle does, and the shared-memory budget of a plan is
//! checked at compile time with a clear error instead of a launch failure; FA3's d128 tile of
//! 176 keys and its d256 tile of 80 are exact on the interpreter and take wgmma for both dots
//! on sm_90a. Stage counts and warp roles come with the scheduling passes.

use kir_backends::interp::HostArg;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_tests::oracle::{self, AttnShape};
use kir_tests::F64s;
use kir_tests::{compare, dtype, run_op, t, tolerance, Rng};

/// Runs attention_fwd with `defs` (and `DTYPE` `dt`) on fresh random inputs of shape `s` (values
/// up to 3 in magnitude) and compares o and lse with the f64 oracle.
fn check_against_oracle(
    what: &str,
    s: AttnShape,
    dt_name: &str,
    defs: &[(&str, &str)],
    causal: bool,
    rng: &mut Rng,
) {
    let dt = dtype(dt_name);
    let q = rng.tensor(s.b * s.hq * s.sq * s.d, 3.0, dt);
    let k = rng.tensor(s.b * s.hkv * s.sk * s.d, 3.0, dt);
    let v = rng.tensor(s.b * s.hkv * s.sk * s.d, 3.0, dt);
    let scale = (1.0 / (s.d as f64).sqrt()) as f32 as f64;
    let (o_ref, lse_ref) = oracle::attention(s, &q, &k, &v, scale, causal);
    let hd = s.d.to_string();
    let mut all: Vec<(&str, &str)> = vec![
        ("DTYPE", dt_name),
        ("HEAD_DIM", &hd),
        ("CAUSAL", if causal { "1" } else { "0" }),
    ];
    all.extend_from_slice(defs);
    let out = run_op(
        "attention_fwd",
        &all,
        vec![
            ("q", t(dt, &[s.b, s.hq, s.sq, s.d], q)),
            ("k", t(dt, &[s.b, s.hkv, s.sk, s.d], k)),
            ("v", t(dt, &[s.b, s.hkv, s.sk, s.d], v)),
            ("scale", HostArg::Scalar(scale)),
        ],
    );
    compare(
        &format!("{what} {s:?}: o"),
        out["o"].data.f64s(),
        &o_ref,
        tolerance(dt),
    );
    compare(
        &format!("{what}: lse"),
        out["lse"].data.f64s(),
        &lse_ref,
        (1e-5, 1e-4),
    );
}

/// A GQA problem at head dim 128 (two query heads on one kv head) with ragged lengths drawn from
/// `sq` and `sk`.
fn ragged_d128(rng: &mut Rng, sq: (usize, usize), sk: (usize, usize)) -> AttnShape {
    ragged(rng, 128, sq, sk)
}

/// A GQA problem at head dim `d` (two query heads on one kv head) with ragged lengths drawn from
/// `sq` and `sk`.
fn ragged(rng: &mut Rng, d: usize, sq: (usize, usize), sk: (usize, usize)) -> AttnShape {
    AttnShape {
        b: 1,
        hq: 2,
        hkv: 1,
        sq: 1 + rng.range(sq.0, sq.1),
        sk: 1 + rng.range(sk.0, sk.1),
        d,
    }
}

#[test]
fn fa3_tile_plan_is_exact_on_the_interpreter() {
    for causal in [false, true] {
        let mut rng = Rng::fresh("fa3 plan 128x128");
        let s = ragged_d128(&mut rng, (130, 300), (130, 300));
        let tile = [("BLOCK_M", "128"), ("BLOCK_N", "128")];
        check_against_oracle(
            &format!("fa3 plan causal={causal}"),
            s,
            "f16",
            &tile,
            causal,
            &mut rng,
        );
    }
}

#[test]
fn shared_memory_budget_is_a_compile_error() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let d = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    };
    // The 128×128 plan for d = 128 fits and META reports its shared memory.
    let ok = compile(
        src,
        &d(&[
            ("DTYPE", "f16"),
            ("HEAD_DIM", "128"),
            ("BLOCK_M", "128"),
            ("BLOCK_N", "128"),
        ]),
        None,
        Target::Sm90a,
        Emit::Ptx,
    )
    .expect("the 128x128 plan compiles");
    let bytes = ok.meta.expect("meta")["kernels"][0]["shared_bytes"]
        .as_u64()
        .expect("shared_bytes");
    assert!(bytes > 0 && bytes <= 232_448, "shared_bytes {bytes}");
    // A plan that cannot fit is refused at compile time, naming the kernel and the numbers.
    let err = compile(
        src,
        &d(&[("HEAD_DIM", "256"), ("BLOCK_M", "256"), ("BLOCK_N", "256")]),
        None,
        Target::Sm90a,
        Emit::Ptx,
    )
    .err()
    .expect("a 256x256 plan at d = 256 must not fit");
    let msg = err.to_string();
    let rendered = match &err {
        kir_compiler::internal::compile::CompileError::Source(d) => {
            d.render("attention_fwd.kir", src)
        }
        kir_compiler::internal::compile::CompileError::Plain(m) => m.clone(),
    };
    assert!(
        rendered.contains("attention_fwd")
            && rendered.contains("232448")
            && rendered.contains("bytes of shared memory"),
        "{msg}\n{rendered}"
    );
    assert!(
        rendered.contains("attention_fwd.kir:"),
        "the error is located: {rendered}"
    );
}

/// Causal attention with its programs walking groups of GROUP_H heads (the sm_90a d64 causal
/// configuration takes 2) still computes every query block of every head exactly once: GQA with
/// 2 batches of 3 query heads (6 programs along the head axis, so groups of 4 leave a partial
/// group of 2), ragged lengths, against the f64 oracle.
#[test]
fn causal_head_groups_compute_every_block_once() {
    for group in ["2", "4", "5"] {
        let mut rng = Rng::fresh(&format!("causal head groups {group}"));
        let s = AttnShape {
            b: 2,
            hq: 3,
            hkv: 1,
            sq: 1 + rng.range(40, 130),
            sk: 1 + rng.range(40, 130),
            d: 64,
        };
        let defs = [("BLOCK_M", "16"), ("BLOCK_N", "32"), ("GROUP_H", group)];
        check_against_oracle(
            &format!("GROUP_H {group}"),
            s,
            "bf16",
            &defs,
            true,
            &mut rng,
        );
    }
}

/// attention_fwd with `defs` compiled for sm_90a, warp-specialized or not: both dots take wgmma,
/// both rings are TMA rings, and the pinned ptxas assembles it without spills. Returns the PTX.
fn wgmma_tile_ptx(defs: &[(&str, &str)], ws: bool) -> String {
    use kir_backends::ptx::report::DotPath;
    use kir_compiler::internal::pipeline;
    use kir_compiler::internal::plan::{CompilePlan, Flags};
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let defs: Vec<(String, String)> = defs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let flags = Flags {
        warp_specialize: Some(ws),
        ..Flags::default()
    };
    let what = format!("{defs:?}, ws={ws}");
    let plan = CompilePlan::resolve(src, &defs, Target::Sm90a, Emit::Ptx, flags)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = pipeline::compile(src, &plan).unwrap_or_else(|e| panic!("{what}: {e}"));
    let paths: Vec<DotPath> = out.reports[0].dots.iter().map(|d| d.path).collect();
    assert_eq!(paths, [DotPath::Wgmma; 2], "{what}");
    assert!(
        out.text.contains("cp.async.bulk.tensor"),
        "{what}: the rings are TMA rings"
    );
    let log = kir_backends::nvrtc::assemble(&kir_tests::pinned_ptxas(), &out.text, "sm_90a")
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .1;
    kir_tests::ptxas::assert_no_spills(&log, &what);
    out.text
}

/// d256's FA3 tile (128×80, the sm_90a default without causal masking, a mask or a soft cap):
/// exact on the interpreter, causal or not, and both dots on wgmma without spills, plain or
/// warp-specialized.
#[test]
fn d256_key_blocks_of_80_take_wgmma_and_are_exact() {
    let tile = [("BLOCK_M", "128"), ("BLOCK_N", "80")];
    for causal in [false, true] {
        let mut rng = Rng::fresh("fa3 plan d256 128x80");
        let s = ragged(&mut rng, 256, (100, 300), (170, 400));
        check_against_oracle(
            &format!("d256 128x80 causal={causal}"),
            s,
            "bf16",
            &tile,
            causal,
            &mut rng,
        );
    }
    let defs = [tile[0], tile[1], ("HEAD_DIM", "256")];
    for ws in [false, true] {
        let ptx = wgmma_tile_ptx(&defs, ws);
        assert!(
            ptx.contains("m64n80k16") && ptx.contains("m64n256k16"),
            "ws={ws}: the two wgmma shapes"
        );
    }
}

/// FlashAttention-3's d128 tile, 128 queries by 176 keys: a key block that is not a multiple of
/// 64. On the interpreter it computes attention as the oracle does (ragged key lengths past two
/// and three blocks, causal or not); on sm_90a both dots take wgmma, P·V's K of 176 keys along
/// the rows of the N-major v tile (11 slices of 16, the next 64 columns 176·128 bytes further),
/// both rings are TMA rings in the 128B-swizzled layout, and the kernel assembles without
/// spills, warp-specialized or not, with the pinned ptxas. (Before, P·V fell back to mma.sync
/// with v in the padded layout: wgmma took K only in whole 64-column blocks.)
#[test]
fn key_blocks_of_176_take_wgmma_and_are_exact() {
    let tile = [("BLOCK_M", "128"), ("BLOCK_N", "176")];
    for causal in [false, true] {
        let mut rng = Rng::fresh("fa3 plan 128x176");
        let s = ragged_d128(&mut rng, (100, 300), (360, 600));
        check_against_oracle(
            &format!("128x176 causal={causal}"),
            s,
            "bf16",
            &tile,
            causal,
            &mut rng,
        );
    }
    for ws in [false, true] {
        let ptx = wgmma_tile_ptx(&tile, ws);
        assert!(
            ptx.contains("m64n128k16") && ptx.contains("m64n176k16"),
            "ws={ws}: the two wgmma shapes"
        );
        // P·V: 11 slices of 16 keys per warpgroup and dot, each its own wgmma.
        let pv = ptx
            .matches("wgmma.mma_async.sync.aligned.m64n128k16")
            .count();
        assert!(pv >= 11 && pv % 11 == 0, "ws={ws}: {pv} P·V slices");
    }
}
