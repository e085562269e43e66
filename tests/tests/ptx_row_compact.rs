//! Row vectors kept compact in a warp-specialized consumer (backends/src/ptx/lower/row_compact.rs):
//! in attention_bwd's warp-specialized dK/dV kernel, lse and delta (64 query columns each) are
//! loaded two columns a lane and spread into the key-major accumulator layout by shuffles with
//! an immediate source lane where each is used, instead of 16 registers a vector loaded at the
//! top of the loop body, where the consumer is short of registers (the five-dot kernel at
//! d128); the d64 and d256 consumers and the unspecialized kernels keep the per-thread pair
//! loads. Checked on the PTX text and by the pinned ptxas (no spill in the five-dot atomic
//! kernel at d128).

/// The shuffle of a compact vector's column: segment mask 3, clamp 31 (`(3 << 8) | 31`).
const SPREAD: &str = ", 799, -1;";

/// attention_bwd's PTX on sm_90a with these constants, warp-specialized or not.
fn bwd_ptx(d: &[(&str, &str)], ws: bool) -> String {
    compile(d, ws).text
}

/// attention_bwd compiled for sm_90a (PTX and reports) with these constants.
fn compile(d: &[(&str, &str)], ws: bool) -> kir_compiler::internal::compiled::Compiled {
    kir_tests::sm90a_op("attention_bwd", d, ws)
}

/// How many row vectors the dK/dV kernel's report lists as kept compact.
fn reported(out: &kir_compiler::internal::compiled::Compiled) -> usize {
    out.reports
        .iter()
        .find(|r| r.kernel == "attention_bwd_dkdv")
        .expect("the dK/dV kernel's report")
        .compact_rows
        .len()
}

/// The dK/dV kernel's PTX (entry to the end of its body) within `ptx`.
fn dkdv(ptx: &str) -> &str {
    kir_tests::entry_body(ptx, "attention_bwd_dkdv")
}

/// The shuffles that spread compact vectors, with the source lane (4j) of each.
fn spreads(k: &str) -> Vec<u32> {
    k.lines()
        .filter(|l| l.contains("shfl.sync.idx.b32") && l.ends_with(SPREAD))
        .map(|l| {
            let ops: Vec<&str> = l.split(',').map(str::trim).collect();
            ops[2].parse().expect("an immediate source lane")
        })
        .collect()
}

#[test]
fn the_d128_five_dot_consumer_spreads_lse_and_delta_by_shuffles() {
    for mode in [("DETERMINISTIC", "0"), ("ORDERED", "1")] {
        let out = compile(&[mode], true);
        assert_eq!(
            reported(&out),
            2,
            "{mode:?}: the report's compact row vectors"
        );
        let k = dkdv(&out.text);
        let lanes = spreads(k);
        // Two vectors, 16 columns each (8 lanes 4j, two registers per lane), per body.
        assert!(
            !lanes.is_empty() && lanes.len().is_multiple_of(32),
            "{mode:?}: {} spreading shuffles",
            lanes.len()
        );
        for j in 0..8u32 {
            let n = lanes.iter().filter(|&&l| l == 4 * j).count();
            assert_eq!(
                n * 8,
                lanes.len(),
                "{mode:?}: lane {} read {n} times",
                4 * j
            );
        }
        // The vectors are read two columns a lane, not as the per-thread pairs.
        assert!(
            !k.contains("ld.global.v2.f32"),
            "{mode:?}: per-thread pair loads in the consumer"
        );
    }
}

#[test]
fn consumers_with_registers_to_spare_and_unspecialized_kernels_keep_the_pair_loads() {
    let cases: [(&[(&str, &str)], bool); 4] = [
        (&[("HEAD_DIM", "64")], false),
        (&[("HEAD_DIM", "128")], false),
        // d64's five-dot consumer: 160 accumulator registers and 32 for the vectors.
        (&[("HEAD_DIM", "64"), ("DETERMINISTIC", "0")], true),
        // d256's default: the two consumers' dk and dv dots sit under their role's branch.
        (&[("HEAD_DIM", "256")], true),
    ];
    for (d, ws) in cases {
        let out = compile(d, ws);
        assert_eq!(reported(&out), 0, "{d:?} ws {ws}: reported compact");
        let k = dkdv(&out.text);
        assert!(spreads(k).is_empty(), "{d:?} ws {ws}: compact vectors");
        assert!(
            k.contains("ld.global.v2.f32"),
            "{d:?} ws {ws}: no pair loads"
        );
    }
}

#[test]
fn the_five_dot_atomic_kernel_at_d128_does_not_spill() {
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)")
    });
    for causal in ["0", "1"] {
        let ptx = bwd_ptx(&[("DETERMINISTIC", "0"), ("CAUSAL", causal)], true);
        let (_, log) = kir_backends::nvrtc::assemble(&ptxas, &ptx, "sm_90a")
            .unwrap_or_else(|e| panic!("causal {causal}: {e}"));
        // ptxas reports each entry's properties after the line that names it.
        let at = log
            .find("Function properties for attention_bwd_dkdv")
            .unwrap_or_else(|| panic!("causal {causal}: no dK/dV kernel in\n{log}"));
        let log = &log[at..];
        let spill = log
            .lines()
            .find(|l| l.contains("spill stores"))
            .unwrap_or_else(|| panic!("causal {causal}: no spill line in\n{log}"));
        assert!(
            spill.contains(" 0 bytes spill stores, 0 bytes spill loads"),
            "causal {causal}: {spill}"
        );
    }
}
