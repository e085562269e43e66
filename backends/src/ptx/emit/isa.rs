//! What PTX instructions need: the PTX ISA version that introduced each instruction family kir
//! emits beyond PTX's first versions, and the [`Feature`] of the target it needs, from the "PTX
//! ISA notes" and "Target ISA notes" of its section (PTX ISA 9.0 numbering).
//!
//! Code that emits such an instruction states its [`Isa`] on the builder
//! (`c.b.need(Isa::LDMATRIX).ins(…)`); the builder keeps the [`Requirements`] of the kernel: the
//! highest version, the features with the first op that needed each, and the families used. The
//! module's `.version` is the highest of the target's own minimum and every kernel's version,
//! and a kernel that needs a feature its target lacks is a compile error naming the
//! instruction, the feature and the target — nothing is inferred from instruction text.

use crate::target::{Feature, Target};
use kir_ir::{Dtype, Span};
use std::collections::{BTreeMap, BTreeSet};

/// The requirement of one instruction family: the PTX ISA version that introduced it and the
/// target feature it needs beyond the sm_80 base (`None`: every kir target has it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Isa {
    /// The family, as it appears in PTX (`ldmatrix`, `cvt.f32.bf16`).
    pub what: &'static str,
    /// The PTX ISA version (major, minor) that introduced it.
    pub version: (u32, u32),
    /// The target feature it needs, if not every kir target has it.
    pub feature: Option<Feature>,
}

const fn base(what: &'static str, version: (u32, u32)) -> Isa {
    Isa {
        what,
        version,
        feature: None,
    }
}

const fn with(what: &'static str, version: (u32, u32), feature: Feature) -> Isa {
    Isa {
        what,
        version,
        feature: Some(feature),
    }
}

impl Isa {
    /// `cp.async.cg.shared.global`, `cp.async.commit_group`, `cp.async.wait_group`
    /// (§9.7.9.25.3): PTX 7.0, sm_80.
    pub const CP_ASYNC: Isa = base("cp.async", (7, 0));
    /// `ld.acquire.gpu` and `red.release.gpu` (the memory consistency model's scoped
    /// operations, §9.7.9.8 and §9.7.13.5): PTX 6.0, sm_70.
    pub const ACQUIRE_RELEASE: Isa = base("ld.acquire|red.release", (6, 0));
    /// `ldmatrix.sync.aligned.m8n8` (§9.7.14.5.15): PTX 6.5, sm_75.
    pub const LDMATRIX: Isa = base("ldmatrix", (6, 5));
    /// `mma.sync.aligned.m16n8k16` with f16 or bf16 inputs (§9.7.14.5.14): PTX 7.0, sm_80.
    pub const MMA_M16N8K16: Isa = base("mma.sync.m16n8k16", (7, 0));
    /// `cvt.rn.bf16.f32` and the packed `cvt.rn.{f16x2,bf16x2}.f32` (§9.7.9.21): PTX 7.0,
    /// sm_80.
    pub const CVT_TO_BF16_OR_PACKED: Isa = base("cvt.rn.bf16|f16x2|bf16x2.f32", (7, 0));
    /// `cvt.f32.bf16` (§9.7.9.21): PTX 7.1, sm_80.
    pub const CVT_F32_BF16: Isa = base("cvt.f32.bf16", (7, 1));
    /// `cvt` between f32 and f16 (§9.7.9.21): PTX 1.0.
    pub const CVT_F16: Isa = base("cvt.f16", (1, 0));
    /// `max.NaN` / `min.NaN` (§9.7.3.11, §9.7.3.12): PTX 7.0, sm_80.
    pub const MINMAX_NAN: Isa = base("max|min.NaN", (7, 0));
    /// `tanh.approx.f32` (§9.7.3.22): PTX 7.0, sm_75.
    pub const TANH_APPROX: Isa = base("tanh.approx", (7, 0));
    /// `vote.sync` (§9.7.13.9): PTX 6.0, sm_30.
    pub const VOTE_SYNC: Isa = base("vote.sync", (6, 0));
    /// `shfl.sync` (§9.7.9.6): PTX 6.0, sm_30.
    pub const SHFL_SYNC: Isa = base("shfl.sync", (6, 0));
    /// `red.add.noftz.f16` (§9.7.13.6): PTX 6.3, sm_70.
    pub const RED_ADD_F16: Isa = base("red.add.noftz.f16", (6, 3));
    /// `red.add.noftz.bf16` (§9.7.13.6): PTX 7.8, sm_90.
    pub const RED_ADD_BF16: Isa = with("red.add.noftz.bf16", (7, 8), Feature::RedBf16);
    /// `fence.proxy.async` (§9.7.13.4): PTX 8.0, sm_90.
    /// `elect.sync`: one lane of the warp (the TMA rings' filling warp, producer.rs).
    pub const ELECT_SYNC: Isa = with("elect.sync", (8, 0), Feature::Elect);
    pub const FENCE_PROXY_ASYNC: Isa = with("fence.proxy.async", (8, 0), Feature::AsyncProxyFence);
    /// `wgmma.mma_async`, `wgmma.fence`, `wgmma.commit_group`, `wgmma.wait_group`
    /// (§9.7.15.5.2, §9.7.15.7): PTX 8.0, sm_90a.
    pub const WGMMA: Isa = with("wgmma", (8, 0), Feature::Wgmma);
    /// `cp.async.bulk.tensor` with a tensor map (§9.7.9.25.5.2): PTX 8.0, sm_90.
    pub const CP_ASYNC_BULK_TENSOR: Isa = with("cp.async.bulk.tensor", (8, 0), Feature::Tma);
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group` and `cp.async.bulk.commit_group` /
    /// `wait_group.read` (§9.7.9.25.4.2, §9.7.9.25.4.4): PTX 8.0, sm_90.
    pub const CP_REDUCE_ASYNC_BULK: Isa = with("cp.reduce.async.bulk", (8, 0), Feature::Tma);
    /// `mbarrier.expect_tx` (PTX 8.0) and `mbarrier.try_wait.parity` (PTX 7.8)
    /// (§9.7.13.15.11, §9.7.13.15.16): sm_90.
    pub const MBARRIER_TX: Isa = with("mbarrier.expect_tx|try_wait", (8, 0), Feature::MbarrierTx);
    /// Clusters of CTAs: `.reqnctapercluster` (§11.4.1.4, PTX 7.8), `%cluster_ctarank`, `mapa`
    /// (§9.7.9.23, PTX 7.8), `barrier.cluster` (§9.7.13.3, PTX 7.8), `mbarrier.arrive` on a
    /// `.shared::cluster` address and `try_wait` at `.cluster` scope (PTX 8.0), and
    /// `cp.async.bulk.tensor … .multicast::cluster` (§9.7.9.25.5.2, PTX 8.0): sm_90.
    pub const CLUSTER: Isa = with(
        "mapa|barrier.cluster|multicast::cluster",
        (8, 0),
        Feature::Tma,
    );
    /// `setmaxnreg.{inc,dec}.sync.aligned.u32` (§9.7.19.5): PTX 8.0, sm_90a/sm_100a/sm_120a.
    pub const SETMAXNREG: Isa = with("setmaxnreg", (8, 0), Feature::Setmaxnreg);

    /// `cvt.f32.{f16,bf16}`: widening a 16-bit float `d` to f32.
    pub fn cvt_to_f32(d: Dtype) -> Isa {
        if d == Dtype::Bf16 {
            Isa::CVT_F32_BF16
        } else {
            Isa::CVT_F16
        }
    }

    /// `cvt.rn.{f16,bf16}.f32`: rounding f32 to the 16-bit float `d`.
    pub fn cvt_from_f32(d: Dtype) -> Isa {
        if d == Dtype::Bf16 {
            Isa::CVT_TO_BF16_OR_PACKED
        } else {
            Isa::CVT_F16
        }
    }
}

/// What the instructions of one kernel need, as the builder recorded it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requirements {
    /// The highest PTX ISA version any instruction needs ((0, 0) when none stated one).
    pub version: (u32, u32),
    /// Each feature needed, with the first family that needed it and the op being lowered then.
    pub features: BTreeMap<Feature, (&'static str, Option<Span>)>,
    /// Every instruction family stated.
    pub used: BTreeSet<&'static str>,
}

impl Requirements {
    /// Records that an instruction of `isa` was emitted while lowering the op at `at`.
    pub fn note(&mut self, isa: Isa, at: Option<Span>) {
        self.version = self.version.max(isa.version);
        if let Some(f) = isa.feature {
            self.features.entry(f).or_insert((isa.what, at));
        }
        self.used.insert(isa.what);
    }

    /// The first feature `target` lacks: (feature, the family that needed it, the op's span).
    pub fn missing_on(&self, target: Target) -> Option<(Feature, &'static str, Option<Span>)> {
        self.features
            .iter()
            .find(|(f, _)| !target.has(**f))
            .map(|(f, (what, at))| (*f, *what, *at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_features_accumulate() {
        let mut r = Requirements::default();
        r.note(Isa::LDMATRIX, None);
        r.note(Isa::CVT_F32_BF16, None);
        assert_eq!(r.version, (7, 1));
        assert!(r.features.is_empty());
        assert_eq!(r.missing_on(Target::Sm80), None);
        r.note(Isa::WGMMA, None);
        r.note(Isa::FENCE_PROXY_ASYNC, None);
        assert_eq!(r.version, (8, 0));
        assert_eq!(
            r.missing_on(Target::Sm80).map(|m| (m.0, m.1)),
            Some((Feature::Wgmma, "wgmma"))
        );
        assert_eq!(r.missing_on(Target::Sm90a), None);
        assert_eq!(
            r.missing_on(Target::Sm120a).map(|m| m.0),
            Some(Feature::Wgmma)
        );
        assert_eq!(r.used.len(), 4);
    }
}
