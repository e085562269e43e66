//! Fusion decided by what the kernels' schedules will be (`kir_compiler::internal::cost`): the compile
//! driver lowers both the fused and the unfused program and keeps the one the model estimates
//! faster; `--fuse` and `--no-fuse` (`Fusion::On` / `Off`) override it. Also the work counters
//! the model rests on, against independent arithmetic on ragged shapes.

use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::options::Fusion;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_compiler::internal::traffic;
use kir_tests::Rng;

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
