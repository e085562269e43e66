//! The writer warp (backends/src/ptx/lower/writer.rs): in a warp-specialized attention_bwd dK/dV
//! kernel whose consumer adds dqᵀ by bulk reductions (`DETERMINISTIC=0`, or `ORDERED=1`), the
//! producer's second warp issues the reductions, spins on the ordered add's counter and gives
//! its signal, and the consumer only stages its rows and posts a message. Checked on the PTX
//! text (where each instruction sits) and by the pinned ptxas (assembles, no spill where the
//! kernel has the registers).

use kir_backends::Target;

const ISSUE: &str = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32";

/// attention_bwd's PTX on sm_90a with these constants, warp-specialized or not.
fn bwd_ptx(d: &[(&str, &str)], ws: bool) -> String {
    kir_tests::sm90a_op("attention_bwd", d, ws).text
}

/// The dK/dV kernel's PTX (entry to the end of its body) within `ptx`.
fn dkdv(ptx: &str) -> &str {
    kir_tests::entry_body(ptx, "attention_bwd_dkdv")
}

/// The consumer's code (from its label to the writer's) and the writer's (from its label to
/// the exit).
fn parts(k: &str) -> (&str, &str) {
    let cons = k.find("$L_ws_consumer").expect("the consumer's label");
    let w = k[cons..]
        .find("\n$L_ws_writer")
        .map(|i| cons + i)
        .expect("the writer's label");
    let exit = k[w..]
        .find("\n$L_ws_exit")
        .map(|i| w + i)
        .expect("the exit label");
    (&k[cons..w], &k[w..exit])
}

#[test]
fn the_producers_second_warp_issues_the_adds_spins_and_signals() {
    for (d, groups) in [("128", 2), ("64", 1)] {
        let ptx = bwd_ptx(&[("ORDERED", "1"), ("HEAD_DIM", d)], true);
        let k = dkdv(&ptx);
        let (cons, writer) = parts(k);
        // The consumer: on its writer path no issue, no counter spin, no signal; it waits for
        // the part to be read (an mbarrier), stages, fences and posts (arrivals on `full`).
        let slow = cons
            .find("\n$L_bulk_add_slow")
            .expect("the per-element path");
        let fast = &cons[..slow];
        let staging = fast.rfind("st.shared.v2.f32").expect("the staging stores");
        let before = &fast[..staging];
        assert!(
            before.contains("$L_writer_wait"),
            "d{d}: the consumer stages before the writer has read the part"
        );
        let after = &fast[staging..];
        for (what, s) in [
            ("fence", "fence.proxy.async.shared::cta;"),
            ("message", "st.shared.u64"),
            ("arrival", "mbarrier.arrive.shared::cta.b64 _,"),
        ] {
            assert!(after.contains(s), "d{d}: no {what} after the staging");
        }
        assert!(
            !fast.contains(ISSUE) && !fast.contains("ld.acquire.gpu"),
            "d{d}: the consumer issues a bulk reduction or spins on its writer path"
        );
        // The writer: its lane first, then per message the counter spin (acquire), a fence of
        // the async proxy, one issue per warpgroup, the read wait, the empty arrivals, and the
        // signal once the adds completed.
        assert!(
            writer.contains("%r5, 32;") || writer.contains(", 32;"),
            "d{d}: the writer is not the producer's second warp: {writer}"
        );
        let order = [
            "ld.acquire.gpu.global.s32",
            "fence.proxy.async.global;",
            ISSUE,
            "cp.async.bulk.wait_group.read 0;",
            "mbarrier.arrive.shared::cta.b64 _,",
            "cp.async.bulk.wait_group 0;",
            "red.release.gpu.global.add.s32",
        ];
        let mut at = 0;
        for s in order {
            let i = writer[at..]
                .find(s)
                .unwrap_or_else(|| panic!("d{d}: `{s}` not in order in the writer: {writer}"));
            at += i + s.len();
        }
        assert_eq!(
            writer.matches(ISSUE).count(),
            groups,
            "d{d}: one issue per warpgroup"
        );
        // Four arrivals a phase on each warpgroup's full barrier, one on its empty barrier.
        let inits: Vec<&str> = k
            .lines()
            .filter(|l| l.contains("mbarrier.init") && (l.ends_with(", 4;") || l.ends_with(", 1;")))
            .collect();
        assert!(
            inits.len() >= 2 * groups,
            "d{d}: the writer's barriers: {inits:#?}"
        );
        // The IR's `sem_signal` after the add is the writer's on the writer path: the
        // consumer's own deferred signal is lowered behind a branch on that path's predicate
        // (for the per-element path), and is given only where a signal is owed.
        let skip = cons
            .find("bra.uni $L_signal_by_writer")
            .unwrap_or_else(|| panic!("d{d}: no branch around the consumer's signal"));
        let label = cons
            .find("\n$L_signal_by_writer")
            .expect("the label after the consumer's signal");
        assert!(skip < label, "d{d}: the branch follows its label");
        kir_tests::ptxas::assemble(&format!("writer_ordered_d{d}"), &ptx, Target::Sm90a);
    }
}

#[test]
fn the_atomic_mode_posts_without_counters() {
    let ptx = bwd_ptx(&[("DETERMINISTIC", "0")], true);
    let (_, writer) = parts(dkdv(&ptx));
    assert_eq!(writer.matches(ISSUE).count(), 2);
    // The writer's code holds the spin and the signal (taken on a message's flags), but the
    // consumer posts no counter: its flags stay 0 but for the exit.
    let (cons, _) = parts(dkdv(&ptx));
    assert!(
        !cons.contains("ld.acquire.gpu"),
        "the atomic consumer spins"
    );
    kir_tests::ptxas::assemble("writer_atomic_d128", &ptx, Target::Sm90a);
}

#[test]
fn without_a_producer_warpgroup_the_consumer_issues() {
    // Unspecialized, each warpgroup's first thread issues its part, as before.
    let ptx = bwd_ptx(&[("ORDERED", "1")], false);
    let k = dkdv(&ptx);
    assert!(
        !k.contains("$L_ws_writer"),
        "a writer without warp specialization"
    );
    assert!(k.contains(ISSUE) && k.contains("ld.acquire.gpu.global.s32"));
}
