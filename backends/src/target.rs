//! GPU targets kir lowers to, and the PTX ISA version each one needs at least.

use std::fmt;

/// A GPU target architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Ampere (A100): mma.sync, ldmatrix, cp.async.
    Sm80,
    /// Hopper (H100/H200) with arch-specific features: wgmma, TMA, setmaxnreg.
    Sm90a,
    /// Blackwell datacenter: tcgen05 / TMEM, TMA.
    Sm100a,
    /// Blackwell consumer: mma.sync and TMA, no wgmma, no tcgen05.
    Sm120a,
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

    /// The compute capability for NVRTC (`compute_90a`) — what `--gpu-architecture` takes.
    pub fn compute_name(self) -> &'static str {
        match self {
            Target::Sm80 => "compute_80",
            Target::Sm90a => "compute_90a",
            Target::Sm100a => "compute_100a",
            Target::Sm120a => "compute_120a",
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
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
