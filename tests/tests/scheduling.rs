//! The scheduling passes, differentially on the CPU: every op-library kernel (several
//! specializations) runs on the interpreter before and after `pipelining`, on fresh random
//! inputs with ragged dims, and the outputs must be bit-identical under several scheduler seeds
//! (the pass only moves data through shared memory). The scheduled output of attention_fwd,
//! attention_bwd and gemm runs under 20 seeds, pipelined and warp-specialized with each plan.

use kir_compiler::internal::passes::{pipelining, warp_specialize, PipelineConfig, WsPlan};
use kir_ir::{Module, Opcode};
use kir_tests::sched_diff::{count, differential, spec};

/// The budget of sm_90a; `stages` as requested.
fn cfg(stages: Option<usize>) -> PipelineConfig {
    PipelineConfig {
        smem_budget: 232_448,
        stages,
        hold_carried_dots: false,
        tma_rings: false,
    }
}

#[test]
fn pipelining_and_warp_specialization_keep_every_op_library_kernel_exact() {
    let mut piped = 0;
    let mut specialized = 0;
    let mut tma_rings = 0;
    for (name, _) in kir_compiler::internal::oplib::builtins() {
        let mut specs: Vec<Vec<(&str, &str)>> = vec![vec![], vec![("DTYPE", "f32")]];
        match name {
            "attention_fwd" => {
                specs.push(vec![("CAUSAL", "1"), ("MASK", "1"), ("SOFTCAP", "1")]);
                specs.push(vec![
                    ("WINDOW", "1"),
                    ("CAUSAL", "1"),
                    ("OUT_LAYOUT", "bshd"),
                ]);
                specs.push(vec![("VARLEN", "1"), ("KV_OFFSET", "1"), ("CAUSAL", "1")]);
            }
            "attention_bwd" => specs.push(vec![("CAUSAL", "1")]),
            "gemm" => specs.push(vec![("EPILOGUE", "bias"), ("C_IN", "1"), ("TRANS_B", "1")]),
            _ => {}
        }
        for defs in specs {
            let before = spec(name, &defs);
            // Held rings (sm_90a: a carried-accumulator dot keeps its stages one iteration
            // longer) at every depth that holds.
            // TMA rings (sm_90a: full/empty mbarriers in place of copy groups) where the copies
            // qualify, at the default depth and at 4.
            for (stages, hold, tma) in [
                (None, false, false),
                (Some(2), false, false),
                (Some(4), false, false),
                (None, true, false),
                (Some(4), true, false),
                (None, false, true),
                (Some(4), false, true),
            ] {
                let what = format!("{name} {defs:?} stages {stages:?} hold {hold} tma {tma}");
                let c = PipelineConfig {
                    hold_carried_dots: hold,
                    tma_rings: tma,
                    ..cfg(stages)
                };
                let after = match pipelining(&before, &c) {
                    Ok(m) => m,
                    // A deep ring of f32 tiles may not fit: that must be the budget error.
                    Err(e)
                        if stages == Some(4)
                            && format!("{e:?}").contains("over the target's 232448 bytes") =>
                    {
                        continue
                    }
                    Err(e) => panic!("{what}: {e:?}"),
                };
                kir_ir::verifier::verify(&after).unwrap_or_else(|e| {
                    panic!("{what}: {}", e.render(name, &kir_ir::text::print(&after)))
                });
                let text = kir_ir::text::print(&after);
                let again = kir_ir::text::parse(&text)
                    .unwrap_or_else(|e| panic!("{what}: reparse: {}", e.render(name, &text)));
                assert_eq!(
                    kir_ir::text::print(&again),
                    text,
                    "{what}: printing is not canonical"
                );
                piped += (count(&after, Opcode::AsyncCopy) > 0) as usize;
                let tma_ring = count(&after, Opcode::MbarAlloc) > 0;
                assert!(tma || !tma_ring, "{what}: a TMA ring without tma_rings");
                tma_rings += tma_ring as usize;
                differential(&what, &before, &after, 3);
                if tma {
                    // Warp specialization takes cp.async rings only.
                    continue;
                }
                // Warp specialization of the pipelined kernel, with every plan that applies.
                for plan in WsPlan::ALL {
                    let what = format!("{what} ws {}", plan.name);
                    match warp_specialize(&after, &plan) {
                        Ok(m) => {
                            kir_ir::verifier::verify(&m).unwrap_or_else(|e| {
                                panic!("{what}: {}", e.render(name, &kir_ir::text::print(&m)))
                            });
                            specialized += (count(&m, Opcode::WarpSpecialize) > 0) as usize;
                            differential(&what, &before, &m, 2);
                        }
                        Err(e) => {
                            let msg = format!("{e:?}");
                            // Plans of several consumers split a grid axis whose copies
                            // must agree; around an outer loop (attention_bwd's dK/dV
                            // kernel) the loops' bounds must agree too (causal ones do not).
                            assert!(
                                plan.consumers > 1
                                    && (msg.contains("grid axis")
                                        && msg.contains("copies must agree")
                                        || msg.contains("takes one consumer")
                                        || msg.contains("around the outer loop")),
                                "{what}: {msg}"
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(piped >= 20, "only {piped} cases were pipelined");
    // attention_fwd's K and V rings and attention_bwd's q and do rings (dK/dV) and K and V
    // rings (dQ), bf16, at two depths: 12 cases today.
    assert!(tma_rings >= 12, "only {tma_rings} cases got TMA rings");
    assert!(
        specialized >= 40,
        "only {specialized} cases were warp-specialized"
    );
}

#[test]
fn scheduled_attention_and_gemm_hold_under_20_seeds() {
    for (name, defs) in [
        ("attention_fwd", vec![("CAUSAL", "1")]),
        ("attention_fwd", vec![]),
        ("attention_bwd", vec![]),
        ("gemm", vec![]),
    ] {
        let before = spec(name, &defs);
        let after = pipelining(&before, &cfg(Some(3))).expect("pipelining");
        assert!(
            count(&after, Opcode::AsyncCopy) >= 2,
            "{name}: nothing pipelined"
        );
        differential(&format!("{name} {defs:?} 3 stages"), &before, &after, 20);
    }
    // attention_fwd's TMA ring (sm_90a): full/empty mbarriers with the round's parity.
    let before = spec("attention_fwd", &[]);
    let c = PipelineConfig {
        tma_rings: true,
        ..cfg(Some(3))
    };
    let after = pipelining(&before, &c).expect("pipelining");
    assert_eq!(
        count(&after, Opcode::MbarAlloc),
        2,
        "attention_fwd: no TMA ring"
    );
    assert_eq!(
        count(&after, Opcode::AsyncCommit),
        0,
        "a TMA ring has no copy groups"
    );
    differential("attention_fwd tma ring 3 stages", &before, &after, 20);
    // attention_bwd's dK/dV ring of q and do runs inside the loop over the group's query heads
    // (GQA: 2 here), so its barriers' phases run on from one head to the next: a parity per
    // stage carried through the loop. Ragged query counts give odd trip counts, so the stages'
    // parities differ when the next head's ring starts; a ring whose parity restarted deadlocks.
    let before = spec("attention_bwd", &[("HEAD_DIM", "64")]);
    for stages in [2, 3] {
        let c = PipelineConfig {
            tma_rings: true,
            ..cfg(Some(stages))
        };
        let after = pipelining(&before, &c).expect("pipelining");
        let dkdv = after
            .kernels
            .values()
            .find(|k| k.name == "attention_bwd_dkdv")
            .expect("the dK/dV kernel");
        let bars = dkdv
            .dfg
            .ops
            .values()
            .filter(|od| od.opcode == Opcode::MbarAlloc)
            .count();
        assert_eq!(bars, 2, "attention_bwd's dK/dV: no TMA ring");
        differential(
            &format!("attention_bwd nested tma ring {stages} stages"),
            &before,
            &after,
            20,
        );
    }
}

#[test]
fn a_ring_that_does_not_fit_is_an_error_naming_the_bytes() {
    let before = spec("attention_fwd", &[]);
    let e = pipelining(
        &before,
        &PipelineConfig {
            smem_budget: 101_376,
            stages: Some(8),
            hold_carried_dots: false,
            tma_rings: false,
        },
    )
    .expect_err("8 stages of 32 KB");
    let msg = format!("{e:?}");
    assert!(
        msg.contains("8 pipeline stages")
            && msg.contains("bytes of shared memory")
            && msg.contains("101376"),
        "{msg}"
    );
}

/// Pipelines with the target's budget and warp-specializes with `plan`.
fn ws(before: &Module, plan: &WsPlan) -> Result<Module, String> {
    let piped = pipelining(before, &cfg(None)).map_err(|e| format!("{e:?}"))?;
    let m = warp_specialize(&piped, plan).map_err(|e| format!("{e:?}"))?;
    kir_ir::verifier::verify(&m).map_err(|e| e.render("ws", &kir_ir::text::print(&m)))?;
    let text = kir_ir::text::print(&m);
    let again = kir_ir::text::parse(&text).map_err(|e| e.render("ws", &text))?;
    assert_eq!(
        kir_ir::text::print(&again),
        text,
        "printing is not canonical"
    );
    Ok(m)
}

#[test]
fn warp_specialized_kernels_hold_under_20_seeds() {
    for (name, defs, plan) in [
        ("attention_fwd", vec![], WsPlan::FA3),
        ("attention_fwd", vec![("DTYPE", "f32")], WsPlan::FA3),
        ("attention_fwd", vec![("CAUSAL", "1")], WsPlan::GEMM),
        (
            "attention_fwd",
            vec![("CAUSAL", "1"), ("WINDOW", "1")],
            WsPlan::P2C6,
        ),
        (
            "attention_fwd",
            vec![("VARLEN", "1"), ("KV_OFFSET", "1"), ("CAUSAL", "1")],
            WsPlan::P2C6,
        ),
        ("gemm", vec![], WsPlan::GEMM),
        ("gemm", vec![("EPILOGUE", "swiglu")], WsPlan::GEMM),
        ("attention_bwd", vec![], WsPlan::P2C6),
    ] {
        let what = format!("{name} {defs:?} plan {}", plan.name);
        let before = spec(name, &defs);
        let after = ws(&before, &plan).unwrap_or_else(|e| panic!("{what}: {e}"));
        // Every kernel whose pipelined loops are at its top level is specialized (attention_bwd's
        // dK/dV loop sits inside the GQA group loop and stays a copy-group ring).
        assert!(
            count(&after, Opcode::WarpSpecialize) >= 1,
            "{what}: not warp-specialized"
        );
        if name != "attention_bwd" {
            assert!(
                count(&after, Opcode::AsyncWait) == 0,
                "{what}: copy groups left"
            );
        }
        differential(&what, &before, &after, 20);
    }
}

#[test]
fn fa3_consumers_walk_the_union_of_their_ranges() {
    // Causal and window ranges differ between the two consumers' query blocks: both walk the
    // union, each runs its own range, and the outputs stay bit-identical.
    for defs in [
        vec![("CAUSAL", "1")],
        vec![("CAUSAL", "1"), ("WINDOW", "1")],
        vec![("CAUSAL", "1"), ("KV_OFFSET", "1"), ("VARLEN", "1")],
    ] {
        let what = format!("attention_fwd {defs:?} fa3");
        let before = spec("attention_fwd", &defs);
        let after = ws(&before, &WsPlan::FA3).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(count(&after, Opcode::WarpSpecialize) == 1, "{what}");
        differential(&what, &before, &after, 20);
    }
    // gemm's A tiles depend on the tile axis the plan would split: refused with the reason.
    let before = spec("gemm", &[("TRANS_B", "1")]);
    let plan = WsPlan {
        split_axis: 1,
        ..WsPlan::FA3
    };
    let e = ws(&before, &plan).expect_err("A tiles differ per consumer");
    assert!(
        e.contains("grid axis 1") && e.contains("copies must agree"),
        "{e}"
    );
}

/// Golden IR of each scheduling pass's output, through `kirc check`'s entry point
/// (`pipeline::dump_after_with`): the ring and the partitions as a user sees them.
#[test]
fn golden_scheduled_ir() {
    use kir_backends::Target;
    use kir_compiler::internal::pipeline::{dump_after_with, WsChoice};
    let cases: &[(&str, &[(&str, &str)], &str, WsChoice)] = &[
        (
            "attention_fwd",
            &[("CAUSAL", "1")],
            "pipelining",
            WsChoice::Off,
        ),
        (
            "attention_fwd",
            &[("CAUSAL", "1")],
            "warp_specialize",
            WsChoice::Auto,
        ),
        (
            "attention_fwd",
            &[],
            "warp_specialize",
            WsChoice::Plan(WsPlan::FA3),
        ),
        ("gemm", &[], "warp_specialize", WsChoice::Plan(WsPlan::GEMM)),
        ("gemm", &[], "persistent", WsChoice::Off),
        (
            "attention_fwd",
            &[("CAUSAL", "1")],
            "dot_overlap",
            WsChoice::Off,
        ),
    ];
    for (op, defs, pass, ws) in cases {
        let src = kir_compiler::internal::oplib::builtin(op).expect("op");
        let d: Vec<(String, String)> = defs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let opts = kir_compiler::internal::plan::explore(
            Some(Target::Sm90a),
            pass,
            None,
            ws.clone(),
            None,
        );
        let text =
            dump_after_with(src, &d, pass, &opts).unwrap_or_else(|e| panic!("{op} {pass}: {e}"));
        let tag: String = defs.iter().map(|(a, b)| format!("_{a}{b}")).collect();
        let plan = match ws {
            WsChoice::Plan(p) => format!("_{}", p.name),
            _ => String::new(),
        };
        insta::assert_snapshot!(format!("sched__{op}{tag}__{pass}{plan}"), text);
    }
}
