//! The types of the pass manager: the [`Pass`] trait every pass implements, the IR [`Level`]s
//! and [`Phase`]s it is placed by, what it [`Preserves`], and the [`PassContext`] it reads.

use crate::options::{Defines, ScheduleOptions};
use kir_ir::{Diagnostics, Module};

/// The IR level a pass takes or leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// As parsed: constants, `static_if`s and conditional params still present.
    Generic,
    /// Specialized: no constants, every dtype known; no scheduling ops.
    Specialized,
    /// Scheduled for a target: shared-memory rings, async copies, barriers, warp roles.
    Scheduled,
}

/// The phase a pass belongs to: the front end (no target) or the scheduling passes (which need
/// [`ScheduleOptions::target`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Runs for every compilation and for the interpreter.
    Frontend,
    /// Runs only for a target.
    Schedule,
}

/// What a pass keeps true of its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preserves {
    /// The module's outputs on every input: the interpreter gives the same results before and
    /// after the pass (within the rounding the pass documents), which the test suite checks
    /// differentially for every pass that says so.
    pub results: bool,
    /// The module's entry params and grid formulas (a launcher's ABI).
    pub signature: bool,
}

/// What a pass may read besides the module.
pub struct PassContext<'a> {
    /// The `-D NAME=VALUE` overrides (for `specialize`).
    pub defines: &'a Defines,
    /// The scheduling options (for the schedule phase; `target` is set there).
    pub schedule: &'a ScheduleOptions,
}

/// A compiler pass. Implementations are deterministic: the same module and context give the
/// same output, so dumps and snapshots are stable.
pub trait Pass: Send + Sync {
    /// The name `--dump-after` takes (snake_case, unique in a [`crate::internal::pass::PassManager`]).
    fn name(&self) -> &'static str;
    /// The phase it runs in.
    fn phase(&self) -> Phase;
    /// The IR level it takes.
    fn needs(&self) -> Level;
    /// The IR level it leaves.
    fn produces(&self) -> Level;
    /// What it keeps true of its input.
    fn preserves(&self) -> Preserves;
    /// Runs on `m`; `Ok(None)` when the context does not ask for it (the module goes on
    /// unchanged and the pass is not observed).
    fn run(&self, m: &Module, cx: &PassContext) -> Result<Option<Module>, Diagnostics>;
}
