//! The search space: the cartesian product of the tune sets of the constants the user did not
//! fix with `-D`, and of the lowering flags the target offers that the user did not fix
//! (warps per block, ring depth, warp specialization where the target lowers it, swapped
//! operands for a module with a dot-loop kernel on a target with wgmma, and a persistent grid
//! and `dot_overlap` for a module with an attention kernel there).
//!
//! Candidates are listed in a fixed order: the first axis varies slowest, constants in
//! declaration order, then warps, stages, warp specialization, swapped operands, persistence and
//! overlap, each in the order of its values, so a run is reproducible and ties go to the earlier
//! candidate.

use super::types::{Axes, Candidate, TuneError};
use crate::plan::Flags;
use kir_backends::Target;
use kir_ir::Module;

/// Warps per block searched when `--warps` is not given.
pub const WARPS: [u32; 2] = [4, 8];

/// Ring depths searched when `--stages` is not given.
pub const STAGES: [usize; 3] = [2, 3, 4];

/// The largest space enumerated whatever the limit asked for (a million candidates).
pub const MAX_SPACE: usize = 1_000_000;

/// One axis of the space.
#[derive(Clone, Debug, PartialEq)]
enum Axis {
    Const(String, Vec<i64>),
    Warps(Vec<u32>),
    Stages(Vec<usize>),
    WarpSpecialize(Vec<bool>),
    SwapOperands(Vec<bool>),
    /// Programs of a persistent grid; 0 for none.
    Persistent(Vec<u32>),
    Overlap(Vec<bool>),
}

impl Axis {
    fn len(&self) -> usize {
        match self {
            Axis::Const(_, v) => v.len(),
            Axis::Warps(v) | Axis::Persistent(v) => v.len(),
            Axis::Stages(v) => v.len(),
            Axis::WarpSpecialize(v) | Axis::SwapOperands(v) | Axis::Overlap(v) => v.len(),
        }
    }

    /// The axis's name and its values as text.
    fn describe(&self) -> (String, Vec<String>) {
        match self {
            Axis::Const(n, v) => (n.clone(), v.iter().map(i64::to_string).collect()),
            Axis::Warps(v) => ("warps".into(), v.iter().map(u32::to_string).collect()),
            Axis::Stages(v) => ("stages".into(), v.iter().map(usize::to_string).collect()),
            Axis::WarpSpecialize(v) => ("warp-specialize".into(), on_off(v)),
            Axis::SwapOperands(v) => ("swap-operands".into(), on_off(v)),
            Axis::Persistent(v) => (
                "persistent".into(),
                v.iter()
                    .map(|&n| if n == 0 { "off".into() } else { n.to_string() })
                    .collect(),
            ),
            Axis::Overlap(v) => ("overlap".into(), on_off(v)),
        }
    }

    /// Sets value `i` of this axis on `c`.
    fn apply(&self, i: usize, c: &mut Candidate) {
        match self {
            Axis::Const(n, v) => c.consts.push((n.clone(), v[i])),
            Axis::Warps(v) => c.flags.warps = Some(v[i]),
            Axis::Stages(v) => c.flags.stages = Some(v[i]),
            Axis::WarpSpecialize(v) => c.flags.warp_specialize = Some(v[i]),
            Axis::SwapOperands(v) => c.flags.swap_operands = Some(v[i]),
            Axis::Persistent(v) => c.flags.persistent = Some(v[i]),
            Axis::Overlap(v) => c.flags.overlap = Some(v[i]),
        }
    }
}

/// Switch values as the flags write them.
fn on_off(v: &[bool]) -> Vec<String> {
    v.iter()
        .map(|b| if *b { "on" } else { "off" }.to_string())
        .collect()
}

/// Whether a kernel of `generic` (at `defines`) is of `kind`: a dot loop, which
/// `swap_operands` rewrites, or an attention key loop, which a persistent grid walks tile after
/// tile and whose score dot `dot_overlap` issues under the previous block's P·V.
fn has_kernel(
    generic: &Module,
    defines: &[(String, String)],
    kind: crate::structure::KernelKind,
) -> bool {
    let Ok(values) = crate::passes::const_values(generic, defines) else {
        return false;
    };
    crate::structure::analyze(generic, &values)
        .kernels
        .iter()
        .any(|k| k.kind == kind)
}

/// The space of `generic` for `target`: its axes (name and values) and every candidate, with
/// the user's `fixed` flags kept on each. An error when nothing is left to search, or when the
/// space has more than `limit` candidates.
pub fn enumerate(
    generic: &Module,
    defines: &[(String, String)],
    target: Target,
    fixed: &Flags,
    limit: usize,
) -> Result<(Axes, Vec<Candidate>), TuneError> {
    let mut axes = Vec::new();
    for c in &generic.consts {
        let Some(t) = &c.tune else { continue };
        if defines.iter().any(|(n, _)| *n == c.name) {
            continue;
        }
        axes.push(Axis::Const(c.name.clone(), t.values.clone()));
    }
    if fixed.ws_plan.is_some() {
        return Err(TuneError::Space(
            "an interpreter warp-specialization plan (--ws) cannot be tuned on a GPU".into(),
        ));
    }
    if fixed.ws_ptx.is_some() {
        return Err(TuneError::Space(
            "a named warp-specialization plan (--ws) is not among the tuner's choices: its \
             warp roles are fixed (compile or bench it with -D for the tiles)"
                .into(),
        ));
    }
    if fixed.warps.is_none() {
        axes.push(Axis::Warps(WARPS.to_vec()));
    }
    if fixed.stages.is_none() {
        axes.push(Axis::Stages(STAGES.to_vec()));
    }
    if fixed.warp_specialize.is_none() && target.has_wgmma() && target.has_setmaxnreg() {
        axes.push(Axis::WarpSpecialize(vec![false, true]));
    }
    use crate::structure::KernelKind;
    if fixed.swap_operands.is_none()
        && target.has_wgmma()
        && has_kernel(generic, defines, KernelKind::DotLoop)
    {
        axes.push(Axis::SwapOperands(vec![false, true]));
    }
    let attention = target.has_wgmma() && has_kernel(generic, defines, KernelKind::Attention);
    // One program per SM, as the configuration rows' persistent grids take (plan.rs). Not for
    // dot loops: a GEMM's space (3,456 candidates at sm_90a) would pass the default limit.
    if fixed.persistent.is_none() && attention && target.has_setmaxnreg() {
        axes.push(Axis::Persistent(vec![0, target.sm_count()]));
    }
    if fixed.overlap.is_none() && attention {
        axes.push(Axis::Overlap(vec![false, true]));
    }
    let described: Axes = axes.iter().map(Axis::describe).collect();
    let size = axes
        .iter()
        .try_fold(1usize, |n, a| n.checked_mul(a.len()))
        .unwrap_or(usize::MAX);
    let list = || {
        described
            .iter()
            .map(|(n, v)| format!("{n} {{{}}}", v.join(", ")))
            .collect::<Vec<_>>()
            .join(" × ")
    };
    if size == 0 || axes.is_empty() {
        return Err(TuneError::Space(format!(
            "nothing to tune in module `{}`: no constant with a `tune {{…}}` set is left unfixed \
             and every lowering flag is fixed",
            generic.name
        )));
    }
    let limit = limit.min(MAX_SPACE);
    if size > limit {
        let size = if size == usize::MAX {
            "more candidates than".to_string()
        } else {
            format!("{size} candidates, more than")
        };
        return Err(TuneError::Space(format!(
            "the search space has {size} the limit of {limit}: {}; fix \
             some with -D NAME=VALUE or --warps/--stages/--warp-specialize, or raise --limit \
             (at most {MAX_SPACE})",
            list()
        )));
    }
    let mut out = Vec::with_capacity(size);
    for index in 0..size {
        let mut c = Candidate {
            consts: Vec::new(),
            flags: fixed.clone(),
        };
        // Mixed radix, the last axis varying fastest.
        let mut rest = index;
        let mut digits = vec![0; axes.len()];
        for (d, a) in digits.iter_mut().zip(&axes).rev() {
            *d = rest % a.len();
            rest /= a.len();
        }
        for (a, d) in axes.iter().zip(digits) {
            a.apply(d, &mut c);
        }
        out.push(c);
    }
    Ok((described, out))
}
