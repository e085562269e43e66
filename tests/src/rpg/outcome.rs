//! What checking one generated program comes to: a [`Verdict`] (pass, skip, or the
//! [`Failure`] of a stage) and the [`Stats`] counters a run sums. A leaf: the checker
//! (`check.rs`) and the output comparison (`compare.rs`) both build these.

use std::collections::BTreeMap;

/// A failed stage: which, and what happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The stage (`egraph`, `fusion`, `pipelining 2 held`, `ptx sm_80`, …).
    pub stage: String,
    /// What went wrong.
    pub message: String,
}

impl Failure {
    /// The stage without its variant (`pipelining 2 held` → `pipelining`): what a reduction
    /// keeps failing.
    pub fn class(&self) -> &str {
        self.stage.split(' ').next().unwrap_or("")
    }
}

/// The result of checking one program.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every stage agreed.
    Pass,
    /// The reference could not run (the reason); nothing was compared.
    Skip(String),
    /// A stage failed.
    Fail(Failure),
}

/// Counters of what a check did (summed over a run by the driver).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Counter name → count.
    pub counts: BTreeMap<String, u64>,
}

impl Stats {
    /// Adds `n` to counter `k`.
    pub fn add(&mut self, k: impl Into<String>, n: u64) {
        *self.counts.entry(k.into()).or_default() += n;
    }

    /// Adds every counter of `o`.
    pub fn merge(&mut self, o: &Stats) {
        for (k, v) in &o.counts {
            self.add(k.clone(), *v);
        }
    }
}

/// A failure of `stage` with `message`.
pub(crate) fn fail(stage: &str, message: impl Into<String>) -> Failure {
    Failure {
        stage: stage.into(),
        message: message.into(),
    }
}
