//! Fusion decided by what the kernels' schedules will be (`kir_compiler::internal::cost`): the compile
//! driver lowers both the fused and the unfused program and keeps the one the model estimates
//! faster; `--fuse` and `--no-fuse` (`Fusion::On` / `Off`) override it. Also the work counters
//! the model rests on, against independent arithmetic on ragged shapes.

use kir_backends::interp::{self, HostArg};
use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::options::Fusion;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_compiler::internal::traffic;
use kir_ir::Dtype;
use kir_tests::{compare, round, t, tolerance, Rng};
use std::collections::BTreeMap;

fn source(name: &str) -> String {
    let path = format!("{}/in/fusion/{name}.kir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The kernel names of a compilation's META, in launch order, and its fusion note.
fn compiled(src: &str, target: Target, fusion: Fusion) -> (Vec<String>, Option<String>) {
    let flags = Flags {
        fusion,
        ..Flags::default()
    };
    let plan = CompilePlan::resolve(src, &[], target, Emit::Ptx, flags).expect("plan");
    let c = pipeline::compile(src, &plan).expect("compile");
    let names = c.meta.as_ref().expect("meta")["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .map(|k| k["name"].as_str().expect("name").to_string())
        .collect();
    (names, c.fusion)
}

#[test]
fn rmsnorm_gemm_stays_unfused_where_fusion_loses_the_operand_ring() {
    let src = source("rmsnorm_gemm");
    for target in [Target::Sm80, Target::Sm90a] {
        let (names, note) = compiled(&src, target, Fusion::Auto);
        assert_eq!(names, ["rmsnorm", "matmul"], "{target:?}");
        let note = note.expect("a fusion note");
        assert!(note.starts_with("not taken"), "{target:?}: {note}");
        assert!(note.contains("off the rings"), "{target:?}: {note}");
        // --fuse lowers the fused program anyway.
        let (names, note) = compiled(&src, target, Fusion::On);
        assert_eq!(names, ["rmsnorm_matmul"], "{target:?}");
        assert_eq!(note.as_deref(), Some("taken (--fuse)"));
    }
}

#[test]
fn gate_up_swiglu_fuses_where_the_model_says_it_pays_and_no_fuse_keeps_three_kernels() {
    let src = source("gate_up_swiglu");
    let (names, note) = compiled(&src, Target::Sm90a, Fusion::Auto);
    let note = note.expect("a fusion note");
    // The choice follows the estimates in the note: whichever is smaller was lowered.
    let ms = |tag: &str| -> f64 {
        let at = note.find(tag).unwrap_or_else(|| panic!("{tag} in {note}")) + tag.len();
        note[at..]
            .split(' ')
            .next()
            .expect("a number")
            .parse()
            .expect("ms")
    };
    let (fused, unfused) = (ms(": fused "), ms(", unfused "));
    if fused <= unfused {
        assert_eq!(names.len(), 1, "{note}");
        assert!(note.starts_with("taken"), "{note}");
    } else {
        assert_eq!(names.len(), 3, "{note}");
        assert!(note.starts_with("not taken"), "{note}");
    }
    let (names, note) = compiled(&src, Target::Sm90a, Fusion::Off);
    assert_eq!(names, ["gate_proj", "up_proj", "swiglu"]);
    assert_eq!(note.as_deref(), Some("not run (--no-fuse)"));
}

/// The kernel that fusion makes of the gate and up projections (two dots sharing loads of x,
/// then SwiGLU) is configured by what it is, not by the tiles of the projections' rows: it takes
/// the two-accumulator 128×128 row (warp-specialized, persistent), the cost model weighs that
/// schedule, and the scheduled kernel matches an independent f64 oracle on the interpreter on a
/// ragged problem (gate and up rounded to bf16 as the program stores them). A `-D` of a tile the
/// row sets keeps the row out, as for any kernel: the fused kernel keeps the plan it had.
#[test]
fn the_fused_gate_up_kernel_takes_the_row_of_its_own_structure_and_stays_correct() {
    let src = source("gate_up_swiglu");
    for fusion in [Fusion::Auto, Fusion::On] {
        let flags = Flags {
            fusion,
            ..Flags::default()
        };
        let plan = CompilePlan::resolve(&src, &[], Target::Sm90a, Emit::Ptx, flags).expect("plan");
        let c = pipeline::compile(&src, &plan).expect("compile");
        let note = c.fusion.expect("a fusion note");
        for want in [
            "taken",
            "the fused module's configuration: kernel `gate_proj_up_proj_swiglu`: sm_90a dot-loop row",
            "BLOCK_M=128 (M tile), BLOCK_N=128 (N tile), BLOCK_K=64 (K tile)",
            "warps 8, stages 4, warp-specialized, persistent",
            "2 dots sharing A",
        ] {
            assert!(note.contains(want), "{want}\n{note}");
        }
        if fusion == Fusion::Auto {
            assert!(
                note.contains("@gate_proj_up_proj_swiglu: 2.7e11 FLOP on wgmma (warp-specialized)"),
                "{note}"
            );
        }
        assert!(c.text.contains("setmaxnreg") && c.text.contains("wgmma.mma_async"));
        let dt = Dtype::Bf16;
        let mut rng = Rng::fresh("fused gate_up");
        let (m, k, n) = (rng.range(130, 200), rng.range(65, 200), rng.range(129, 300));
        let x = rng.tensor(m * k, 3.0, dt);
        let wg = rng.tensor(k * n, 1.0, dt);
        let wu = rng.tensor(k * n, 1.0, dt);
        let args: BTreeMap<String, HostArg> = [
            ("x".to_string(), t(dt, &[m, k], x.clone())),
            ("wg".to_string(), t(dt, &[k, n], wg.clone())),
            ("wu".to_string(), t(dt, &[k, n], wu.clone())),
        ]
        .into_iter()
        .collect();
        let out = interp::run(&c.module, &args).expect("runs");
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let (mut g, mut u) = (0.0, 0.0);
                for kk in 0..k {
                    g += x[i * k + kk] * wg[kk * n + j];
                    u += x[i * k + kk] * wu[kk * n + j];
                }
                let (g, u) = (round(dt, g), round(dt, u));
                want[i * n + j] = round(dt, g / (1.0 + (-g).exp()) * u);
            }
        }
        let got = out["out"].data.as_f64().expect("f64");
        compare(
            &format!("fused gate_up {m}x{n}x{k}"),
            got,
            &want,
            tolerance(dt),
        );
    }
    // The user's tile stands: no row for the fused kernel, which keeps the user's 64 columns
    // and no warp roles.
    let d = [("BLOCK_N".to_string(), "64".to_string())];
    let flags = Flags {
        fusion: Fusion::On,
        ..Flags::default()
    };
    let plan = CompilePlan::resolve(&src, &d, Target::Sm90a, Emit::Ptx, flags).expect("plan");
    let c = pipeline::compile(&src, &plan).expect("compile");
    assert_eq!(c.fusion.as_deref(), Some("taken (--fuse)"));
    assert!(c.text.contains("_BLOCK_N_64_") && !c.text.contains("setmaxnreg"));
}

#[test]
fn a_program_with_nothing_to_fuse_has_no_note() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    let (names, note) = compiled(src, Target::Sm90a, Fusion::Auto);
    assert_eq!(names.len(), 1);
    assert_eq!(note, None);
}

/// ⌈a / b⌉.
fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

#[test]
fn dot_flops_and_footprint_count_the_issued_tiles_and_the_bound_tensors() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    let mut rng = Rng::fresh("fusion_cost counters");
    for _ in 0..6 {
        let (bm, bn, bk) = (
            [16, 32, 64][rng.range(0, 3)],
            [16, 32, 64][rng.range(0, 3)],
            [16, 32][rng.range(0, 2)],
        );
        let defines: Vec<(String, String)> = [("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk)]
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let m = pipeline::output(src, &defines).expect("specialize");
        let k = m.kernels.values().next().expect("a kernel");
        let (bt, mm, nn, kk) = (
            rng.range(1, 4) as i64,
            rng.range(1, 301) as i64,
            rng.range(1, 301) as i64,
            rng.range(1, 301) as i64,
        );
        let dim = |n: &str| match n {
            "Bt" => Some(bt),
            "M" => Some(mm),
            "N" => Some(nn),
            "K" => Some(kk),
            _ => None,
        };
        // Every program runs every K block on whole tiles.
        let want = bt * cdiv(mm, bm) * cdiv(nn, bn) * cdiv(kk, bk) * 2 * bm * bn * bk;
        let got = traffic::kernel_dot_flops(k, &dim).expect("flops");
        assert_eq!(got as i64, want, "{bm}x{bn}x{bk} on {bt}x{mm}x{nn}x{kk}");
        // a, b and c, bf16, each once.
        let bytes = 2 * bt * (mm * kk + kk * nn + mm * nn);
        assert_eq!(
            traffic::kernel_footprint(k, &dim).expect("footprint") as i64,
            bytes
        );
    }
}
