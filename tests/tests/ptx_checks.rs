//! Check-line tests for the PTX of the big kernels (`PTX_CHECKED_OPS`), whose full golden PTX is
//! kept for sm_80 only: on every target their PTX must match `tests/checks/<op>[.<target>].check` — the
//! `.version`/`.target` header, each kernel's `.maxntid`, the ring loops (the wait with its
//! pending count, the one barrier and the refill per stage), and the count of every key
//! instruction (mma.sync, ldmatrix, cp.async, bar.sync, shuffles, no wgmma) — and with the
//! pinned ptxas their registers and spill bytes must be those the file lists. The golden policy
//! itself is checked: every other op's PTX stays under `FULL_GOLDEN_BYTES` (so its full golden
//! stays reviewable), and no golden of a checked op is left for another target.

use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_tests::filecheck::{self, FULL_GOLDEN_BYTES, PTX_CHECKED_OPS};
use kir_tests::ptxas::assemble;
use std::collections::BTreeMap;

/// The check lines of each checked op: one file per group of targets whose PTX is alike
/// (`<op>.check`, and `<op>.<target>.check` for a target whose path differs).
const CHECKS: [(&str, &str); 12] = [
    (
        "attention_bwd",
        include_str!("../checks/attention_bwd.check"),
    ),
    (
        "attention_bwd",
        include_str!("../checks/attention_bwd.sm_120a.check"),
    ),
    (
        "attention_bwd",
        include_str!("../checks/attention_bwd.sm_90a.check"),
    ),
    (
        "attention_fwd",
        include_str!("../checks/attention_fwd.check"),
    ),
    (
        "attention_fwd",
        include_str!("../checks/attention_fwd.sm_90a.check"),
    ),
    ("gemm", include_str!("../checks/gemm.check")),
    ("gemm", include_str!("../checks/gemm.sm_90a.check")),
    ("gemm_nf4", include_str!("../checks/gemm_nf4.check")),
    (
        "layernorm_bwd",
        include_str!("../checks/layernorm_bwd.check"),
    ),
    (
        "layernorm_fwd",
        include_str!("../checks/layernorm_fwd.check"),
    ),
    ("rmsnorm_bwd", include_str!("../checks/rmsnorm_bwd.check")),
    ("rmsnorm_fwd", include_str!("../checks/rmsnorm_fwd.check")),
];

/// The PTX of `op` at its defaults on `target`.
fn ptx(op: &str, target: Target) -> String {
    let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
    compile(src, &[], None, target, Emit::Ptx)
        .unwrap_or_else(|e| panic!("{op} on {target}: {e}"))
        .text
}

/// The PTX of the module `src` on `target` (panics naming the target on an error).
fn compile_on(src: &str, target: Target) -> kir_compiler::internal::compile::Compiled {
    compile(src, &[], None, target, Emit::Ptx).unwrap_or_else(|e| panic!("{}: {e}", target.name()))
}

/// The targets a spec's `TARGETS:` line names.
fn targets(op: &str, spec: &str) -> Vec<Target> {
    filecheck::directives(spec, "TARGETS")
        .iter()
        .flat_map(|l| l.split_whitespace())
        .map(|n| Target::from_name(n).unwrap_or_else(|| panic!("{op}.check: target `{n}`")))
        .collect()
}

/// The `.version` of the checked kernels on `target`: the target's minimum, and 7.1 on sm_80
/// (their bf16 tensors are widened with `cvt.f32.bf16`, PTX 7.1).
fn version(target: Target) -> String {
    let (major, minor) = target.min_ptx_version().max((7, 1));
    format!("{major}.{minor}")
}

#[test]
fn big_kernels_match_their_check_lines() {
    let mut failures = Vec::new();
    for (op, spec) in CHECKS {
        let ts = targets(op, spec);
        assert!(!ts.is_empty(), "{op}.check names no target");
        for target in ts {
            let vars = [("version", version(target)), ("target", target.to_string())];
            let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
            if let Err(e) = filecheck::check(&ptx(op, target), spec, &vars) {
                failures.push(format!("{op} on {target}:\n  {}", e.join("\n  ")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Per kernel (its name: the entry symbol up to `_DTYPE`): registers and spill-store bytes, from
/// a `ptxas -v` log.
fn ptxas_usage(log: &str) -> BTreeMap<String, (u32, u32)> {
    let mut out = BTreeMap::new();
    let mut kernel: Option<String> = None;
    let mut spill = 0;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let sym = rest.split('\'').next().unwrap_or_default();
            kernel = Some(sym.split("_DTYPE").next().unwrap_or(sym).to_string());
        } else if let Some(bytes) = line
            .split(" bytes spill stores")
            .next()
            .filter(|_| line.contains("spill stores"))
        {
            spill = bytes
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(u32::MAX);
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let regs = rest
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if let Some(k) = kernel.take() {
                out.insert(k, (regs, spill));
            }
        }
    }
    out
}

#[test]
fn big_kernels_registers_and_spills() {
    let mut failures = Vec::new();
    for (op, spec) in CHECKS {
        // target → kernel → (registers, spill bytes), as the file pins them.
        let mut want: BTreeMap<Target, BTreeMap<String, (u32, u32)>> = BTreeMap::new();
        for line in filecheck::directives(spec, "PTXAS") {
            let f: Vec<&str> = line.split_whitespace().collect();
            let parsed = match f[..] {
                [t, k, r, s] => Target::from_name(t)
                    .zip(r.parse().ok())
                    .zip(s.parse().ok())
                    .map(|((t, r), s)| (t, k.to_string(), r, s)),
                _ => None,
            };
            let (t, k, r, s) =
                parsed.unwrap_or_else(|| panic!("{op}.check: bad PTXAS line `{line}`"));
            want.entry(t).or_default().insert(k, (r, s));
        }
        assert!(!want.is_empty(), "{op}.check pins no ptxas usage");
        for (target, kernels) in want {
            let log = assemble(op, &ptx(op, target), target);
            let got = ptxas_usage(&log);
            if got != kernels {
                failures.push(format!(
                    "{op} on {target}: (registers, spill bytes) {got:?}, the file pins {kernels:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The sm_90a attention_fwd defaults (compiler/src/configs.rs) with every optional feature, one
/// at a time and together, at each head dim, causal or not: ptxas assembles each without a
/// spilled byte. (The warp-specialized d128 tile spilled 844 bytes with an additive mask: that
/// combination takes the unspecialized tile, checked here.)
#[test]
fn attention_defaults_do_not_spill_with_any_feature() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let features: [&[(&str, &str)]; 7] = [
        &[],
        &[("VARLEN", "1")],
        &[("WINDOW", "1")],
        &[("SOFTCAP", "1")],
        &[("MASK", "1")],
        &[("OUT_LAYOUT", "bshd")],
        &[
            ("VARLEN", "1"),
            ("WINDOW", "1"),
            ("SOFTCAP", "1"),
            ("MASK", "1"),
            ("OUT_LAYOUT", "bshd"),
        ],
    ];
    let mut failures = vec![];
    for d in ["64", "128", "256"] {
        for causal in ["0", "1"] {
            for f in features {
                let mut defs = vec![("DTYPE", "bf16"), ("HEAD_DIM", d), ("CAUSAL", causal)];
                defs.extend_from_slice(f);
                let defs: Vec<(String, String)> = defs
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect();
                let what = format!("attention_fwd {defs:?}");
                let text = compile(src, &defs, None, Target::Sm90a, Emit::Ptx)
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
                    .text;
                let log = assemble("attention_fwd", &text, Target::Sm90a);
                for (k, (_, spill)) in ptxas_usage(&log) {
                    if spill != 0 {
                        failures.push(format!("{what}: {k} spills {spill} bytes"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Full goldens stay small, and every big kernel is checked with check lines instead.
#[test]
fn golden_policy() {
    let mut checked: Vec<&str> = CHECKS.iter().map(|(op, _)| *op).collect();
    checked.dedup();
    assert_eq!(checked, PTX_CHECKED_OPS, "check lines for every checked op");
    // Every target of a checked op is checked by exactly one file.
    for op in PTX_CHECKED_OPS {
        for target in Target::ALL {
            let n = CHECKS
                .iter()
                .filter(|(o, spec)| *o == op && targets(o, spec).contains(&target))
                .count();
            assert_eq!(n, 1, "{op} on {target}: {n} check files name the target");
        }
    }
    let snapshots = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots");
    for (op, _) in kir_compiler::internal::oplib::builtins() {
        for target in Target::ALL {
            let golden = format!("{snapshots}/ptx__ptx__{op}__{}.snap", target.name());
            let exists = std::path::Path::new(&golden).exists();
            if PTX_CHECKED_OPS.contains(&op) {
                assert_eq!(
                    exists,
                    target == Target::Sm80,
                    "{op} keeps a full golden on sm_80 only: {golden}"
                );
            } else {
                let bytes = ptx(op, target).len();
                assert!(
                    bytes < FULL_GOLDEN_BYTES,
                    "{op} on {target}: {bytes} bytes of PTX; past {FULL_GOLDEN_BYTES} it belongs in PTX_CHECKED_OPS with a tests/checks/{op}.check"
                );
                assert!(exists, "{op} keeps a full golden on {target}: {golden}");
            }
        }
    }
}

/// A float → integer cast is NaN → 0 on every target, as the interpreter defines it (docs/ir.md):
/// the conversion is followed by a NaN test that selects 0 (the hardware's s64 conversion gives
/// i64::MIN for NaN: found by the random-program generator on the H200, seeds 977, 1231, 1412,
/// 1617, 1842 and 2268).
#[test]
fn float_to_int_casts_send_nan_to_zero() {
    let src = "module c\n\nkernel @c(x: in tensor<f32>[N], y: out tensor<i64>[N], z: out tensor<i32>[N]) grid [cdiv(N, 64), 1, 1] {\n  %p = program_id 0 : i32\n  %b = const 64 : i32\n  %o = mul %p, %b : i32\n  %t = load x[%o] other 0.0 : tile<64xf32>\n  %a = cast %t : tile<64xi64>\n  store y[%o], %a guard\n  %c = cast %t : tile<64xi32>\n  store z[%o], %c guard\n}\n";
    for target in Target::ALL {
        let out = compile_on(src, target);
        for (cvt, sel) in [
            ("cvt.rzi.s64.f32", "selp.b64"),
            ("cvt.rzi.s32.f32", "selp.b32"),
        ] {
            let spec = format!("CHECK: {cvt}\nCHECK-NEXT: setp.nan.f32\nCHECK-NEXT: {sel}");
            let lines: Vec<&str> = out.text.lines().map(str::trim).collect();
            let at = lines
                .iter()
                .position(|l| l.starts_with(cvt))
                .unwrap_or_else(|| panic!("{}: no {cvt}", target.name()));
            assert!(
                lines[at + 1].starts_with("setp.nan.f32") && lines[at + 2].starts_with(sel),
                "{}: {spec}\n{}",
                target.name(),
                lines[at..at + 3].join("\n")
            );
        }
    }
}

/// Accesses of one tensor spread differently over the block's threads are ordered by a block
/// barrier (backends/src/ptx/store_order.rs): a scalar store (thread 0's) and a later tile store
/// over the same elements, a tile store and a later load of another layout, and stores of two
/// distributions in a loop body (the barrier at every iteration's first store). Same-layout
/// stores get none. Found by the random-program generator on the H200 (seeds 285, 332, 820,
/// 872, 902, 1096, 1895, 2251, 2322: every thread stored the scalar, and a warp that ran late
/// overwrote the tile's element).
#[test]
fn stores_of_one_tensor_by_different_threads_are_ordered() {
    let src = "module s\n\nkernel @s(x: in tensor<f32>[M, N], y: out tensor<f32>[M, N]) grid [1, 1, 1] {\n  %z = const 0 : i32\n  %c = const 7.0 : f32\n  store y[%z, %z], %c guard\n  %t = load x[%z, %z] other 0.0 : tile<8x8xf32>\n  store y[%z, %z], %t guard\n  %u = load y[%z, %z] other 0.0 : tile<8xf32>\n  %one = const 1 : i32\n  %n = const 3 : i32\n  for %i = %z to %n step %one {\n    store y[%i, %z], %u guard\n    store y[%i, %z], %c guard\n  }\n}\n";
    for target in Target::ALL {
        let out = compile_on(src, target);
        let lines: Vec<&str> = out.text.lines().map(str::trim).collect();
        let stores: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("st.global"))
            .collect();
        let bars = |a: usize, b: usize| {
            lines[a..b]
                .iter()
                .filter(|l| l.starts_with("bar.sync 0"))
                .count()
        };
        let loads_y: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("ld.global"))
            .collect();
        let name = target.name();
        // The scalar store is predicated (thread 0), then a barrier before the tile's stores.
        assert!(
            lines[stores[0]].starts_with('@'),
            "{name}: {}",
            lines[stores[0]]
        );
        assert_eq!(bars(stores[0], stores[1]), 1, "{name}: scalar then tile");
        // The tile's stores, then a barrier before y is read back in another layout.
        let last_tile_store = stores[1..]
            .iter()
            .copied()
            .take_while(|&i| i < *loads_y.last().unwrap())
            .last()
            .unwrap();
        assert_eq!(
            bars(last_tile_store, *loads_y.last().unwrap()),
            1,
            "{name}: tile then load"
        );
        // In the loop: a barrier between the two stores and one at the top of each iteration.
        let top = lines
            .iter()
            .rposition(|l| l.starts_with("$L_for_"))
            .expect("loop");
        let end = lines
            .iter()
            .rposition(|l| l.starts_with("$L_endfor_"))
            .expect("loop end");
        assert_eq!(
            bars(top, end),
            2,
            "{name}: two distributions in the loop body"
        );
    }
}

/// Causal attention's TMA ring on sm_90a refills on the filling warp alone, as the non-causal
/// ring does: the copies' row-prefix masks (`keys < hi`) are tile ops, and a producer block that
/// kept them ran on every thread, so every thread waited for the stage's release — a
/// block-wide wait each iteration that ended the two warpgroups' ping-pong (9–10 % of causal
/// d128 and d256 on the H200, docs/history/benchmarks-log.md). Every tensor copy and `expect_tx`
/// arrival sits between `@!%p bra.uni $L_producer_end_N` (a branch uniform in each warp: on one
/// thread it diverged inside the warp and ptxas kept the loop's wgmma descriptors in thread
/// registers, backends/src/ptx/lower/producer.rs) and its label, predicated on the lane that
/// the region's `elect.sync` elects, and the loop's refill region holds the wait for the
/// stage's release. Each fill of a masked (causal) ring stores the stage's valid-row count
/// there, on the same lane, before its `expect_tx` arrival.
#[test]
fn causal_ring_refills_on_the_filling_warp() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    for d in ["64", "128", "256"] {
        for causal in ["0", "1"] {
            let what = format!("attention_fwd d{d} causal {causal}");
            let defs: Vec<(String, String)> =
                [("DTYPE", "bf16"), ("HEAD_DIM", d), ("CAUSAL", causal)]
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect();
            let text = compile(src, &defs, None, Target::Sm90a, Emit::Ptx)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .text;
            if let Some(at) = text.find("\n$L_ws_consumer") {
                // A warp-specialized default (d128): every fill is the producer's, before the
                // consumer's code; the consumer only waits and releases.
                let consumer = &text[at..];
                assert!(
                    !consumer.contains("cp.async.bulk.tensor")
                        && !consumer.contains("mbarrier.arrive.expect_tx"),
                    "{what}: a fill in the consumer"
                );
                assert!(text[..at].contains("cp.async.bulk.tensor"), "{what}");
                continue;
            }
            let (mut open, mut regions, mut waits_inside, mut copies) = (None, 0, 0, 0);
            let (mut arrivals, mut counts) = (0, 0);
            let mut lead: Option<String> = None;
            for line in text.lines().map(str::trim) {
                if let Some(l) = line
                    .strip_suffix(';')
                    .and_then(|l| l.split("bra.uni ").nth(1))
                {
                    if l.starts_with("$L_producer_end_") && line.starts_with("@!%p") {
                        assert!(open.is_none(), "{what}: nested producer regions");
                        open = Some(l.to_string());
                        lead = None;
                        continue;
                    }
                }
                assert!(
                    !line.contains("bra $L_producer_end_"),
                    "{what}: a producer region entered by a branch that may diverge: {line}"
                );
                if open.as_deref().is_some_and(|l| line == format!("{l}:")) {
                    open = None;
                    regions += 1;
                    continue;
                }
                if open.is_some() {
                    if let Some(p) = line
                        .strip_prefix("elect.sync _|")
                        .and_then(|r| r.split(',').next())
                    {
                        lead = Some(format!("@{p} "));
                    }
                }
                let fill = line.contains("cp.async.bulk.tensor")
                    || line.contains("mbarrier.arrive.expect_tx");
                if fill {
                    copies += 1;
                    assert!(
                        open.is_some(),
                        "{what}: a fill outside a producer region: {line}"
                    );
                    assert!(
                        lead.as_deref().is_some_and(|p| line.starts_with(p)),
                        "{what}: a fill not on the elected lane: {line}"
                    );
                }
                if open.is_some() && line.starts_with("mbarrier.try_wait.parity") {
                    waits_inside += 1;
                }
                if line.contains("mbarrier.arrive.expect_tx") {
                    arrivals += 1;
                }
                if open.is_some() && line.contains("st.shared.u32") {
                    assert!(
                        lead.as_deref().is_some_and(|p| line.starts_with(p)),
                        "{what}: a valid-row count not stored by the elected lane: {line}"
                    );
                    counts += 1;
                }
            }
            assert!(
                copies > 0 && regions >= 2,
                "{what}: {copies} fills in {regions} regions"
            );
            assert!(
                waits_inside >= 1,
                "{what}: the release wait is not the filling warp's"
            );
            // A masked ring's fill stores its valid-row count for the readers (tma_rows.rs).
            let want = if causal == "1" { arrivals } else { 0 };
            assert_eq!(counts, want, "{what}: valid-row counts stored by the fills");
        }
    }
}

/// A loop's yield is a parallel copy (backends/src/ptx/control.rs, `iteration`): yielding a
/// carried argument into a later slot (`yield %s, %x`, so `%y` takes the old `%x`) must read
/// `%x` before its register is overwritten. The PTX of the back edge is replayed symbolically:
/// every `mov` copies a symbol, every other instruction defines a fresh one; the slot of `%y` must
/// end holding the value `%x` had when the iteration began. (The paired `dot_overlap` carries the
/// stage of the pending block this way; reading the new stage released the wrong one and hung.)
#[test]
fn loop_yields_are_parallel_copies() {
    let src = "module y\n\nkernel @y(o: out tensor<i32>[2]) grid [1, 1, 1] {\n  %n = const 10 : i32\n  %zero = const 0 : i32\n  %one = const 1 : i32\n  %a, %b = for %i = %zero to %n step %one iter(%x = %one, %y = %zero) : i32, i32 {\n    %s = add %x, %i : i32\n    yield %s, %x\n  }\n  store o[%zero], %a\n  store o[%one], %b\n}\n";
    for target in Target::ALL {
        let out = compile_on(src, target);
        let lines: Vec<&str> = out.text.lines().map(str::trim).collect();
        let top = lines
            .iter()
            .position(|l| l.starts_with("$L_for"))
            .unwrap_or_else(|| panic!("{}: no loop", target.name()));
        let back = top
            + lines[top..]
                .iter()
                .position(|l| l.starts_with("bra.uni $L_for"))
                .expect("back edge");
        // The iteration variable's increment follows the yield's copies.
        let inc = (top..back)
            .rev()
            .find(|&i| lines[i].starts_with("add.s32"))
            .expect("increment");
        let movs: Vec<usize> = (top..inc)
            .filter(|&i| lines[i].starts_with("mov.b32"))
            .collect();
        let (&y_at, &x_at) = (movs.last().expect("movs"), &movs[movs.len() - 2]);
        let dst = |i: usize| {
            lines[i]
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .trim_end_matches(',')
        };
        let (x_reg, y_reg) = (dst(x_at), dst(y_at));
        let mut sym: BTreeMap<String, String> = BTreeMap::new();
        for (i, l) in lines.iter().enumerate().take(inc).skip(top + 1) {
            let mut parts = l.trim_end_matches(';').split_whitespace();
            let opc = parts.next().unwrap_or("");
            let ops: Vec<String> = parts.map(|p| p.trim_end_matches(',').to_string()).collect();
            let Some(d) = ops.first().filter(|d| d.starts_with('%')) else {
                continue;
            };
            let v = if opc.starts_with("mov.") {
                let s = ops.get(1).cloned().unwrap_or_default();
                sym.get(&s).cloned().unwrap_or(format!("in:{s}"))
            } else {
                format!("def:{i}")
            };
            sym.insert(d.clone(), v);
        }
        assert_eq!(
            sym.get(y_reg).map(String::as_str),
            Some(format!("in:{x_reg}").as_str()),
            "{}: %y must take %x's value from the start of the iteration\n{}",
            target.name(),
            lines[top..=back].join("\n")
        );
    }
}

/// The sm_90a defaults of attention_fwd (d64/128/256, causal or not) and gemm lower no `if`
/// while a wgmma group is in flight (`PtxReport::joins_in_flight`): ptxas retires the groups in
/// flight where branches join, which silently serializes what the schedule meant to overlap.
#[test]
fn no_branch_joins_under_a_wgmma_group_in_the_defaults() {
    let mut cases: Vec<(&str, Vec<(String, String)>)> = vec![("gemm", vec![])];
    for d in ["64", "128", "256"] {
        for c in ["0", "1"] {
            let defs = [("HEAD_DIM", d), ("CAUSAL", c)];
            let defs = defs.iter().map(|(a, b)| (a.to_string(), b.to_string()));
            cases.push(("attention_fwd", defs.collect()));
        }
    }
    for (op, defs) in cases {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
        let out = compile(src, &defs, None, Target::Sm90a, Emit::Ptx)
            .unwrap_or_else(|e| panic!("{op} {defs:?}: {e}"));
        for r in &out.reports {
            assert_eq!(r.joins_in_flight, vec![], "{op} {defs:?}: {}", r.kernel);
        }
    }
}

/// Paired wgmma groups (backends/src/ptx/lower/wgmma_pair.rs): on sm_90a, attention_bwd's dK/dV
/// kernel issues dpᵀ right after sᵀ, one commit left in flight for the next dot's wait, at head
/// dim 128, whose shared memory allows two blocks per SM, and so does dQ with dp after s; at head
/// dim 64 (four blocks' worth of shared memory, so registers set the occupancy) neither hoists.
#[test]
fn wgmma_pairs_hoist_only_where_shared_memory_bounds_the_blocks() {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    // At d128 both kernels hold one block per SM for their shared memory: the dK/dV kernel
    // leaves one group in flight, the dQ kernel (128-row programs over 128-key blocks) three; at
    // d64 (several blocks per SM) none.
    for (hd, wants) in [("128", [1, 3]), ("64", [0, 0])] {
        let defs = vec![("HEAD_DIM".to_string(), hd.to_string())];
        let text = compile(src, &defs, None, Target::Sm90a, Emit::Ptx)
            .unwrap_or_else(|e| panic!("d{hd}: {e}"))
            .text;
        for (kernel, want) in ["attention_bwd_dkdv_", "attention_bwd_dq_"]
            .into_iter()
            .zip(wants)
        {
            let body: Vec<&str> = text
                .lines()
                .skip_while(|l| !l.starts_with(&format!(".visible .entry {kernel}")))
                .take_while(|l| *l != "}")
                .collect();
            assert!(body.len() > 100, "d{hd}: no {kernel} kernel");
            // A commit not followed by a wait leaves its group in flight for the next dot.
            let in_flight = body
                .windows(2)
                .filter(|w| {
                    w[0].contains("wgmma.commit_group") && !w[1].contains("wgmma.wait_group")
                })
                .count();
            assert_eq!(in_flight, want, "d{hd} {kernel}: groups left in flight");
        }
    }
}
