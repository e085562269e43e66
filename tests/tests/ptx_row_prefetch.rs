//! Row vectors of a ping-pong loop read one iteration ahead
//! (backends/src/ptx/lower/row_prefetch.rs): in attention_bwd's 128-key dK/dV kernel on sm_90a
//! (two warpgroups taking turns), lse and delta of the first query step are loaded before the
//! loop, and each step loads the next step's right after issuing its last issue group (dk and
//! dv), before waiting for it; the top of the step reads none. Kernels without ping-pong turns
//! (the 64-key d64 kernel on 4 warps) keep the loads at the top of the step. Checked on the PTX
//! text; the spill tests (attention_spills.rs, attention_bwd_wgmma.rs) assemble the kernels.

/// One f32 column pair of a row vector, read from global memory.
const PAIR: &str = "ld.global.v2.f32";

/// The dK/dV kernel's PTX lines of attention_bwd on sm_90a with these constants.
fn dkdv_lines(d: &[(&str, &str)]) -> Vec<String> {
    let out = kir_tests::sm90a_op("attention_bwd", d, false);
    kir_tests::entry_body(&out.text, "attention_bwd_dkdv")
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

/// The 128-key tiles of the d128 default at long sequences.
fn key128(causal: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("BLOCK_KV", "128"),
        ("BLOCK_M", "64"),
        ("BLOCK_MQ", "128"),
        ("BLOCK_N", "128"),
        ("CAUSAL", causal),
    ]
}

/// For each `wgmma.wait_group 0`, the pair loads between it and the `bar.arrive` before it.
fn loads_before_waits(lines: &[String]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut since_arrive: Option<usize> = None;
    for l in lines {
        if l.contains("bar.arrive") {
            since_arrive = Some(0);
        } else if l.starts_with(PAIR) {
            since_arrive = since_arrive.map(|n| n + 1);
        } else if l == "wgmma.wait_group.sync.aligned 0;" {
            if let Some(n) = since_arrive.take() {
                out.push(n);
            }
        }
    }
    out
}

#[test]
fn the_128_key_kernel_loads_the_next_steps_lse_and_delta_under_its_last_issue_group() {
    for causal in ["0", "1"] {
        let lines = dkdv_lines(&key128(causal));
        let pairs = lines.iter().filter(|l| l.starts_with(PAIR)).count();
        // Two vectors of 64 query columns, 16 per thread in 8 pairs: before the loop and in
        // the body's last issue group, not at the top of the step.
        assert_eq!(pairs, 32, "causal {causal}: pair loads in the kernel");
        let waits = loads_before_waits(&lines);
        assert!(
            waits.contains(&16),
            "causal {causal}: no wait with both vectors' next loads after its turn's hand-on: {waits:?}"
        );
        // The step's first issue group waits with no row vector load after its hand-on.
        assert!(
            waits.contains(&0),
            "causal {causal}: the first issue group's wait: {waits:?}"
        );
        let top = lines
            .iter()
            .position(|l| l.starts_with("$L_for_") && l.ends_with(':'))
            .expect("a loop");
        let first_issue = lines[top..]
            .iter()
            .position(|l| l.starts_with("wgmma.fence"))
            .expect("a wgmma in the loop")
            + top;
        let inner_top = lines[..first_issue]
            .iter()
            .rposition(|l| l.starts_with("$L_for_") && l.ends_with(':'))
            .expect("the loop around the first wgmma");
        assert_eq!(
            lines[inner_top..first_issue]
                .iter()
                .filter(|l| l.starts_with(PAIR))
                .count(),
            0,
            "causal {causal}: the step's top reads lse or delta from global memory"
        );
    }
}

#[test]
fn kernels_without_turns_keep_the_loads_at_the_top_of_the_step() {
    let lines = dkdv_lines(&[("HEAD_DIM", "64")]);
    let pairs = lines.iter().filter(|l| l.starts_with(PAIR)).count();
    // One set of loads, at the top of the step (read ahead, there would be two).
    assert_eq!(pairs, 16, "d64: pair loads in the kernel");
    assert!(
        !lines.iter().any(|l| l.contains("bar.arrive")),
        "d64: the kernel takes turns"
    );
}
