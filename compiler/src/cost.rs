//! The time model that decides fusion by what the kernels' schedules will be, not by bytes
//! alone: each launch of a lowered program costs the larger of its tensor-core work at the rate
//! of the path its dots took (wgmma in a warp-specialized kernel, wgmma, mma.sync, FMA) and its
//! global traffic at the target's bandwidth, plus a launch overhead. Work and traffic come from
//! [`crate::traffic`] with every program dim at the fusion pass's nominal size; the rates are
//! fractions of [`Target::dense_tensor_flops`] measured on the H200 (docs/passes.md,
//! "Fusion by cost"), and the bandwidth is [`Target::dram_bytes_per_s`].
//!
//! The model compares two lowerings of one program (fused and unfused) on one target; its
//! absolute times are estimates, its ratios are what the decision uses.

use crate::passes::NOMINAL_DIM;
use crate::traffic;
use kir_backends::ptx::report::DotPath;
use kir_backends::ptx::PtxReport;
use kir_backends::Target;
use kir_ir::edit;
use kir_ir::{Block, Kernel, Module, Opcode};
use std::collections::HashSet;

/// The fraction of the target's dense tensor-core rate that a kernel's dots reach on each path:
/// the H200's GEMM 8192³ at its defaults (wgmma, warp-specialized, persistent: 697 TFLOP/s of
/// 989), unspecialized wgmma rings (507–543), mma.sync with a cp.async ring (a user's matmul
/// without the per-target configuration: 137–159), and FMA loops on the CUDA cores.
fn path_efficiency(path: DotPath, warp_specialized: bool) -> f64 {
    match (path, warp_specialized) {
        (DotPath::Wgmma, true) => 0.70,
        (DotPath::Wgmma, false) => 0.53,
        (DotPath::MmaSync, _) => 0.14,
        (DotPath::Fma, _) => 0.02,
    }
}

/// The share of [`path_efficiency`] left when a dot in a loop takes an operand computed from a
/// global `load` of the same trip rather than from a pipelining ring: the load stalls every
/// trip. The fused RMSNorm→GEMM on the H200 (its A operand `cast(x·w)`, B on a ring) ran at 54
/// TFLOP/s where the unfused matmul (both operands on rings) ran at 137 (M = 8192, K = N = 4096,
/// 2026-12-03; docs/passes.md, "Fusion by cost").
const UNRINGED_OPERAND: f64 = 0.4;

/// What starting one kernel costs beside its work (launch and tail, seconds).
const LAUNCH_SECONDS: f64 = 3e-6;

/// The estimated time of a lowered module, with one line per launch saying how it was costed.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Seconds for one run of the program (or its single kernel) at the nominal dims.
    pub seconds: f64,
    /// `@kernel: 1.4e11 FLOP on wgmma (warp-specialized), 6.7e7 bytes: 0.199 ms`, in launch order.
    pub launches: Vec<String>,
}

/// The estimate for `spec` (the module before scheduling) as lowered into `lowered` (the
/// scheduled module) with `reports` (the PTX backend's, per kernel) on `target`; `None` when a
/// trip count or a dim is not known at the nominal size.
pub fn estimate(
    spec: &Module,
    lowered: &Module,
    reports: &[PtxReport],
    target: Target,
) -> Option<Estimate> {
    let nominal = |_: &str| Some(NOMINAL_DIM);
    let mut work: Vec<(&str, u64, u64)> = vec![];
    match &spec.program {
        Some(p) => {
            for l in &p.launches {
                let (_, k) = spec.kernel(&l.kernel)?;
                let flops = traffic::launch_dot_flops(p, l, k, &nominal)?;
                let bytes = traffic::launch_footprint(p, l, k, &nominal)?;
                work.push((l.kernel.as_str(), flops, bytes));
            }
        }
        None => {
            for k in spec.kernels.values() {
                let flops = traffic::kernel_dot_flops(k, &nominal)?;
                let bytes = traffic::kernel_footprint(k, &nominal)?;
                work.push((k.name.as_str(), flops, bytes));
            }
        }
    }
    let mut seconds = 0.0;
    let mut launches = vec![];
    for (name, flops, bytes) in work {
        let path = reports
            .iter()
            .find(|r| r.kernel == name)
            .and_then(|r| r.dots.iter().map(|d| d.path).min_by_key(|p| path_rank(*p)));
        let lk = lowered.kernel(name).map(|(_, k)| k);
        let ws = lk.is_some_and(|k| has_ws(k, k.body));
        let unringed = lk.is_some_and(|k| unringed_operand(k, k.body, None));
        let memory = bytes as f64 / target.dram_bytes_per_s();
        let (compute, how) = match path {
            Some(p) => (
                flops as f64
                    / (target.dense_tensor_flops()
                        * path_efficiency(p, ws)
                        * if unringed { UNRINGED_OPERAND } else { 1.0 }),
                format!(
                    "{flops:.1e} FLOP on {}{}{}",
                    p.name(),
                    if ws { " (warp-specialized)" } else { "" },
                    if unringed {
                        " with an operand loaded in its loop off the rings"
                    } else {
                        ""
                    }
                ),
            ),
            None => (0.0, "no dot".to_string()),
        };
        let t = compute.max(memory) + LAUNCH_SECONDS;
        seconds += t;
        launches.push(format!(
            "@{name}: {how}, {bytes:.1e} bytes: {:.3} ms",
            t * 1e3
        ));
    }
    Some(Estimate { seconds, launches })
}

/// Slowest first, so that a kernel is costed at the rate of its slowest dot.
fn path_rank(p: DotPath) -> u8 {
    match p {
        DotPath::Fma => 0,
        DotPath::MmaSync => 1,
        DotPath::Wgmma => 2,
    }
}

/// Whether a `dot` in a loop of block `b` (inside loop body `lp`, if any) has an operand
/// computed from a global `load` of the same loop body (not from a ring's `smem_read`).
fn unringed_operand(k: &Kernel, b: Block, lp: Option<Block>) -> bool {
    k.dfg.blocks[b].ops.iter().any(|&o| {
        let op = &k.dfg.ops[o];
        let inner = if op.opcode == Opcode::For {
            op.regions.first().copied()
        } else {
            lp
        };
        let here = op.opcode == Opcode::Dot
            && lp.is_some_and(|l| op.operands[..2].iter().any(|&v| loaded_in(k, v, l, 0)));
        here || op.regions.iter().any(|&r| unringed_operand(k, r, inner))
    })
}

/// Whether `v` is computed, through ops of the loop body `lp` (at most 16 deep), from a
/// global `load` in that body.
fn loaded_in(k: &Kernel, v: kir_ir::Value, lp: Block, depth: usize) -> bool {
    let Some(o) = edit::def_op(&k.dfg, v) else {
        return false;
    };
    let mut set = HashSet::new();
    edit::ops_in(&k.dfg, lp, &mut set);
    if depth > 16 || !set.contains(&o) {
        return false;
    }
    let od = &k.dfg.ops[o];
    match od.opcode {
        Opcode::Load => true,
        Opcode::SmemRead => false,
        _ => od.operands.iter().any(|&x| loaded_in(k, x, lp, depth + 1)),
    }
}

/// Whether block `b` of `k` (or a region inside it) splits into warp roles.
fn has_ws(k: &Kernel, b: Block) -> bool {
    k.dfg.blocks[b].ops.iter().any(|&o| {
        let op = &k.dfg.ops[o];
        op.opcode == Opcode::WarpSpecialize || op.regions.iter().any(|&r| has_ws(k, r))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faster_paths_rank_higher_and_cost_less() {
        let paths = [DotPath::Fma, DotPath::MmaSync, DotPath::Wgmma];
        for w in paths.windows(2) {
            assert!(path_rank(w[0]) < path_rank(w[1]));
            assert!(path_efficiency(w[0], false) < path_efficiency(w[1], false));
        }
        assert!(path_efficiency(DotPath::Wgmma, false) < path_efficiency(DotPath::Wgmma, true));
    }
}
