//! The user's lowering flags ([`Flags`]), checked against their ranges, the emitted language
//! and the target before anything is compiled ([`Flags::validate`]); `crate::plan` resolves
//! them with the configuration rows into a compile plan.

use crate::compiled::Emit;
use crate::options::{Fusion, WsChoice};
use kir_backends::ptx::PtxOptions;
use kir_backends::Target;

/// The lowering choices a user may make (`--warps`, `--stages`, `--warp-specialize`, `--persistent`,
/// `--overlap`, `--swap-operands`, `--ws` for the interpreter's plans or the PTX backend's).
/// `None` everywhere is what users get by default: the configuration's and the backend's
/// choices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Flags {
    /// Warps per block (1, 2, or a multiple of 4 up to 32).
    pub warps: Option<u32>,
    /// Ring depth of `pipelining` (1 to 16; 1 = no ring).
    pub stages: Option<usize>,
    /// `Some(true)`: a producer warpgroup and the block's warps as one consumer, or an error
    /// naming why the kernel does not qualify; `Some(false)`: one role.
    pub warp_specialize: Option<bool>,
    /// `Some(n)`, n ≥ 1: a persistent grid of n programs; `Some(0)`: none.
    pub persistent: Option<u32>,
    /// `Some(true)`: `dot_overlap` on the TMA rings (or the consumer's).
    pub overlap: Option<bool>,
    /// `Some(true)`: `swap_operands` on every dot loop; `Some(false)`: on none.
    pub swap_operands: Option<bool>,
    /// A warp-specialization plan of the interpreter's (`kirc run --device cpu` and `kirc
    /// check` with `--ws`): the plans of the target in order, or one by name. Such modules are
    /// judged by the interpreter, not a code generator.
    pub ws_plan: Option<WsChoice>,
    /// A warp-specialization plan the PTX backend lowers (`kirc compile`, `kirc run --device
    /// cuda` and `kirc bench` with `--ws`): the target's plans in order, or one by name, in
    /// place of the configuration's warp roles (no configuration row applies). The PTX backend
    /// judges the schedule, the plan must apply (its error is the compilation's), and the
    /// kernel symbols end in `_WSPLAN_<name>` ([`Flags::ws_suffix`]).
    pub ws_ptx: Option<WsChoice>,
    /// Whether fusion is lowered (`--fuse`, `--no-fuse`; by default the cost model decides).
    pub fusion: Fusion,
    /// `Some(true)`: clusters of two programs sharing their copies (`cluster`), or, where no
    /// kernel qualifies, an error naming each and why; `Some(false)`: none.
    pub cluster: Option<bool>,
    /// `Some(true)`: a persistent grid's last tiles shared out by K iterations (`stream_k`)
    /// where the kernel qualifies; `Some(false)`: none.
    pub stream_k: Option<bool>,
}

impl Flags {
    /// The backend's view of the flags (warps, and the suffix naming what was set).
    pub fn ptx_options(&self) -> PtxOptions {
        PtxOptions {
            warps: self.warps,
            stages: self.stages,
            warp_specialize: self.warp_specialize,
            persistent: self.persistent,
            overlap: self.overlap,
            min_blocks: None,
        }
    }

    /// Checks every flag against its range, the emitted language and the target; the message
    /// names the flag.
    pub fn validate(&self, target: Target, emit: Emit) -> Result<(), String> {
        self.ptx_options().validate()?;
        if emit == Emit::Cuda {
            let set = [
                ("--warps", self.warps.is_some()),
                ("--stages", self.stages.is_some()),
                ("--warp-specialize", self.warp_specialize.is_some()),
                ("--persistent", self.persistent.is_some()),
                ("--overlap", self.overlap.is_some()),
                ("--swap-operands", self.swap_operands.is_some()),
                ("--cluster", self.cluster.is_some()),
                ("--stream-k", self.stream_k.is_some()),
                ("--ws", self.ws_plan.is_some() || self.ws_ptx.is_some()),
            ];
            if let Some((flag, _)) = set.iter().find(|(_, s)| *s) {
                return Err(format!(
                    "{flag} does not apply to --emit cuda (the CUDA-C parity backend has no warps, \
                     pipeline stages, warp roles or asynchronous matrix instructions)"
                ));
            }
        }
        if self.overlap == Some(true) && !(target.has_wgmma() && target.has_tma()) {
            return Err(format!(
                "--overlap on needs asynchronous warpgroup MMA (wgmma) and tensor copies (TMA), \
                 which {} does not have (sm_90a has both)",
                target.name()
            ));
        }
        if self.warp_specialize == Some(true) && !(target.has_wgmma() && target.has_setmaxnreg()) {
            return Err(format!(
                "--warp-specialize on is lowered where the producer's tensor copies feed wgmma and \
                 `setmaxnreg` splits the registers (sm_90a); {} has no such lowering",
                target.name()
            ));
        }
        if self.cluster == Some(true) && !target.has_clusters() {
            return Err(format!(
                "--cluster on needs clusters of CTAs with multicast tensor copies, which {} does \
                 not have (sm_90a, sm_100a and sm_120a have them)",
                target.name()
            ));
        }
        if self.stream_k == Some(true) && self.persistent == Some(0) {
            return Err(
                "--stream-k on shares out the last wave of a persistent grid; --persistent off \
                 leaves none"
                    .into(),
            );
        }
        if self.ws_plan.is_some() && self.warp_specialize.is_some() {
            let why = "--ws (an interpreter plan) and --warp-specialize do not go together";
            return Err(why.into());
        }
        if self.ws_ptx.is_some() {
            if self.ws_plan.is_some() {
                let why =
                    "--ws names one plan, for the interpreter or for the PTX backend, not both";
                return Err(why.into());
            }
            if self.warp_specialize.is_some() {
                let why =
                    "--ws (a warp-specialization plan) and --warp-specialize do not go together";
                return Err(why.into());
            }
            if !(target.has_wgmma() && target.has_setmaxnreg() && target.has_tma()) {
                return Err(format!(
                    "--ws PLAN is lowered where the producer's tensor copies feed wgmma and \
                     `setmaxnreg` splits the registers (sm_90a); {} has no such lowering",
                    target.name()
                ));
            }
        }
        let specialized =
            self.warp_specialize == Some(true) || self.ws_plan.is_some() || self.ws_ptx.is_some();
        if self.stages == Some(1) && specialized {
            let why =
                "--stages 1 means no ring, and warp specialization splits a ring: give 2 or more";
            return Err(why.into());
        }
        Ok(())
    }

    /// The kernel-symbol suffix of a plan the PTX backend lowers (`_WSPLAN_fa3`, `_WSPLAN_auto`;
    /// empty without one), so that code compiled under a named plan never shares a symbol, or
    /// a cache entry's kernels, with the configuration's.
    pub fn ws_suffix(&self) -> String {
        match &self.ws_ptx {
            None | Some(WsChoice::Off) => String::new(),
            Some(WsChoice::Auto) => "_WSPLAN_auto".into(),
            Some(WsChoice::Plan(p)) => format!("_WSPLAN_{}", p.name),
            Some(WsChoice::PerKernel { .. }) => "_WSPLAN_1c".into(),
        }
    }
}
