//! GPU targets kir lowers to, the PTX ISA version each one needs at least, and the hardware
//! features each one has beyond the sm_80 base that every kir target shares.
//!
//! Code that lowers differently per target asks a feature query ([`Target::has`],
//! [`Target::has_wgmma`], …) instead of comparing against a target, so a new target only has to
//! say which features it has. Each feature follows the "Target ISA notes" of the PTX ISA 9.0
//! section that introduces its instructions (section numbers of PTX ISA 9.0).

use std::fmt;

/// A GPU target architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Ampere (A100): mma.sync, ldmatrix, cp.async.
    Sm80,
    /// Hopper (H100/H200) with arch-specific features: wgmma, TMA, setmaxnreg.
    Sm90a,
    /// Blackwell datacenter: tcgen05 / TMEM, TMA, setmaxnreg.
    Sm100a,
    /// Blackwell consumer: mma.sync, TMA and setmaxnreg; no wgmma, no tcgen05.
    Sm120a,
}

/// A hardware feature beyond the sm_80 base (mma.sync, ldmatrix, cp.async, max.NaN, …) that
/// every kir target has. [`Target::has`] says which targets have it; the PTX backend records
/// the features its instructions need and refuses a kernel whose target lacks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// Warpgroup MMA, `wgmma.mma_async` with `wgmma.fence/commit_group/wait_group`
    /// (§9.7.15.5.2, §9.7.15.7): "Requires sm_90a" — Hopper only.
    Wgmma,
    /// Tensor-map bulk copies, `cp.async.bulk.tensor` (§9.7.9.25.5.2): sm_90 or higher.
    Tma,
    /// mbarrier transaction counts and phase waits: `mbarrier.expect_tx` (§9.7.13.15.11,
    /// sm_90 or higher) and `mbarrier.try_wait{.parity}` (§9.7.13.15.16, sm_90 or higher).
    MbarrierTx,
    /// Per-warpgroup register budgets, `setmaxnreg` (§9.7.19.5): sm_90a, sm_100a, sm_101a and
    /// sm_120a (arch-specific: not sm_90 or sm_100 without the `a`).
    Setmaxnreg,
    /// Fifth-generation tensor cores, `tcgen05.mma` and tensor memory (§9.7.16.10.9.1):
    /// sm_100a and sm_101a only — sm_120a has neither tcgen05 nor wgmma.
    Tcgen05,
    /// The async-proxy fence `fence.proxy.async` (§9.7.13.4): sm_90 or higher.
    AsyncProxyFence,
    /// bf16 reductions in global memory, `red.add.noftz.bf16` (§9.7.13.6): sm_90 or higher.
    RedBf16,
    /// One lane elected from a warp, `elect.sync` (§9.7.13.13): sm_90 or higher.
    Elect,
}

impl Feature {
    /// Every feature, in order.
    pub const ALL: [Feature; 8] = [
        Feature::Wgmma,
        Feature::Tma,
        Feature::MbarrierTx,
        Feature::Setmaxnreg,
        Feature::Tcgen05,
        Feature::AsyncProxyFence,
        Feature::RedBf16,
        Feature::Elect,
    ];

    /// A short name for messages and reports (`wgmma`, `tma`, …).
    pub fn name(self) -> &'static str {
        match self {
            Feature::Wgmma => "wgmma",
            Feature::Tma => "tma",
            Feature::MbarrierTx => "mbarrier-tx",
            Feature::Setmaxnreg => "setmaxnreg",
            Feature::Tcgen05 => "tcgen05",
            Feature::AsyncProxyFence => "fence-proxy-async",
            Feature::RedBf16 => "red-bf16",
            Feature::Elect => "elect",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Target {
    /// Every target, in order.
    pub const ALL: [Target; 4] = [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a];

    /// The name used on the command line and in `.target` (`sm_90a`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm_80",
            Target::Sm90a => "sm_90a",
            Target::Sm100a => "sm_100a",
            Target::Sm120a => "sm_120a",
        }
    }

    /// Parses a target name.
    pub fn from_name(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The target for a GPU of compute capability `major.minor`: 8.x → sm_80, 9.0 → sm_90a,
    /// 10.x → sm_100a, 12.x → sm_120a; `None` for devices kir does not target.
    pub fn from_compute_capability(major: i32, minor: i32) -> Option<Target> {
        match (major, minor) {
            (8, _) => Some(Target::Sm80),
            (9, 0) => Some(Target::Sm90a),
            (10, _) => Some(Target::Sm100a),
            (12, _) => Some(Target::Sm120a),
            _ => None,
        }
    }

    /// The compute capability for NVRTC (`compute_90a`) — what `--gpu-architecture` takes.
    pub fn compute_name(self) -> &'static str {
        match self {
            Target::Sm80 => "compute_80",
            Target::Sm90a => "compute_90a",
            Target::Sm100a => "compute_100a",
            Target::Sm120a => "compute_120a",
        }
    }

    /// The SM count of the target's reference part, the program count of a persistent grid
    /// by default (docs/passes.md, `persistent`): sm_80 108 (A100), sm_90a 132 (H100 and H200
    /// SXM), sm_100a 148 (B200), sm_120a 170 (RTX 5090). A part with fewer SMs runs the
    /// remaining programs in a second wave (correct, slower); `--persistent N` sets the count.
    pub fn sm_count(self) -> u32 {
        match self {
            Target::Sm80 => 108,
            Target::Sm90a => 132,
            Target::Sm100a => 148,
            Target::Sm120a => 170,
        }
    }

    /// The most shared memory one block may use, in bytes (the opt-in maximum): sm_80 163 KB,
    /// sm_90a and sm_100a 227 KB, sm_120a 99 KB.
    pub fn smem_per_block(self) -> u64 {
        match self {
            Target::Sm80 => 166_912,
            Target::Sm90a | Target::Sm100a => 232_448,
            Target::Sm120a => 101_376,
        }
    }

    /// Dense 16-bit (bf16/f16 operands, f32 accumulation) tensor-core throughput of the
    /// reference part of each target, in FLOP/s, from the vendors' data sheets: sm_80 the A100
    /// (312 TFLOP/s), sm_90a the H100/H200 SXM (989), sm_100a the B200 (2,250), sm_120a the
    /// RTX 5090 (209.5). A scale for cost estimates (`kir_compiler::cost`), not a promise.
    pub fn dense_tensor_flops(self) -> f64 {
        match self {
            Target::Sm80 => 312e12,
            Target::Sm90a => 989e12,
            Target::Sm100a => 2250e12,
            Target::Sm120a => 209.5e12,
        }
    }

    /// Global-memory bandwidth of the same reference parts, in bytes/s, as a device-to-device
    /// copy reaches it: the H200's measured 3.95 TB/s (docs/benchmarks.md, "copy"), and for the
    /// others 80% of the data sheet (A100 SXM 2.04 TB/s, B200 8 TB/s, RTX 5090 1.79 TB/s).
    pub fn dram_bytes_per_s(self) -> f64 {
        match self {
            Target::Sm80 => 1.63e12,
            Target::Sm90a => 3.95e12,
            Target::Sm100a => 6.4e12,
            Target::Sm120a => 1.43e12,
        }
    }

    /// The lowest PTX ISA version (major, minor) that accepts this `.target`:
    /// sm_80 needs 7.0, sm_90a 8.0, sm_100a 8.6, sm_120a 8.7.
    pub fn min_ptx_version(self) -> (u32, u32) {
        match self {
            Target::Sm80 => (7, 0),
            Target::Sm90a => (8, 0),
            Target::Sm100a => (8, 6),
            Target::Sm120a => (8, 7),
        }
    }

    /// True if this target has `feature` (see [`Feature`] for the PTX ISA section each one
    /// follows). Exact for the four targets: no feature is guessed from a target's number.
    pub fn has(self, feature: Feature) -> bool {
        match feature {
            Feature::Wgmma => match self {
                Target::Sm90a => true,
                Target::Sm80 | Target::Sm100a | Target::Sm120a => false,
            },
            Feature::Tma
            | Feature::MbarrierTx
            | Feature::AsyncProxyFence
            | Feature::RedBf16
            | Feature::Elect => match self {
                Target::Sm90a | Target::Sm100a | Target::Sm120a => true,
                Target::Sm80 => false,
            },
            Feature::Setmaxnreg => match self {
                Target::Sm90a | Target::Sm100a | Target::Sm120a => true,
                Target::Sm80 => false,
            },
            Feature::Tcgen05 => match self {
                Target::Sm100a => true,
                Target::Sm80 | Target::Sm90a | Target::Sm120a => false,
            },
        }
    }

    /// Warpgroup MMA (`wgmma.mma_async`): sm_90a only ([`Feature::Wgmma`]).
    pub fn has_wgmma(self) -> bool {
        self.has(Feature::Wgmma)
    }

    /// Tensor-map bulk copies (`cp.async.bulk.tensor`): sm_90a, sm_100a, sm_120a
    /// ([`Feature::Tma`]).
    pub fn has_tma(self) -> bool {
        self.has(Feature::Tma)
    }

    /// Clusters of CTAs (`.reqnctapercluster`, `%cluster_ctarank`, `mapa`, `barrier.cluster`)
    /// with tensor copies multicast to every CTA of a cluster (`.multicast::cluster`,
    /// §9.7.9.25.5.2): sm_90 or higher, the targets with tensor copies.
    pub fn has_clusters(self) -> bool {
        self.has_tma()
    }

    /// `mbarrier.expect_tx` and `mbarrier.try_wait.parity`: sm_90a, sm_100a, sm_120a
    /// ([`Feature::MbarrierTx`]).
    pub fn has_mbarrier_tx(self) -> bool {
        self.has(Feature::MbarrierTx)
    }

    /// `setmaxnreg`: sm_90a, sm_100a, sm_120a ([`Feature::Setmaxnreg`]).
    pub fn has_setmaxnreg(self) -> bool {
        self.has(Feature::Setmaxnreg)
    }

    /// `tcgen05` (tensor memory and its MMA): sm_100a only ([`Feature::Tcgen05`]).
    pub fn has_tcgen05(self) -> bool {
        self.has(Feature::Tcgen05)
    }

    /// `fence.proxy.async`: sm_90a, sm_100a, sm_120a ([`Feature::AsyncProxyFence`]).
    pub fn has_async_proxy_fence(self) -> bool {
        self.has(Feature::AsyncProxyFence)
    }

    /// `red.global.add.noftz.bf16`: sm_90a, sm_100a, sm_120a ([`Feature::RedBf16`]).
    pub fn has_red_bf16(self) -> bool {
        self.has(Feature::RedBf16)
    }

    /// An asynchronous tensor-core MMA that one warpgroup issues while others work — wgmma on
    /// sm_90a, tcgen05.mma on sm_100a — which the producer/consumer warpgroup plans of the
    /// `warp_specialize` pass are built around. sm_80 and sm_120a have only the warp-synchronous
    /// mma.sync.
    pub fn has_async_mma(self) -> bool {
        self.has_wgmma() || self.has_tcgen05()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The feature table of each target, as the PTX ISA's target notes give it.
    #[test]
    fn features_per_target() {
        let have = |t: Target| -> Vec<&str> {
            Feature::ALL
                .into_iter()
                .filter(|f| t.has(*f))
                .map(Feature::name)
                .collect()
        };
        assert!(have(Target::Sm80).is_empty());
        assert_eq!(
            have(Target::Sm90a),
            [
                "wgmma",
                "tma",
                "mbarrier-tx",
                "setmaxnreg",
                "fence-proxy-async",
                "red-bf16",
                "elect"
            ]
        );
        assert_eq!(
            have(Target::Sm100a),
            [
                "tma",
                "mbarrier-tx",
                "setmaxnreg",
                "tcgen05",
                "fence-proxy-async",
                "red-bf16",
                "elect"
            ]
        );
        assert_eq!(
            have(Target::Sm120a),
            [
                "tma",
                "mbarrier-tx",
                "setmaxnreg",
                "fence-proxy-async",
                "red-bf16",
                "elect"
            ]
        );
        let async_mma: Vec<bool> = Target::ALL.iter().map(|t| t.has_async_mma()).collect();
        assert_eq!(async_mma, [false, true, true, false]);
    }

    #[test]
    fn compute_capabilities() {
        assert_eq!(Target::from_compute_capability(8, 6), Some(Target::Sm80));
        assert_eq!(Target::from_compute_capability(9, 0), Some(Target::Sm90a));
        assert_eq!(Target::from_compute_capability(10, 0), Some(Target::Sm100a));
        assert_eq!(Target::from_compute_capability(12, 0), Some(Target::Sm120a));
        assert_eq!(Target::from_compute_capability(7, 5), None);
    }
}
