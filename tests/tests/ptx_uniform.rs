//! Two PTX forms that exist for the instruction count of the Hopper kernels (docs/backends.md,
//! "Uniform warp index" and "Row vectors into the accumulator layout"):
//! - the prologue of every kernel that issues wgmma (sm_90a) broadcasts the warp index from
//!   lane 0 (`shfl.sync.idx` of `tid >> 5`), so ptxas keeps the wgmma descriptors in uniform
//!   registers; other kernels and targets keep the plain shift (on sm_100a the broadcast cost
//!   attention_bwd a spill);
//! - attention_bwd's dK/dV kernel reads lse and delta, broadcast into its accumulator's columns,
//!   as pair loads (`ld.global.v2.f32` at constant offsets from one address) behind one bounds
//!   and alignment test, with the per-column loads as the other path, unspecialized (d64, d128)
//!   or warp-specialized (d256).

use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_tests::defs;

/// The PTX of built-in `op` at `d` for `target`.
fn ptx(op: &str, d: &[(&str, &str)], target: Target) -> String {
    let src = kir_compiler::internal::oplib::builtin(op).unwrap_or_else(|| panic!("no op {op}"));
    compile(src, &defs(d), None, target, Emit::Ptx)
        .unwrap_or_else(|e| panic!("{op} {d:?} on {target}: {e}"))
        .text
}

/// The body of the kernel whose entry name starts with `name`.
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let at = ptx
        .find(&format!(".entry {name}"))
        .unwrap_or_else(|| panic!("no entry {name}"));
    let end = ptx[at..].find("\n}").map_or(ptx.len(), |e| at + e);
    &ptx[at..end]
}

/// Per entry of `ptx`: whether it issues wgmma, and whether the warp index `tid >> 5` is
/// broadcast by the shuffle that follows the shift (`shr.u32 %rW, %r0, 5;` then
/// `shfl.sync.idx.b32 %rX, %rW, 0, 31, -1;`).
fn broadcasts(ptx: &str) -> Vec<(bool, bool)> {
    ptx.split(".entry ")
        .skip(1)
        .map(|k| {
            let lines: Vec<&str> = k.lines().map(str::trim).collect();
            let shift = lines
                .iter()
                .position(|l| l.starts_with("shr.u32") && l.ends_with(", %r0, 5;"))
                .expect("every kernel computes its warp index");
            let w = lines[shift]
                .trim_start_matches("shr.u32 ")
                .split(',')
                .next()
                .expect("the shift's destination");
            let next = lines[shift + 1];
            let broadcast = next.starts_with("shfl.sync.idx.b32 ")
                && next.ends_with(&format!(", {w}, 0, 31, -1;"));
            (k.contains("wgmma.mma_async"), broadcast)
        })
        .collect()
}

#[test]
fn the_warp_index_is_broadcast_in_wgmma_kernels_only() {
    let cases: [(&str, &[(&str, &str)]); 4] = [
        ("gemm", &[]),
        ("attention_fwd", &[("HEAD_DIM", "128")]),
        ("attention_bwd", &[("HEAD_DIM", "64")]),
        ("rmsnorm_fwd", &[]),
    ];
    let mut wgmma_kernels = 0;
    for (op, d) in cases {
        for target in [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a] {
            let b = broadcasts(&ptx(op, d, target));
            assert!(!b.is_empty(), "{op} on {target}: no kernel");
            for (i, &(wgmma, broadcast)) in b.iter().enumerate() {
                wgmma_kernels += usize::from(wgmma);
                assert_eq!(
                    broadcast, wgmma,
                    "{op} {d:?} on {target}, kernel {i}: wgmma {wgmma}, broadcast {broadcast}"
                );
            }
        }
    }
    // gemm, attention_fwd, and attention_bwd's dK/dV and dQ kernels on sm_90a; the
    // preprocess kernel and rmsnorm_fwd there have no wgmma.
    assert_eq!(wgmma_kernels, 4);
}

#[test]
fn lse_and_delta_take_pair_loads_in_the_dkdv_kernel() {
    for hd in ["64", "128", "256"] {
        let all = ptx("attention_bwd", &[("HEAD_DIM", hd)], Target::Sm90a);
        let k = entry(&all, "attention_bwd_dkdv");
        // d256's kernel is the warp-specialized one: its consumer takes the pairs too.
        assert_eq!(k.contains("setmaxnreg"), hd == "256", "d{hd}: warp roles");
        // Two vectors (lse and delta), BLOCK_M = 64 columns each: a thread's 16 columns are 8
        // pairs, at offsets 0, 32, …, 224 bytes from one address.
        let pairs: Vec<&str> = k
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("ld.global.v2.f32"))
            .collect();
        assert_eq!(pairs.len(), 16, "d{hd}: {pairs:#?}");
        for (i, l) in pairs.iter().enumerate() {
            let off = 32 * (i % 8);
            assert!(l.ends_with(&format!("+{off}];")), "d{hd}: pair {i}: {l}");
        }
        // Each behind its test, with the per-column loads as the other path.
        assert_eq!(k.matches("$L_row_reload_cols").count(), 4, "d{hd}");
        assert_eq!(k.matches("$L_row_reload_done").count(), 4, "d{hd}");
        assert!(
            k.contains("@%p") && k.contains("ld.global.f32"),
            "d{hd}: no fallback"
        );
    }
}

/// The `shfl.sync.bfly` lines of `lines` (trimmed), each with whether it feeds an add (a row
/// sum's step: `add.f32` within the three lines after the shuffle) rather than a max.
fn butterflies(lines: &[&str]) -> Vec<bool> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("shfl.sync.bfly"))
        .map(|(i, _)| {
            lines[i + 1..(i + 4).min(lines.len())]
                .iter()
                .any(|l| l.starts_with("add.f32"))
        })
        .collect()
}

/// attention_fwd's online-softmax row sum stays quad partials through the key loop
/// (docs/backends.md, "Row sums kept as quad partials"): on every target the loop's shuffles
/// are the row max's alone, and the sum's come once, after the loop ends.
#[test]
fn the_softmax_row_sum_is_reduced_once_after_the_key_loop() {
    for target in Target::ALL {
        for d in [vec![], vec![("CAUSAL", "1")], vec![("HEAD_DIM", "64")]] {
            let text = ptx("attention_fwd", &d, target);
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            let is_head = |l: &&str| l.starts_with("$L_for") || l.starts_with("$L_pfor");
            let is_end = |l: &&str| l.starts_with("$L_endfor") || l.starts_with("$L_endpfor");
            // Every loop (a head and the next end) whose body shuffles: the consumer's key
            // loop (a warp-specialized kernel's producer loop has none).
            let mut loops = vec![];
            let mut at = 0;
            while let Some(h) = lines[at..].iter().position(is_head) {
                let head = at + h;
                let Some(e) = lines[head..].iter().position(is_end) else {
                    break;
                };
                let end = head + e;
                let inside = butterflies(&lines[head..end]);
                if !inside.is_empty() {
                    loops.push((end, inside));
                }
                at = end;
            }
            let (end, inside) = loops
                .last()
                .unwrap_or_else(|| panic!("{d:?} on {target}: no key loop that shuffles"));
            let after = butterflies(&lines[*end..(*end + 60).min(lines.len())]);
            assert!(
                inside.iter().all(|&sum| !sum),
                "{d:?} on {target}: a row sum's shuffle inside the key loop ({inside:?})"
            );
            assert!(
                after.iter().filter(|&&sum| sum).count() >= 2,
                "{d:?} on {target}: no quad reduction of the row sum after the loop ({after:?})"
            );
        }
    }
}
