//! Configurations from what a kernel is (compiler/src/structure/, compiler/src/configs.rs,
//! docs/configs.md): a configuration row applies to a kernel by its structure, never by the
//! names of its module, kernels or constants.
//!
//! - Every built-in op, in its main variants, on the four targets (PTX, and CUDA C where the op
//!   compiles with it): a copy with a comment line added and the module, its kernels and every
//!   constant renamed compiles to the same code as the op, up to those names and comments.
//! - A matmul written from scratch (tests/in/user/matmul_leaky_relu.kir: its own constant names,
//!   no grouping, no transposes) gets the sm_90a dot-loop row: the report says so, the scheduled
//!   module is warp-specialized on a TMA ring, the PTX has wgmma, and the scheduled module's
//!   results on the interpreter match an f64 oracle on ragged shapes with outputs poisoned.
//! - A user's `-D` stands, and one that cannot fit the target's shared memory is an error naming
//!   the bytes; a role the kernel lacks is skipped and reported. (Programs whose kernels make
//!   no class together are configured kernel by kernel: tests/tests/kernel_configs.rs.)

use kir_backends::interp;
use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_tests::defs;
use kir_tests::{compare, round, t, tolerance, Rng};
use std::collections::BTreeMap;

const TARGETS: [Target; 4] = [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a];

/// The variants compiled per op (scripts/ptx_corpus.sh's list): `-D`s and lowering flags.
const VARIANTS: &[(&str, &str)] = &[
    ("attention_fwd", ""),
    ("attention_fwd", "-D HEAD_DIM=64"),
    ("attention_fwd", "-D HEAD_DIM=256"),
    ("attention_fwd", "-D CAUSAL=1"),
    ("attention_fwd", "-D CAUSAL=1 -D HEAD_DIM=64"),
    ("attention_fwd", "-D CAUSAL=1 -D HEAD_DIM=256"),
    ("attention_fwd", "-D MASK=1"),
    ("attention_fwd", "-D VARLEN=1"),
    ("attention_fwd", "-D WINDOW=1 -D SOFTCAP=1"),
    ("attention_fwd", "-D DTYPE=f16 -D OUT_LAYOUT=bshd"),
    ("attention_fwd", "-D CAUSAL=1 -D KV_OFFSET=1"),
    ("attention_fwd", "-D HEAD_DIM=64 -D DTYPE=f32"),
    ("attention_fwd", "--warp-specialize off"),
    ("attention_fwd", "-D HEAD_DIM=64 --overlap on"),
    ("attention_bwd", ""),
    ("attention_bwd", "-D HEAD_DIM=64"),
    ("attention_bwd", "-D CAUSAL=1"),
    ("gemm", ""),
    ("gemm", "-D EPILOGUE=bias"),
    ("gemm", "-D EPILOGUE=swiglu"),
    ("gemm", "-D TRANS_A=1 -D TRANS_B=1"),
    ("gemm", "-D TRANS_B=1"),
    ("gemm", "-D DTYPE=f32"),
    ("gemm", "-D DTYPE=f32 -D BF16_COMPUTE=1"),
    ("gemm", "-D DTYPE=f16 -D C_IN=1 -D EPILOGUE=gelu"),
    ("gemm", "-D GROUP_M=4"),
    ("gemm", "--stages 2"),
    ("gemm", "--warps 4"),
    ("gemm", "--persistent off"),
    ("gemm_nf4", ""),
    ("layernorm_fwd", ""),
    ("layernorm_bwd", ""),
    ("rmsnorm_fwd", ""),
    ("rmsnorm_fwd", "--stages 3"),
    ("rmsnorm_bwd", ""),
    ("swiglu", ""),
];

/// The `-D`s and flags of a variant string.
fn parse_variant(v: &str) -> (Vec<(String, String)>, Flags) {
    let mut defines = vec![];
    let mut flags = Flags::default();
    let words: Vec<&str> = v.split_whitespace().collect();
    for w in words.chunks(2) {
        match w {
            ["-D", d] => {
                let (n, x) = d.split_once('=').expect("NAME=VALUE");
                defines.push((n.to_string(), x.to_string()));
            }
            ["--stages", n] => flags.stages = Some(n.parse().expect("stages")),
            ["--warps", n] => flags.warps = Some(n.parse().expect("warps")),
            ["--persistent", "off"] => flags.persistent = Some(0),
            ["--warp-specialize", s] => flags.warp_specialize = Some(*s == "on"),
            ["--overlap", s] => flags.overlap = Some(*s == "on"),
            other => panic!("unknown variant words {other:?}"),
        }
    }
    (defines, flags)
}

/// The renames of a user's copy: the module, every kernel and every constant (`BLOCK_M` →
/// `TILE_M`, `DTYPE` → `U_DTYPE`), as (old, new) pairs.
fn renames(src: &str) -> Vec<(String, String)> {
    let m = kir_ir::text::parse(src).expect("the op parses");
    let mut r = vec![(m.name.clone(), format!("my_{}", m.name))];
    for k in m.kernels.values() {
        if k.name != m.name {
            r.push((k.name.clone(), format!("my_{}", k.name)));
        }
    }
    for c in &m.consts {
        let new = if c.name.contains("BLOCK") {
            c.name.replace("BLOCK", "TILE")
        } else {
            format!("U_{}", c.name)
        };
        r.push((c.name.clone(), new));
    }
    r
}

/// Replaces whole identifiers `from` by `to` (word boundaries: not next to `[A-Za-z0-9_]`).
fn replace_ident(text: &str, from: &str, to: &str) -> String {
    let is_id = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(is_id) || after.is_some_and(is_id) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

/// The user's copy of op source `src`: a comment line added, every name of `renames` replaced
/// in identifiers (module, `@kernel`s, constants, in declarations, types, expressions).
fn copy(src: &str, renames: &[(String, String)]) -> String {
    let mut out = format!("// A user's copy, renamed.\n{src}");
    for (from, to) in renames {
        out = replace_ident(&out, from, to);
    }
    out
}

/// Code with comment lines dropped and the symbols of the names in `names` mapped back from
/// their new to their old spelling, so a copy's output compares with the op's. Symbols join
/// names with `_` (`gemm_DTYPE_bf16_BLOCK_M_128`), so this replaces substrings, longest first.
fn normalize(code: &str, names: &[(String, String)]) -> String {
    let mut back: Vec<&(String, String)> = names.iter().collect();
    back.sort_by_key(|(_, new)| std::cmp::Reverse(new.len()));
    let mut text: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (old, new) in back {
        text = text.replace(new.as_str(), old);
    }
    text
}

/// Compiles `src` with the plan of `defines` and `flags`: the code and META (or the error).
fn build(
    src: &str,
    defines: &[(String, String)],
    target: Target,
    emit: Emit,
    flags: &Flags,
) -> Result<(String, String, String), String> {
    let plan = CompilePlan::resolve(src, defines, target, emit, flags.clone())
        .map_err(|e| e.to_string())?;
    let out = kir_compiler::internal::pipeline::compile(src, &plan).map_err(|e| e.to_string())?;
    let meta = out.meta.map(|m| m.to_string()).unwrap_or_default();
    Ok((out.text, meta, plan.config.report))
}

#[test]
fn renamed_copies_of_every_builtin_compile_to_the_same_code() {
    let ops: Vec<&str> = kir_compiler::internal::oplib::builtins()
        .map(|(n, _)| n)
        .collect();
    for op in &ops {
        assert!(
            VARIANTS.iter().any(|(o, _)| o == op),
            "built-in op {op} has no variant here"
        );
    }
    let mut compared = 0;
    for (op, variant) in VARIANTS {
        let src = kir_compiler::internal::oplib::builtin(op).expect("a built-in op");
        let names = renames(src);
        let user = copy(src, &names);
        assert_ne!(user, src);
        let (defines, flags) = parse_variant(variant);
        let user_defines: Vec<(String, String)> = defines
            .iter()
            .map(|(n, v)| {
                let n = names
                    .iter()
                    .find(|(old, _)| old == n)
                    .map_or(n.clone(), |(_, new)| new.clone());
                (n, v.clone())
            })
            .collect();
        for target in TARGETS {
            for emit in [Emit::Ptx, Emit::Cuda] {
                if emit == Emit::Cuda && !variant.split_whitespace().all(|w| !w.starts_with("--")) {
                    continue;
                }
                let what = format!("{op} {variant} on {} ({emit:?})", target.name());
                let want = build(src, &defines, target, emit, &flags);
                let got = build(&user, &user_defines, target, emit, &flags);
                match (want, got) {
                    (Ok((code, meta, report)), Ok((ucode, umeta, ureport))) => {
                        assert_eq!(
                            normalize(&ucode, &names),
                            normalize(&code, &names),
                            "{what}: the copy's code differs\nop: {report}\ncopy: {ureport}"
                        );
                        assert_eq!(
                            normalize(&umeta, &names),
                            normalize(&meta, &names),
                            "{what}: META differs"
                        );
                        assert_eq!(
                            normalize(&ureport, &names),
                            normalize(&report, &names),
                            "{what}: the configuration differs"
                        );
                        if (*op, *variant, target, emit) == ("gemm", "", Target::Sm90a, Emit::Ptx) {
                            // The copy is renamed, and still gets the row under its own names.
                            assert!(ucode.contains("my_gemm_U_DTYPE_bf16"), "{what}");
                            assert!(
                                ureport.contains("TILE_M=128 (M tile), TILE_N=256 (N tile)"),
                                "{ureport}"
                            );
                        }
                        compared += 1;
                    }
                    (Err(_), Err(_)) => {}
                    (want, got) => panic!(
                        "{what}: the op {} and the copy {}",
                        if want.is_ok() { "compiles" } else { "fails" },
                        if got.is_ok() { "compiles" } else { "fails" }
                    ),
                }
            }
        }
    }
    assert!(compared > 200, "{compared} comparisons");
}

fn user_matmul() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/user/matmul_leaky_relu.kir");
    std::fs::read_to_string(path).expect("tests/in/user/matmul_leaky_relu.kir")
}

fn leaky_relu_oracle(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for kk in 0..k {
                s += a[i * k + kk] * b[kk * n + j];
            }
            c[i * n + j] = if s > 0.0 { s } else { 0.01 * s };
        }
    }
    c
}

/// A user's matmul orders its tiles in no groups of its own, so a persistent grid walks them in
/// the dot-loop row's groups of rows, whoever asks for the grid: the row, or the user's (or a
/// tuned candidate's) `--persistent` beside tiles, warps or stages of their own, which keep the
/// row out. Without a persistent grid there is no order to choose; the built-in gemm keeps its
/// own `GROUP_M`.
#[test]
fn a_kernel_without_groups_walks_a_persistent_grid_in_the_rows_groups() {
    let src = user_matmul();
    let tiles: Vec<(String, String)> = [("BM", "128"), ("BN", "256"), ("BK", "64")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let persistent = Flags {
        warps: Some(8),
        stages: Some(4),
        warp_specialize: Some(true),
        persistent: Some(132),
        ..Flags::default()
    };
    for (defs, flags, groups) in [
        (vec![], Flags::default(), Some(16)),
        (tiles.clone(), persistent.clone(), Some(16)),
        (
            tiles.clone(),
            Flags {
                persistent: Some(0),
                ..persistent.clone()
            },
            None,
        ),
    ] {
        let plan = CompilePlan::resolve(&src, &defs, Target::Sm90a, Emit::Ptx, flags.clone())
            .expect("plan");
        let what = format!("{defs:?} {flags:?}: {}", plan.config.report);
        assert_eq!(plan.schedule(4, true, true).tile_group, groups, "{what}");
        if groups.is_some() {
            assert!(plan.config.report.contains("groups of 16 rows"), "{what}");
        }
    }
    let gemm = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    let plan =
        CompilePlan::resolve(gemm, &[], Target::Sm90a, Emit::Ptx, Flags::default()).expect("plan");
    assert_eq!(plan.schedule(4, true, true).tile_group, None);
}

#[test]
fn a_user_matmul_gets_the_dot_loop_row_and_stays_correct() {
    let src = user_matmul();
    let plan =
        CompilePlan::resolve(&src, &[], Target::Sm90a, Emit::Ptx, Flags::default()).expect("plan");
    let report = &plan.config.report;
    for want in [
        "configuration: sm_90a dot-loop row: BM=128 (M tile), BN=256 (N tile), BK=64 (K tile)",
        "group 16 (none in the kernel: the persistent grid walks its tiles in groups of 16 rows)",
        "warps 8, stages 4, warp-specialized, persistent",
        "matched: one dot loop, f16 operands, A not transposed",
    ] {
        assert!(report.contains(want), "{want}\n{report}");
    }
    let out = kir_compiler::internal::pipeline::compile(&src, &plan).expect("compiles");
    let scheduled = kir_ir::text::print(&out.module);
    assert!(scheduled.contains("warp_specialize"), "{scheduled}");
    assert!(scheduled.contains("mbar_alloc"), "a TMA ring: {scheduled}");
    assert!(out.text.contains("wgmma.mma_async"), "wgmma");
    assert!(out.text.contains("cp.async.bulk.tensor"), "tensor copies");
    // Other targets have no dot-loop row, and say so.
    for target in [Target::Sm80, Target::Sm100a, Target::Sm120a] {
        let p = CompilePlan::resolve(&src, &[], target, Emit::Ptx, Flags::default()).expect("plan");
        assert!(
            p.config.report.starts_with("configuration: none (no ") && p.config.defines.is_empty(),
            "{}",
            p.config.report
        );
    }
    // The scheduled module on the interpreter against an f64 oracle: ragged shapes, magnitudes
    // above 1, the output poisoned (never passed in).
    let dt = kir_ir::Dtype::F16;
    let mut rng = Rng::fresh("user matmul");
    for (m, k, n) in [(150, 100, 300), (1, 7, 5), (129, 65, 257)] {
        let mag = 3.0;
        let a: Vec<f64> = rng.tensor(m * k, mag, dt);
        let b: Vec<f64> = rng.tensor(k * n, mag, dt);
        let args: BTreeMap<String, interp::HostArg> = [
            ("a".to_string(), t(dt, &[m, k], a.clone())),
            ("b".to_string(), t(dt, &[k, n], b.clone())),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&out.module, &args).expect("runs");
        let c = res["c"].data.as_f64().expect("f64 data");
        let want: Vec<f64> = leaky_relu_oracle(&a, &b, m, k, n)
            .into_iter()
            .map(|x| round(dt, x))
            .collect();
        compare(&format!("c {m}x{k}x{n}"), c, &want, tolerance(dt));
    }
}

#[test]
fn user_choices_stand_and_a_too_large_one_names_the_bytes() {
    let src = user_matmul();
    // A tile constant from the user: no row, the user's tile as given.
    let plan = CompilePlan::resolve(
        &src,
        &defs(&[("BM", "64")]),
        Target::Sm90a,
        Emit::Ptx,
        Flags::default(),
    )
    .expect("plan");
    assert!(plan.config.defines.is_empty());
    assert!(
        plan.config.report.contains("-D BM given"),
        "{}",
        plan.config.report
    );
    // A row value the constant's `where` clause rejects keeps the row out.
    let narrow = src.replace("where BN >= 16 && BN <= 256", "where BN >= 16 && BN <= 128");
    let plan = CompilePlan::resolve(&narrow, &[], Target::Sm90a, Emit::Ptx, Flags::default())
        .expect("plan");
    assert!(plan.config.defines.is_empty());
    assert!(
        plan.config.report.contains("does not fit the constants"),
        "{}",
        plan.config.report
    );
    // A literal tile cannot be set: the row is kept out, and the report says why.
    let literal = src.replace("tile<BM x", "tile<64 x");
    let plan = CompilePlan::resolve(&literal, &[], Target::Sm90a, Emit::Ptx, Flags::default())
        .expect("plan");
    assert!(plan.config.defines.is_empty());
    assert!(
        plan.config
            .report
            .contains("the M tile, which is not a constant"),
        "{}",
        plan.config.report
    );
    // A user tile too large for the target's shared memory is an error naming the bytes.
    for (s, d, target) in [
        (
            src.as_str(),
            defs(&[("BM", "256"), ("BN", "256"), ("BK", "128")]),
            Target::Sm120a,
        ),
        (
            kir_compiler::internal::oplib::builtin("gemm").expect("gemm"),
            defs(&[("BLOCK_M", "256"), ("BLOCK_N", "256"), ("BLOCK_K", "256")]),
            Target::Sm80,
        ),
    ] {
        let err = build(s, &d, target, Emit::Ptx, &Flags::default())
            .expect_err("too large for shared memory");
        assert!(
            err.contains("bytes of shared memory") && err.contains(target.name()),
            "{err}"
        );
    }
}

#[test]
fn default_tiles_that_do_not_fit_are_shrunk_and_a_users_stay_an_error() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("attention_fwd");
    // f32 at head dim 384 in CUDA C (every tile kept as 32-bit values in shared memory; no
    // CUDA-C row on sm_90a): the op's 64×64 tiles outgrow sm_90a's 227 KB, so the default tiles
    // are halved until the kernel fits; the schedule search says so. (PTX takes the row of the
    // tiles that do not spill there, which fits as it is.)
    let d = defs(&[("DTYPE", "f32"), ("HEAD_DIM", "384")]);
    let plan =
        CompilePlan::resolve(src, &d, Target::Sm90a, Emit::Cuda, Flags::default()).expect("plan");
    let out = kir_compiler::internal::pipeline::compile(src, &plan).expect("shrunk to fit");
    let step = out
        .tried
        .iter()
        .find(|t| t.contains("shrunk to fit shared memory: BLOCK_N 64 -> 32"))
        .unwrap_or_else(|| panic!("{:?}", out.tried));
    assert!(step.contains("312064 bytes of shared memory"), "{step}");
    let meta = out.meta.expect("meta");
    let shared = meta["kernels"][0]["shared_bytes"].as_u64().expect("shared");
    assert!(shared <= Target::Sm90a.smem_per_block(), "{shared}");
    assert!(
        meta["kernels"][0]["symbol"]
            .as_str()
            .is_some_and(|s| s.contains("BLOCK_N_32")),
        "{meta}"
    );
    let ptx_plan =
        CompilePlan::resolve(src, &d, Target::Sm90a, Emit::Ptx, Flags::default()).expect("plan");
    assert!(
        ptx_plan
            .config
            .report
            .contains("BLOCK_M=8 (query block), BLOCK_N=16 (key block)"),
        "{}",
        ptx_plan.config.report
    );
    // A tile set by the user is kept while the default query block shrinks around it (64 ->
    // 32 -> 16, each halved value halving again): the user's 64-key blocks fit beside 16-row
    // query blocks.
    let mut d64 = d.clone();
    d64.push(("BLOCK_N".into(), "64".into()));
    let (_, meta, _) =
        build(src, &d64, Target::Sm90a, Emit::Ptx, &Flags::default()).expect("fits around it");
    assert!(meta.contains("BLOCK_M_16_BLOCK_N_64"), "{meta}");
    // One that fits beside no query block (128 keys of 384 f32 values: 196,608 bytes a stage of
    // k alone) stays an error naming the bytes of the last try (BLOCK_M 8).
    let mut d128 = d.clone();
    d128.push(("BLOCK_N".into(), "128".into()));
    let err = build(src, &d128, Target::Sm90a, Emit::Ptx, &Flags::default())
        .expect_err("the user's tile does not fit");
    assert!(
        err.contains("bytes of shared memory on sm_90a") && !err.contains("316160"),
        "{err}"
    );
    // CUDA C too: attention_bwd at head dim 384 on sm_80 (every tile stored as 32-bit values:
    // 314,624 bytes at the op's tiles) compiles with the defaults.
    let bwd = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    for causal in ["0", "1"] {
        let d = defs(&[("HEAD_DIM", "384"), ("CAUSAL", causal)]);
        build(bwd, &d, Target::Sm80, Emit::Cuda, &Flags::default()).expect("CUDA C fits");
    }
    // On sm_120a (99 KB), f32 at head dim 384 takes the rows of the tiles that do not spill
    // (forward 8-row query and 16-key blocks, backward 16-row blocks and 8 keys), which fit
    // without halving; a halved constant halving again is the user's-tile case above.
    for op in [src, bwd] {
        let d = defs(&[("DTYPE", "f32"), ("HEAD_DIM", "384")]);
        let plan = CompilePlan::resolve(op, &d, Target::Sm120a, Emit::Ptx, Flags::default())
            .expect("plan");
        let out = kir_compiler::internal::pipeline::compile(op, &plan).expect("fits");
        let steps = out
            .tried
            .iter()
            .filter(|t| t.contains("shrunk to fit shared memory"))
            .count();
        assert_eq!(steps, 0, "{:?}", out.tried);
        let want = if op == src {
            "BLOCK_M=8 (query block), BLOCK_N=16 (key block)"
        } else {
            "BLOCK_KV=8 (dK/dV key block)"
        };
        assert!(plan.config.report.contains(want), "{}", plan.config.report);
        let meta = out.meta.expect("meta");
        for k in meta["kernels"].as_array().expect("kernels") {
            let shared = k["shared_bytes"].as_u64().expect("shared");
            assert!(shared <= Target::Sm120a.smem_per_block(), "{shared}");
        }
    }
}

fn flash_oracle(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    bh: usize,
    s: usize,
    d: usize,
    scale: f64,
) -> Vec<f64> {
    let mut o = vec![0.0; bh * s * d];
    for b in 0..bh {
        let base = b * s * d;
        for i in 0..s {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    (0..d)
                        .map(|x| q[base + i * d + x] * k[base + j * d + x])
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = w.iter().sum();
            for x in 0..d {
                o[base + i * d + x] = (0..s).map(|j| w[j] * v[base + j * d + x]).sum::<f64>() / l;
            }
        }
    }
    o
}

#[test]
fn a_user_attention_gets_the_attention_row_and_stays_correct() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/user/flash_attention.kir");
    let src = std::fs::read_to_string(path).expect("tests/in/user/flash_attention.kir");
    let mut rng = Rng::fresh("user attention");
    for (hd, want) in [
        (
            128,
            "configuration: sm_90a attention row: BQ=192 (query block), BKV=128 (key block), \
             warps 12, stages 2, warp-specialized — matched: an online-softmax key loop, bf16 \
             operands, head dim 128, not causal",
        ),
        (
            64,
            "configuration: sm_90a attention row: BQ=128 (query block), BKV=128 (key block), \
             warps 8 — matched: an online-softmax key loop, bf16 operands, head dim 64, not causal",
        ),
    ] {
        let d = defs(&[("HD", &hd.to_string())]);
        let plan = CompilePlan::resolve(&src, &d, Target::Sm90a, Emit::Ptx, Flags::default())
            .expect("plan");
        assert_eq!(plan.config.report, want);
        let out = kir_compiler::internal::pipeline::compile(&src, &plan).expect("compiles");
        assert!(out.text.contains("wgmma.mma_async"), "wgmma");
        if hd == 128 {
            assert!(kir_ir::text::print(&out.module).contains("warp_specialize"));
        }
        // The scheduled module on the interpreter against an f64 oracle (ragged S, v above 1).
        let dt = kir_ir::Dtype::Bf16;
        let (bh, s) = (2, 200);
        let scale = 1.0 / (hd as f64).sqrt();
        let q = rng.tensor(bh * s * hd, 1.0, dt);
        let k = rng.tensor(bh * s * hd, 1.0, dt);
        let v = rng.tensor(bh * s * hd, 3.0, dt);
        let args: BTreeMap<String, interp::HostArg> = [
            ("q".to_string(), t(dt, &[bh, s, hd], q.clone())),
            ("k".to_string(), t(dt, &[bh, s, hd], k.clone())),
            ("v".to_string(), t(dt, &[bh, s, hd], v.clone())),
            ("sm_scale".to_string(), interp::HostArg::Scalar(scale)),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&out.module, &args).expect("runs");
        let o = res["o"].data.as_f64().expect("f64 data");
        let want = flash_oracle(&q, &k, &v, bh, s, hd, scale);
        compare(&format!("o d{hd}"), o, &want, tolerance(dt));
    }
}
