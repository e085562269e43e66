//! Warp specialization on the PTX backend (`--warp-specialize on`, backends/src/ptx/ws.rs): the
//! default attention_fwd (d64/128/256) and GEMM on sm_90a lower to a producer
//! warpgroup and one consumer with `setmaxnreg` budgets, the register count at entry that makes
//! them take effect, tensor copies, mbarrier waits and wgmma; ptxas (13.0, `KIR_PTXAS`) assembles
//! them without spills or warnings (no C7508 "setmaxnreg ignored"). Targets without the
//! features, and causal attention (its key-range mask is not a tensor copy's bound), are errors
//! naming why. Correctness runs on the H200 (docs/gpu-validation.md);
//! the pass itself is checked on the interpreter (tests/tests/scheduling.rs).

use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile_stage, Emit, Stage};
use kir_tests::defs;
use std::process::Command;

fn ws_opts() -> PtxOptions {
    PtxOptions {
        warp_specialize: Some(true),
        ..Default::default()
    }
}

/// `ptxas -v` on sm_90a: the log, after checking it succeeded without a warning or a spill.
fn assemble(name: &str, ptx: &str) -> String {
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)")
    });
    let dir = std::env::temp_dir().join(format!("kir-ptx-ws-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("{name}.ptx"));
    std::fs::write(&file, ptx).expect("write ptx");
    let out = Command::new(ptxas)
        .args(["-arch=sm_90a", "-v"])
        .arg(&file)
        .arg("-o")
        .arg(dir.join(format!("{name}.cubin")))
        .output()
        .expect("run ptxas");
    let log =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ptxas failed for {name}:\n{log}");
    assert!(!log.contains("warning"), "ptxas warned for {name}:\n{log}");
    let spills: Vec<&str> = log.lines().filter(|l| l.contains("spill")).collect();
    assert!(!spills.is_empty(), "{name}: no spill line:\n{log}");
    for l in spills {
        assert!(l.contains(" 0 bytes spill stores"), "{name} spills: {l}");
    }
    log
}

#[test]
fn attention_and_gemm_lower_warp_specialized_on_sm90a() {
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("attention_fwd", vec![]),
        ("attention_fwd", vec![("HEAD_DIM", "64")]),
        ("attention_fwd", vec![("HEAD_DIM", "256")]),
        ("gemm", vec![]),
        ("gemm", vec![("EPILOGUE", "silu")]),
    ];
    for (op, d) in cases {
        let name = format!(
            "{op}{}",
            d.iter()
                .map(|(k, v)| format!("_{k}{v}"))
                .collect::<String>()
        );
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
        let out = compile_stage(
            src,
            &defs(&d),
            None,
            Target::Sm90a,
            Emit::Ptx,
            Stage::Output,
            &ws_opts(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = &out.text;
        // 4 producer warps and the configuration's consumer warps: 8 (65536 / 384 registers at
        // entry, a multiple of 8, then 32 for the producer and 232 for the consumer), or 12 for
        // attention's d128 default (65536 / 512, then 32 and 160).
        let d128 = op == "attention_fwd" && d.is_empty();
        let (threads, entry, consumer) = if d128 {
            (512, 128, 160)
        } else {
            (384, 168, 232)
        };
        for want in [
            format!(".maxntid {threads}, 1, 1").as_str(),
            &format!(".maxnreg {entry}"),
            "setmaxnreg.dec.sync.aligned.u32 32;",
            &format!("setmaxnreg.inc.sync.aligned.u32 {consumer};"),
            "cp.async.bulk.tensor",
            "mbarrier.arrive.expect_tx",
            "mbarrier.try_wait.parity",
            "wgmma.mma_async",
        ] {
            assert!(text.contains(want), "{name}: no `{want}`");
        }
        // The consumer never waits on the whole block (the producer warps have left).
        let at = text
            .lines()
            .position(|l| l.starts_with("$L_ws_consumer"))
            .expect("the consumer's label");
        let consumer = text.lines().skip(at).collect::<Vec<_>>().join("\n");
        assert!(
            !consumer.contains("bar.sync 0;"),
            "{name}: bar.sync 0 in the consumer"
        );
        // It copies nothing itself: attention's q block, too, arrives through the producer's
        // tensor copy on its own barrier (warp_specialize/stage.rs).
        assert!(
            !consumer.contains("cp.async") && !consumer.contains("ld.global"),
            "{name}: the consumer copies"
        );
        let meta = out.meta.as_ref().expect("meta");
        assert_eq!(
            meta["kernels"][0]["block"],
            serde_json::json!([threads, 1, 1]),
            "{name}"
        );
        assemble(&name, text);
    }
}

#[test]
fn targets_without_the_features_name_themselves() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("built-in op");
    for target in [Target::Sm80, Target::Sm100a, Target::Sm120a] {
        let e = compile_stage(src, &[], None, target, Emit::Ptx, Stage::Output, &ws_opts())
            .err()
            .unwrap_or_else(|| panic!("gemm --warp-specialize on {}", target.name()));
        let msg = e.to_string();
        assert!(msg.contains(target.name()), "{msg}");
    }
}

/// Causal attention's producer fills key blocks whose rows past the causal range must read as
/// zero: the copies' `keys < hi` masks are index tiles the producer's thread never evaluates
/// (the tensor copy reads its whole box); it stores each fill's valid-row count beside the
/// barriers before its `expect_tx` arrival, and the consumer loads it after its wait and zeroes
/// the rows past it (tma_rows.rs), on a plain and on a persistent grid; the warps' fallback
/// copy (no tensor maps) stores it too (without it the consumer zeroed by a stale count: the
/// H200 showed the fallback 24–49 % off the tensor-copy path, docs/gpu-validation.md).
#[test]
fn causal_attention_producers_store_row_counts() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    for persistent in [Some(0), Some(132)] {
        let opts = PtxOptions {
            persistent,
            ..ws_opts()
        };
        let what = format!("causal attention_fwd --warp-specialize on, persistent {persistent:?}");
        let out = compile_stage(
            src,
            &defs(&[("CAUSAL", "1")]),
            None,
            Target::Sm90a,
            Emit::Ptx,
            Stage::Output,
            &opts,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let text = &out.text;
        let at = text.find("\n$L_ws_consumer").expect("the consumer's label");
        let (producer, consumer) = text.split_at(at);
        let fill = producer
            .lines()
            .position(|l| l.contains("], 65536;") && l.contains("expect_tx"))
            .expect("a key block's fill");
        let lines: Vec<&str> = producer.lines().collect();
        assert!(
            lines[..fill]
                .iter()
                .rev()
                .take(3)
                .any(|l| l.contains("st.shared.u32")),
            "{what}: no row count stored before the fill"
        );
        assert!(
            consumer.contains("ld.shared.u32"),
            "{what}: the count is not read"
        );
        // Without tensor maps the warps copy (evaluating the masks) and thread 0 still stores
        // the count the consumer zeroes by.
        let by_warps = producer
            .find("\n$L_ws_by_warps")
            .map(|i| &producer[i..])
            .expect("the fallback's label");
        assert!(
            by_warps.contains("st.shared.u32"),
            "{what}: the fallback stores no row count"
        );
        assemble(&what, text);
    }
}
