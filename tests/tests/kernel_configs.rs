//! Configurations kernel by kernel (compiler/src/configs.rs `kernel_configs`,
//! compiler/src/split.rs, docs/configs.md): a program whose kernels make no class together gets
//! each kernel's row by that kernel's structure, and each kernel is scheduled as it would be on
//! its own.
//!
//! - The fusion programs (tests/in/fusion): the RMSNorm kernel takes the row-reduction row, the
//!   matmuls the sm_90a dot-loop row (warp-specialized, persistent), the SwiGLU kernel the
//!   elementwise row; each kernel's PTX in the program's module is the PTX of that kernel
//!   compiled alone, with its own block size.
//! - The scheduled programs on the interpreter match f64 oracles on ragged shapes (outputs are
//!   never passed in, so nothing stale can pass).
//! - Two kernels whose rows set a shared constant to different values: the first keeps it, the
//!   second gets no row and the report says why.
//! - The built-in norms and SwiGLU are classified as row reductions and elementwise tiles; the
//!   forward norms' and SwiGLU's rows keep the ops' own defaults; the backward's dx kernels take
//!   the whole-row row (layernorm_bwd's on 8 warps in 16-bit tiles only), their final sums (a
//!   block of rows per program) no row.

use kir_backends::interp;
use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::options::Fusion;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::Dtype;
use kir_tests::{compare, round, t, tolerance, Rng};
use std::collections::BTreeMap;

fn source(name: &str) -> String {
    let path = format!("{}/in/fusion/{name}.kir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn unfused() -> Flags {
    Flags {
        fusion: Fusion::Off,
        ..Flags::default()
    }
}

/// The `.entry` of `symbol` in PTX `text`, from its line to the `}` closing its body.
fn entry<'a>(text: &'a str, symbol: &str) -> &'a str {
    let at = text
        .find(&format!(".entry {symbol}("))
        .unwrap_or_else(|| panic!("no entry {symbol}"));
    let rest = &text[at..];
    let end = rest.find("\n}\n").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

#[test]
fn programs_are_configured_kernel_by_kernel() {
    let cases: [(&str, &[(&str, &str)]); 2] = [
        (
            "rmsnorm_gemm",
            &[
                ("rmsnorm", "row-reduction row: BLOCK=1024 (column block)"),
                (
                    "matmul",
                    "dot-loop row: BLOCK_M=128 (M tile), BLOCK_N=256 (N tile)",
                ),
            ],
        ),
        (
            "gate_up_swiglu",
            &[
                (
                    "gate_proj",
                    "dot-loop row: BLOCK_M=128 (M tile), BLOCK_N=256 (N tile)",
                ),
                ("up_proj", "dot-loop row: BLOCK_M=128"),
                (
                    "swiglu",
                    "elementwise row: BLOCK_R=4 (row block), BLOCK_C=1024",
                ),
            ],
        ),
    ];
    for (name, rows) in cases {
        let src = source(name);
        let plan =
            CompilePlan::resolve(&src, &[], Target::Sm90a, Emit::Ptx, unfused()).expect("plan");
        let names: Vec<&str> = plan
            .kernel_configs
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        let want: Vec<&str> = rows.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, want, "{name}");
        let report = plan.config_report();
        for (k, row) in rows {
            let line = format!("configuration: kernel `{k}`: sm_90a {row}");
            assert!(report.contains(&line), "{line}\n{report}");
        }
        for (c, v) in [("BLOCK_M", "128"), ("BLOCK_N", "256"), ("BLOCK_K", "64")] {
            assert!(
                plan.defines.contains(&(c.to_string(), v.to_string())),
                "{name}: {c}={v} in {:?}",
                plan.defines
            );
        }
        let out = pipeline::compile(&src, &plan).expect("compiles");
        let meta = out.meta.as_ref().expect("meta");
        let kernels = meta["kernels"].as_array().expect("kernels");
        assert_eq!(kernels.len(), rows.len(), "{name}");
        for k in kernels {
            let kname = k["name"].as_str().expect("name");
            let symbol = k["symbol"].as_str().expect("symbol");
            // The kernel compiled alone: the same code and block.
            let one = pipeline::compile(&src, &plan.clone().with_kernel(Some(kname)))
                .expect("one kernel compiles");
            let one_meta = &one.meta.as_ref().expect("meta")["kernels"][0];
            assert_eq!(one_meta["symbol"], k["symbol"], "{kname}");
            assert_eq!(one_meta["block"], k["block"], "{kname}");
            assert_eq!(
                entry(&out.text, symbol),
                entry(&one.text, symbol),
                "{kname}"
            );
            let dot = rows
                .iter()
                .any(|(r, row)| *r == kname && row.starts_with("dot"));
            let threads = k["block"][0].as_u64().expect("threads");
            // The matmuls: a producer warpgroup and two consumer warpgroups.
            assert_eq!(threads == 384, dot, "{kname}: {threads} threads");
        }
        let scheduled = kir_ir::text::print(&out.module);
        assert!(scheduled.contains("warp_specialize"), "{scheduled}");
        assert!(out.text.contains("wgmma.mma_async"), "{name}: wgmma");
    }
}

/// `c = (x · rstd · w rounded) · wm`, rstd = 1 / sqrt(mean(x²) + eps), rounded like the
/// program's bf16 temporary.
fn rmsnorm_gemm_oracle(x: &[f64], w: &[f64], wm: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let eps = 1e-5;
    let mut y = vec![0.0; m * k];
    for i in 0..m {
        let ss: f64 = (0..k).map(|j| x[i * k + j] * x[i * k + j]).sum();
        let r = 1.0 / (ss / k as f64 + eps).sqrt();
        for j in 0..k {
            y[i * k + j] = round(Dtype::Bf16, x[i * k + j] * r * w[j]);
        }
    }
    matmul(&y, wm, m, k, n)
}

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum();
        }
    }
    c
}

#[test]
fn the_scheduled_programs_stay_correct() {
    let dt = Dtype::Bf16;
    let mut rng = Rng::fresh("kernel configs");
    let rg = source("rmsnorm_gemm");
    let gs = source("gate_up_swiglu");
    let compiled = |src: &str| {
        let plan =
            CompilePlan::resolve(src, &[], Target::Sm90a, Emit::Ptx, unfused()).expect("plan");
        pipeline::compile(src, &plan).expect("compiles").module
    };
    let (rgm, gsm) = (compiled(&rg), compiled(&gs));
    for (m, k, n) in [(130, 96, 70), (1, 33, 5), (257, 1100, 129)] {
        let x = rng.tensor(m * k, 3.0, dt);
        let w = rng.tensor(k, 2.0, dt);
        let wm = rng.tensor(k * n, 2.0, dt);
        let args: BTreeMap<String, interp::HostArg> = [
            ("x".to_string(), t(dt, &[m, k], x.clone())),
            ("w".to_string(), t(dt, &[k], w.clone())),
            ("wm".to_string(), t(dt, &[k, n], wm.clone())),
            ("eps".to_string(), interp::HostArg::Scalar(1e-5)),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&rgm, &args).expect("runs");
        let want: Vec<f64> = rmsnorm_gemm_oracle(&x, &w, &wm, m, k, n)
            .into_iter()
            .map(|v| round(dt, v))
            .collect();
        let c = res["c"].data.as_f64().expect("f64");
        compare(
            &format!("rmsnorm_gemm {m}x{k}x{n}"),
            c,
            &want,
            tolerance(dt),
        );

        let wg = rng.tensor(k * n, 2.0, dt);
        let args: BTreeMap<String, interp::HostArg> = [
            ("x".to_string(), t(dt, &[m, k], x.clone())),
            ("wg".to_string(), t(dt, &[k, n], wg.clone())),
            ("wu".to_string(), t(dt, &[k, n], wm.clone())),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&gsm, &args).expect("runs");
        let (g, u) = (matmul(&x, &wg, m, k, n), matmul(&x, &wm, m, k, n));
        let want: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| {
                let (g, u) = (round(dt, *g), round(dt, *u));
                round(dt, g / (1.0 + (-g).exp()) * u)
            })
            .collect();
        let out = res["out"].data.as_f64().expect("f64");
        compare(
            &format!("gate_up_swiglu {m}x{k}x{n}"),
            out,
            &want,
            tolerance(dt),
        );
    }
}

/// A row reduction that keeps its row in one chunk (row 4096) and an elementwise kernel (row
/// 1024) sharing the column constant.
const SHARED: &str = "module shared\n\n\
const BLOCK: int = 64 where BLOCK >= 1 && BLOCK <= 8192\n\
const ROWS: int = 2 where ROWS >= 1 && ROWS <= 64\n\n\
kernel @norm(x: in tensor<f32>[R, N], s: out tensor<f32>[R]) grid [R, 1, 1] {\n\
\x20 %row = program_id 0 : i32\n\
\x20 %zero = const 0 : i32\n\
\x20 %xt = load x[%row, %zero] other 0.0 : tile<1 x BLOCK x f32>\n\
\x20 %sq = mul %xt, %xt : tile<1 x BLOCK x f32>\n\
\x20 %tot = reduce sum %sq axis 1 : tile<1x1xf32>\n\
\x20 %t1 = reshape %tot : tile<1xf32>\n\
\x20 store s[%row], %t1 guard\n\
}\n\n\
kernel @scale(x: in tensor<f32>[R, N], y: out tensor<f32>[R, N]) grid [cdiv(N, BLOCK), cdiv(R, ROWS), 1] {\n\
\x20 %cb = program_id 0 : i32\n\
\x20 %rb = program_id 1 : i32\n\
\x20 %bc = const BLOCK : i32\n\
\x20 %br = const ROWS : i32\n\
\x20 %c0 = mul %cb, %bc : i32\n\
\x20 %r0 = mul %rb, %br : i32\n\
\x20 %xt = load x[%r0, %c0] other 0.0 : tile<ROWS x BLOCK x f32>\n\
\x20 %y = add %xt, %xt : tile<ROWS x BLOCK x f32>\n\
\x20 store y[%r0, %c0], %y guard\n\
}\n\n\
program(x: in tensor<f32>[R, N], s: out tensor<f32>[R], y: out tensor<f32>[R, N]) {\n\
\x20 launch @norm(x, s)\n\
\x20 launch @scale(x, y)\n\
}\n";

#[test]
fn a_shared_constant_keeps_the_first_rows_value() {
    let plan = CompilePlan::resolve(SHARED, &[], Target::Sm90a, Emit::Ptx, Flags::default())
        .expect("plan");
    let report = plan.config_report();
    assert!(
        report.contains("configuration: kernel `norm`: sm_90a row-reduction row: BLOCK=4096"),
        "{report}"
    );
    assert!(
        report.contains("a row in one chunk reduced on its own"),
        "{report}"
    );
    assert!(
        report.contains(
            "configuration: kernel `scale`: none (its row sets BLOCK=1024, but kernel `norm`'s \
             row set BLOCK=4096)"
        ),
        "{report}"
    );
    assert!(plan.defines.contains(&("BLOCK".into(), "4096".into())));
    assert!(
        !plan.defines.iter().any(|(c, _)| c == "ROWS"),
        "{:?}",
        plan.defines
    );
    // The user's -D of the constant keeps both rows out, and stands.
    let d = vec![("BLOCK".to_string(), "256".to_string())];
    let plan =
        CompilePlan::resolve(SHARED, &d, Target::Sm90a, Emit::Ptx, Flags::default()).expect("plan");
    assert_eq!(plan.defines, d);
    let out = pipeline::compile(SHARED, &plan).expect("compiles");
    assert!(
        out.text.contains("BLOCK_256"),
        "the symbols name the user's value"
    );
}

#[test]
fn builtin_norms_and_swiglu_are_classified() {
    // (op, a line of the report, whether the rows' values are the op's own defaults)
    for (op, want, defaults) in [
        (
            "rmsnorm_fwd",
            "configuration: sm_90a row-reduction row: BLOCK=4096 (column block)",
            true,
        ),
        (
            "layernorm_fwd",
            "configuration: sm_90a row-reduction row: BLOCK=4096 (column block)",
            true,
        ),
        (
            "swiglu",
            "configuration: sm_90a elementwise row: BLOCK_R=4 (row block), BLOCK_N=1024",
            true,
        ),
        (
            "rmsnorm_bwd",
            "configuration: kernel `rmsnorm_bwd_dx`: sm_90a row-reduction row: BLOCK=4096 (column \
             block) — matched: one row per program, reduced in column chunks, bf16 tiles, 4 tensors \
             loaded, a row in one chunk reduced on its own",
            true,
        ),
        // The final sums take a block of rows per program, which no row sets.
        (
            "rmsnorm_bwd",
            "configuration: kernel `rmsnorm_bwd_dw`: none (no sm_90a row-reduction row matches: \
             a block of rows per program",
            true,
        ),
        // Its 16-bit dx kernel takes 8 warps (two blocks per SM with the next row in flight).
        (
            "layernorm_bwd",
            "configuration: kernel `layernorm_bwd_dx`: sm_90a row-reduction row: BLOCK=4096 \
             (column block), warps 8 — matched: one row per program, reduced in column chunks, \
             bf16 tiles, 7 tensors loaded, a row in one chunk reduced on its own",
            true,
        ),
        (
            "layernorm_bwd",
            "configuration: kernel `layernorm_bwd_dwdb`: none (no sm_90a row-reduction row \
             matches: a block of rows per program",
            true,
        ),
    ] {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in");
        let plan = CompilePlan::resolve(src, &[], Target::Sm90a, Emit::Ptx, Flags::default())
            .expect("plan");
        let report = plan.config_report();
        assert!(report.contains(want), "{op}: {want}\n{report}");
        let generic = kir_ir::text::parse(src).expect("parses");
        let defaults_of = kir_compiler::internal::passes::const_values(&generic, &[]).expect("defaults");
        let same = plan.defines.iter().all(|(c, v)| {
            defaults_of
                .iter()
                .any(|(n, d)| n == c && d.to_string() == *v)
        });
        assert_eq!(same, defaults, "{op}: {:?}", plan.defines);
        // CUDA C keeps the op's own tiles, except for a row kept whole on sm_120a, whose
        // 4096-column chunks outgrow its shared memory there (2048).
        let cuda = CompilePlan::resolve(src, &[], Target::Sm80, Emit::Cuda, Flags::default())
            .expect("plan");
        assert!(cuda.defines.is_empty(), "{op}: {:?}", cuda.defines);
        let cuda = CompilePlan::resolve(src, &[], Target::Sm120a, Emit::Cuda, Flags::default())
            .expect("plan");
        let whole_row = matches!(
            op,
            "rmsnorm_fwd" | "rmsnorm_bwd" | "layernorm_fwd" | "layernorm_bwd"
        );
        let want: Vec<(String, String)> = if whole_row {
            vec![("BLOCK".to_string(), "2048".to_string())]
        } else {
            vec![]
        };
        assert_eq!(cuda.defines, want, "{op}");
    }
}

/// For each (op, dtype, 8 warps or not) and every PTX target: the op's configuration line for
/// the kernel whose line contains `kernel` says `warps 8` exactly when expected, and passes
/// `check`.
fn assert_8_warps(cases: &[(&str, &str, bool)], kernel: &str, check: fn(&str, &str) -> bool) {
    for &(op, dt, eight) in cases {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in");
        let d = vec![("DTYPE".to_string(), dt.to_string())];
        for target in [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a] {
            let plan =
                CompilePlan::resolve(src, &d, target, Emit::Ptx, Flags::default()).expect("plan");
            let report = plan.config_report();
            let line = report
                .lines()
                .find(|l| l.starts_with("configuration:") && l.contains(kernel))
                .unwrap_or_else(|| panic!("{op} {dt}: no line for `{kernel}`\n{report}"));
            assert!(check(op, line), "{op} {dt}: {line}");
            assert_eq!(
                line.contains("warps 8"),
                eight,
                "{op} {dt} {target:?}: {line}"
            );
        }
    }
}

/// layernorm_bwd's dx kernel takes 8 warps in 16-bit tiles on every PTX target (two blocks per
/// SM with the next row in flight); in f32 tiles it keeps the policy's warps (8 would need 161
/// registers: one block per SM either way), as rmsnorm_bwd's dx kernel does in any dtype.
#[test]
fn layernorm_bwd_dx_takes_8_warps_in_16_bit_tiles() {
    let cases = [
        ("layernorm_bwd", "bf16", true),
        ("layernorm_bwd", "f16", true),
        ("layernorm_bwd", "f32", false),
        ("rmsnorm_bwd", "bf16", false),
    ];
    assert_8_warps(&cases, "_dx`", |_, l| {
        l.contains("BLOCK=4096 (column block)")
    });
}

/// layernorm_fwd, whose row reductions run one after the other (the centred squares need the
/// mean), takes 8 warps in 16-bit tiles on every PTX target; rmsnorm_fwd (one reduction) keeps
/// the policy's 16, and so does layernorm_fwd in f32 tiles.
#[test]
fn chained_row_reductions_take_8_warps_in_16_bit_tiles() {
    let cases = [
        ("layernorm_fwd", "bf16", true),
        ("layernorm_fwd", "f16", true),
        ("layernorm_fwd", "f32", false),
        ("rmsnorm_fwd", "bf16", false),
    ];
    assert_8_warps(&cases, "", |op, l| {
        l.contains("one reduction computed from another") == (op == "layernorm_fwd")
    });
}

/// A row reduction whose chunk is a constant that also sizes a tensor (`D` in `[R, D]`): the
/// row never sets it, since it is part of the kernel's interface.
const INTERFACE: &str = "module iface\n\n\
const D: int = 64 where D >= 1 && D <= 4096\n\n\
kernel @sumsq(x: in tensor<f32>[R, D], s: out tensor<f32>[R]) grid [R, 1, 1] {\n\
\x20 %row = program_id 0 : i32\n\
\x20 %zero = const 0 : i32\n\
\x20 %xt = load x[%row, %zero] other 0.0 : tile<1 x D x f32>\n\
\x20 %sq = mul %xt, %xt : tile<1 x D x f32>\n\
\x20 %tot = reduce sum %sq axis 1 : tile<1x1xf32>\n\
\x20 %t1 = reshape %tot : tile<1xf32>\n\
\x20 store s[%row], %t1 guard\n\
}\n";

/// A row reduction over a block of rows per program (a tile of `ROWS` rows, its columns walked in
/// chunks, as the norm backward's dx kernels once were) keeps its own tiles on every target: the
/// faster 8 × 1024 tiles measured for such kernels spilled (docs/configs.md), and the report
/// says that no row matches.
#[test]
fn a_row_block_reduction_keeps_its_own_tiles() {
    let src = "module rb\n\n\
const ROWS: int = 4 where ROWS >= 1 && ROWS <= 64\n\
const BLOCK: int = 256 where BLOCK >= 1 && BLOCK <= 8192\n\n\
kernel @sumsq(x: in tensor<bf16>[R, N], s: out tensor<f32>[R]) grid [cdiv(R, ROWS), 1, 1] {\n\
\x20 %g = program_id 0 : i32\n\
\x20 %rows = const ROWS : i32\n\
\x20 %r0 = mul %g, %rows : i32\n\
\x20 %n = dim N : i32\n\
\x20 %zero = const 0 : i32\n\
\x20 %step = const BLOCK : i32\n\
\x20 %z = const 0.0 : tile<ROWS x BLOCK x f32>\n\
\x20 %acc = for %c = %zero to %n step %step iter(%a = %z) : tile<ROWS x BLOCK x f32> {\n\
\x20   %xt = load x[%r0, %c] other 0.0 : tile<ROWS x BLOCK x bf16>\n\
\x20   %xf = cast %xt : tile<ROWS x BLOCK x f32>\n\
\x20   %xx = mul %xf, %xf : tile<ROWS x BLOCK x f32>\n\
\x20   %a1 = add %a, %xx : tile<ROWS x BLOCK x f32>\n\
\x20   yield %a1\n\
\x20 }\n\
\x20 %t = reduce sum %acc axis 1 : tile<ROWS x 1 x f32>\n\
\x20 %t1 = reshape %t : tile<ROWS x f32>\n\
\x20 store s[%r0], %t1 guard\n\
}\n";
    for target in [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a] {
        let plan =
            CompilePlan::resolve(src, &[], target, Emit::Ptx, Flags::default()).expect("plan");
        let report = plan.config_report();
        assert!(
            report.contains("configuration: none (no ")
                && report.contains("row-reduction row matches: a block of rows per program"),
            "{target:?}: {report}"
        );
        assert!(plan.defines.is_empty(), "{target:?}: {:?}", plan.defines);
    }
}

#[test]
fn an_interface_dim_is_never_set() {
    let plan = CompilePlan::resolve(INTERFACE, &[], Target::Sm90a, Emit::Ptx, Flags::default())
        .expect("plan");
    let r = &plan.config.report;
    assert!(
        r.contains("the sm_90a row-reduction row sets the column block, which is `D`, a dim of the kernel's tensors"),
        "{r}"
    );
    assert!(plan.defines.is_empty(), "{:?}", plan.defines);
    // attention_bwd's delta preprocess is a row reduction over the head dim: the module keeps
    // its attention-backward class, and no row touches HEAD_DIM.
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let plan =
        CompilePlan::resolve(src, &[], Target::Sm90a, Emit::Ptx, Flags::default()).expect("plan");
    assert!(plan.kernel_configs.is_empty());
    assert!(
        plan.config
            .report
            .contains("sm_90a attention-backward row: "),
        "{}",
        plan.config.report
    );
    assert!(
        plan.defines.iter().all(|(name, _)| name != "HEAD_DIM"),
        "{:?}",
        plan.defines
    );
}
