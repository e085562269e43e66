//! The registry: every pass of the pipeline as a [`Pass`], and [`standard`], the one list that
//! orders them. The front end is `specialize` → `egraph` → `fusion` → `mask_split` (after
//! `parse`, which the manager runs on the source text); the scheduling passes for a target are
//! `swap_operands` (when asked) → `stream_k` (when asked) → `persistent` (when asked) → `pipelining` → `warp_specialize`
//! (when asked) → `dot_overlap` (when asked) → `cluster` (when asked).

use super::types::{Level, Pass, PassContext, Phase, Preserves};
use crate::options::{ws_plans, WsChoice};
use crate::passes;
use kir_ir::{Diagnostics, Module};

/// The passes in pipeline order (after `parse`).
pub fn standard() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(Specialize),
        Box::new(Egraph),
        Box::new(Fusion),
        Box::new(MaskSplit),
        Box::new(SwapOperands),
        Box::new(StreamK),
        Box::new(Persistent),
        Box::new(Pipelining),
        Box::new(WarpSpecialize),
        Box::new(DotOverlap),
        Box::new(Cluster),
    ]
}

/// What every pass but `specialize` keeps: results and the launch signature.
const KEEPS_ALL: Preserves = Preserves {
    results: true,
    signature: true,
};

/// `specialize`: constants substituted, `static_if`s resolved (passes/specialize.rs).
pub struct Specialize;

impl Pass for Specialize {
    fn name(&self) -> &'static str {
        "specialize"
    }
    fn phase(&self) -> Phase {
        Phase::Frontend
    }
    fn needs(&self) -> Level {
        Level::Generic
    }
    fn produces(&self) -> Level {
        Level::Specialized
    }
    fn preserves(&self) -> Preserves {
        // Conditional params come and go with the constants.
        Preserves {
            results: true,
            signature: false,
        }
    }
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        passes::specialize(m, cx.defines).map(Some)
    }
}

/// Declares a front-end pass that always runs: `$ty` calls `$f(&Module) -> Module`.
macro_rules! frontend_pass {
    ($ty:ident, $name:literal, $f:path, $doc:literal) => {
        #[doc = $doc]
        pub struct $ty;

        impl Pass for $ty {
            fn name(&self) -> &'static str {
                $name
            }
            fn phase(&self) -> Phase {
                Phase::Frontend
            }
            fn needs(&self) -> Level {
                Level::Specialized
            }
            fn produces(&self) -> Level {
                Level::Specialized
            }
            fn preserves(&self) -> Preserves {
                KEEPS_ALL
            }
            fn run(&self, m: &Module, _cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
                Ok(Some($f(m)))
            }
        }
    };
}

frontend_pass!(
    Egraph,
    "egraph",
    passes::egraph,
    "`egraph`: algebraic rewriting by equality saturation (egraph/)."
);
frontend_pass!(
    Fusion,
    "fusion",
    passes::fusion,
    "`fusion`: kernel-graph fusion of a program's launches (passes/fusion.rs)."
);
frontend_pass!(
    MaskSplit,
    "mask_split",
    passes::mask_split,
    "`mask_split`: masked key loops split into unmasked and masked ranges (passes/mask_split.rs)."
);

/// Declares the trait's level facts of a scheduling pass.
macro_rules! schedule_levels {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn phase(&self) -> Phase {
            Phase::Schedule
        }
        fn needs(&self) -> Level {
            Level::Specialized
        }
        fn produces(&self) -> Level {
            Level::Scheduled
        }
        fn preserves(&self) -> Preserves {
            KEEPS_ALL
        }
    };
}

/// `stream_k`: a persistent grid whose last tiles are shared out by K iterations
/// (passes/schedule/stream_k.rs), on the kernels that qualify; runs when
/// [`crate::pipeline::ScheduleOptions::stream_k`] and `persistent` are set.
pub struct StreamK;

impl Pass for StreamK {
    schedule_levels!("stream_k");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        match cx.schedule.persistent {
            Some(n) => match cx.schedule.stream_k {
                Some(strict) => passes::stream_k(m, n, strict).map(Some),
                None => Ok(None),
            },
            _ => Ok(None),
        }
    }
}

/// `persistent`: a fixed number of programs walking every tile (passes/persistent.rs); runs
/// when [`crate::pipeline::ScheduleOptions::persistent`] is set.
pub struct Persistent;

impl Pass for Persistent {
    schedule_levels!("persistent");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        match cx.schedule.persistent {
            Some(n) => passes::persistent(m, n, cx.schedule.tile_group).map(Some),
            None => Ok(None),
        }
    }
}

/// `swap_operands`: each dot loop's accumulator computed transposed, so that the operand with
/// many rows is the matrix units' M (passes/schedule/swap_operands.rs), when asked.
pub struct SwapOperands;

impl Pass for SwapOperands {
    schedule_levels!("swap_operands");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        if !cx.schedule.swap_operands || cx.schedule.target.is_none() {
            return Ok(None);
        }
        passes::swap_operands(m).map(Some)
    }
}

/// `pipelining`: an N-stage shared-memory ring of each loop's dot-operand loads
/// (passes/pipelining.rs), within the target's shared-memory budget.
pub struct Pipelining;

impl Pass for Pipelining {
    schedule_levels!("pipelining");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        let Some(target) = cx.schedule.target else {
            return Ok(None);
        };
        let off = matches!(cx.schedule.warp_specialize, WsChoice::Off);
        let cfg = passes::PipelineConfig {
            smem_budget: target.smem_per_block(),
            stages: cx.schedule.stages,
            // Only sm_90a's wgmma keeps a dot in flight across iterations; elsewhere holding a
            // stage would only shorten the prefetch distance. Warp specialization turns releases
            // into the consumers' empty-barrier arrivals where the reads end, so it takes the
            // ring unheld.
            hold_carried_dots: target.has_wgmma() && off,
            // TMA rings replace the cp.async rings that warp specialization takes as input.
            tma_rings: target.has_tma() && target.has_wgmma() && !cx.schedule.no_tma_rings && off,
        };
        passes::pipelining(m, &cfg).map(Some)
    }
}

/// `warp_specialize`: producer and consumer partitions (passes/warp_spec.rs), with the plan
/// asked for or the target's plans in order of preference (the first that applies).
pub struct WarpSpecialize;

impl Pass for WarpSpecialize {
    schedule_levels!("warp_specialize");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        let Some(target) = cx.schedule.target else {
            return Ok(None);
        };
        let plans = match &cx.schedule.warp_specialize {
            WsChoice::Off => return Ok(None),
            WsChoice::Auto => ws_plans(target),
            WsChoice::Plan(p) => vec![p.clone()],
            WsChoice::PerKernel { max_regs, roles } => {
                let (max_regs, roles) = (*max_regs, *roles);
                let plan = move |k: &kir_ir::Kernel| {
                    let (block, _) = kir_backends::ptx::plan::block::block_policy(k);
                    let one = passes::WsPlan::one_consumer(block.warps, max_regs);
                    if roles && k.grid[2].as_int() == Some(2) {
                        vec![passes::WsPlan::roles(block.warps, max_regs), one]
                    } else {
                        vec![one]
                    }
                };
                return passes::warp_specialize_each(m, &plan, target.smem_per_block()).map(Some);
            }
        };
        let mut last = None;
        for plan in &plans {
            match passes::warp_specialize_within(m, plan, target.smem_per_block()) {
                Ok(ws) => return Ok(Some(ws)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_default())
    }
}

/// `dot_overlap`: each TMA ring loop's fresh stage dot issued with the previous block's
/// accumulating dot (passes/dot_overlap.rs), in the consumer when warp-specialized.
pub struct DotOverlap;

impl Pass for DotOverlap {
    schedule_levels!("dot_overlap");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        if !cx.schedule.overlap {
            return Ok(None);
        }
        passes::dot_overlap(m).map(|(rotated, _)| Some(rotated))
    }
}

/// `cluster`: pairs of a persistent warp-specialized kernel's programs run as clusters of two
/// that share their copies (passes/schedule/cluster.rs), when asked.
pub struct Cluster;

impl Pass for Cluster {
    schedule_levels!("cluster");
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        match (cx.schedule.cluster, cx.schedule.target) {
            (Some(strict), Some(t)) if t.has_clusters() => passes::cluster(m, strict).map(Some),
            (Some(true), Some(t)) => Err(Diagnostics(vec![kir_ir::Diagnostic::new(
                kir_ir::Span::default(),
                format!(
                    "--cluster on needs clusters of CTAs with multicast tensor copies, which {} \
                     does not have (sm_90a, sm_100a and sm_120a have them)",
                    t.name()
                ),
            )])),
            _ => Ok(None),
        }
    }
}
