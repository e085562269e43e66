//! The fast-path report of one lowered kernel ([`PtxReport`]): the decisions the PTX backend made
//! and why a faster path was not taken — the warps per block (the policy's reason or
//! `--warps`), the path of every `dot` (wgmma, mma.sync or an FMA loop) with the reason each
//! faster path was declined, the depth and size of every pipelining ring, whether each
//! candidate rescale of an accumulator was skipped when it is the identity, the PTX ISA
//! version, target features and instruction families the kernel needs, its shared memory and
//! its dot accumulators' registers per thread.
//!
//! Lowering records into `Notes` (one call where `dot.rs` and `rescale.rs` decide); `build`
//! turns them, with the state the lowering ends in, into the report, which is never changed
//! afterwards. It is returned beside the PTX ([`super::PtxModule::reports`]) and printed by
//! `kirc compile --report`.

use crate::target::{Feature, Target};
use kir_ir::{Dtype, Span};
use std::fmt::Write;

/// How a `dot` was lowered, fastest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotPath {
    /// Hopper warpgroup MMA from shared-memory operand tiles.
    Wgmma,
    /// mma.sync m16n8k16 per warp.
    MmaSync,
    /// One FMA loop per output element over shared-memory operands.
    Fma,
}

impl DotPath {
    /// `wgmma`, `mma.sync` or `fma`.
    pub fn name(self) -> &'static str {
        match self {
            DotPath::Wgmma => "wgmma",
            DotPath::MmaSync => "mma.sync",
            DotPath::Fma => "fma",
        }
    }
}

/// The lowering of one `dot` op.
#[derive(Clone, Debug)]
pub struct DotChoice {
    /// The dot's position among the kernel's `dot` ops (in the order the kernel holds them).
    pub index: usize,
    /// The op's place in the source.
    pub span: Span,
    /// Result rows, result columns, and the reduction depth.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// The operands' dtype.
    pub dtype: Dtype,
    pub path: DotPath,
    /// Why each faster path was not taken, fastest first (`"wgmma: target has no wgmma"`);
    /// empty for wgmma.
    pub declined: Vec<String>,
    /// f32 registers per thread that hold the dot's accumulator.
    pub acc_regs: usize,
    /// How many times the dot was emitted (a ring loop's body is emitted once per stage).
    pub emitted: usize,
}

/// One pipelining ring (`smem_alloc` of the `pipelining` pass) as the backend laid it out.
#[derive(Clone, Debug)]
pub struct Ring {
    /// The buffer's name in the kernel's IR (`%b0`).
    pub buffer: String,
    pub span: Span,
    /// Ring depth: the number of stages.
    pub stages: usize,
    /// One stage: [rows, cols] of `dtype`.
    pub stage_shape: [usize; 2],
    pub dtype: Dtype,
    /// Shared-memory bytes of all stages.
    pub bytes: u32,
    /// The 128B-swizzled core-matrix layout of wgmma operands (else rows padded by 16 bytes).
    pub swizzled: bool,
}

/// A candidate no-op rescale: `acc · broadcast(alpha)` on an f32 accumulator tile.
#[derive(Clone, Debug)]
pub struct Rescale {
    pub span: Span,
    /// True when the warp votes and skips the multiplies if every factor is 1.0.
    pub skipped: bool,
    /// Why the skip did not apply.
    pub why_not: Option<&'static str>,
}

/// Where the warps per block came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WarpsFrom {
    /// Given in `PtxOptions::warps`: `--warps`, or the compile driver's per-target default
    /// configuration of a built-in op.
    Option,
    /// The backend's policy, with the facts it went by.
    Policy(String),
}

/// The lowering decisions of one kernel. Built once, after the kernel is lowered; every field
/// describes the PTX that was emitted for it.
#[derive(Clone, Debug)]
pub struct PtxReport {
    /// The kernel's name and its PTX `.entry` symbol.
    pub kernel: String,
    pub symbol: String,
    pub target: Target,
    /// Warps per block (threads = 32 · warps) and why.
    pub warps: u32,
    pub warps_from: WarpsFrom,
    /// Every dot that was lowered, by [`DotChoice::index`].
    pub dots: Vec<DotChoice>,
    /// Every pipelining ring, in the order they were placed in shared memory.
    pub rings: Vec<Ring>,
    /// Every candidate rescale of an accumulator.
    pub rescales: Vec<Rescale>,
    /// The `if`s lowered while a wgmma group was in flight (a `dot_async`, or a held dot):
    /// ptxas may retire the groups in flight where the branches join, so no overlap reaches
    /// past them (it did in the SASS of docs/benchmarks.md, "FA3's paired overlap").
    pub joins_in_flight: Vec<Span>,
    /// The broadcasts of row vectors into accumulator tiles kept compact in a warp-specialized
    /// consumer short of registers (two registers a lane, spread by shuffles at each use:
    /// backends/src/ptx/lower/row_compact.rs).
    pub compact_rows: Vec<Span>,
    /// The PTX ISA version the kernel's instructions need (the module declares at least the
    /// target's own minimum).
    pub ptx_version: (u32, u32),
    /// The target features the kernel's instructions need.
    pub features: Vec<Feature>,
    /// The instruction families that stated a requirement (`cp.async`, `ldmatrix`, …).
    pub families: Vec<&'static str>,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// With several consumer partitions: the bytes of each consumer's own copy of what its
    /// region allocated (its arena, consumers.rs) and the consumer count; `shared_bytes` holds
    /// the copies. `None` otherwise.
    pub consumer_arena: Option<(u32, u32)>,
    /// f32 registers per thread that hold dot accumulators, summed over the dots: the part of
    /// the register budget the warps policy looks at (ptxas gives the full count).
    pub acc_regs: usize,
}

/// What lowering records for the report, before it is built.
#[derive(Default)]
pub(crate) struct Notes {
    pub(super) dots: Vec<(usize, DotChoice)>,
    pub(super) rescales: Vec<(usize, Rescale)>,
    pub(super) joins: Vec<(usize, Span)>,
    pub(super) compact_rows: Vec<(usize, Span)>,
}

impl PtxReport {
    /// The dots that took `path`.
    pub fn dots_on(&self, path: DotPath) -> impl Iterator<Item = &DotChoice> {
        self.dots.iter().filter(move |d| d.path == path)
    }

    /// The report as text, one decision per line; spans are shown as `line:col` of `src` when
    /// it is given (the source the kernel was compiled from), else as byte offsets.
    pub fn render(&self, src: Option<&str>) -> String {
        let at = |s: Span| match src {
            Some(t) if t.is_char_boundary((s.start as usize).min(t.len())) => {
                let (l, col) = s.line_col(t);
                format!("{l}:{col}")
            }
            _ => format!("@{}", s.start),
        };
        let mut o = String::new();
        let _ = writeln!(
            o,
            "kernel {} ({}) on {}",
            self.kernel, self.symbol, self.target
        );
        let why = match &self.warps_from {
            WarpsFrom::Option => "given: --warps or the op's per-target configuration".to_string(),
            WarpsFrom::Policy(p) => format!("policy: {p}"),
        };
        let _ = writeln!(o, "  warps: {} ({why})", self.warps);
        for d in &self.dots {
            let _ = write!(
                o,
                "  dot #{} at {}: {}x{}x{} {} -> {}, {} accumulator registers/thread",
                d.index,
                at(d.span),
                d.m,
                d.n,
                d.k,
                d.dtype,
                d.path.name(),
                d.acc_regs
            );
            if d.emitted > 1 {
                let _ = write!(o, ", emitted {}x", d.emitted);
            }
            o.push('\n');
            for r in &d.declined {
                let _ = writeln!(o, "    not {r}");
            }
        }
        for r in &self.rings {
            let _ = writeln!(
                o,
                "  ring {} at {}: {} stages of {}x{} {}, {} bytes{}",
                r.buffer,
                at(r.span),
                r.stages,
                r.stage_shape[0],
                r.stage_shape[1],
                r.dtype,
                r.bytes,
                if r.swizzled { ", 128B-swizzled" } else { "" }
            );
        }
        for r in &self.rescales {
            match r.why_not {
                None => {
                    let _ = writeln!(
                        o,
                        "  rescale at {}: skipped when all factors are 1",
                        at(r.span)
                    );
                }
                Some(w) => {
                    let _ = writeln!(o, "  rescale at {}: always applied ({w})", at(r.span));
                }
            }
        }
        for &sp in &self.compact_rows {
            let _ = writeln!(
                o,
                "  row vector at {}: two registers a lane, spread into the accumulator layout by shuffles at each use (the consumer is short of registers)",
                at(sp)
            );
        }
        for &sp in &self.joins_in_flight {
            let _ = writeln!(
                o,
                "  if at {}: a wgmma group is in flight across it (ptxas may retire it where the branches join)",
                at(sp)
            );
        }
        let feats: Vec<&str> = self.features.iter().map(|f| f.name()).collect();
        let declared = self.target.min_ptx_version().max(self.ptx_version);
        let _ = writeln!(
            o,
            "  ptx: .version {}.{} (instructions need {}.{}), features [{}], families [{}]",
            declared.0,
            declared.1,
            self.ptx_version.0,
            self.ptx_version.1,
            feats.join(", "),
            self.families.join(", ")
        );
        let arena = match self.consumer_arena {
            Some((bytes, n)) => format!(
                " ({} shared by the consumers, {n} × {bytes} for each consumer's own)",
                self.shared_bytes - n * bytes
            ),
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "  shared memory: {} bytes{arena}; dot accumulators: {} f32 registers/thread",
            self.shared_bytes, self.acc_regs
        );
        o
    }
}

impl std::fmt::Display for PtxReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render(None))
    }
}

/// The block a kernel was lowered with, for [`WarpsFrom`]: `--warps` when given.
pub(super) fn warps_from(policy_why: Option<String>) -> WarpsFrom {
    match policy_why {
        None => WarpsFrom::Option,
        Some(why) => WarpsFrom::Policy(why),
    }
}
