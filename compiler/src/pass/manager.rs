//! [`PassManager`]: the passes in order, run with verification after each and an observer.

use super::registry;
use super::types::{Pass, PassContext, Phase};
use crate::options::{Defines, DumpError, Frontend, ScheduleOptions};
use kir_ir::{text, verifier, Diagnostics, Module};

/// The passes of a pipeline in order. [`PassManager::standard`] is the compiler's; a caller may
/// insert passes of its own.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
}

impl Default for PassManager {
    fn default() -> PassManager {
        PassManager::standard()
    }
}

impl PassManager {
    /// The compiler's pipeline ([`registry::standard`]).
    pub fn standard() -> PassManager {
        PassManager {
            passes: registry::standard(),
        }
    }

    /// Every pass by the name `--dump-after` takes, in order: `parse`, then the registered
    /// passes.
    pub fn names(&self) -> Vec<&'static str> {
        std::iter::once("parse")
            .chain(self.passes.iter().map(|p| p.name()))
            .collect()
    }

    /// This pipeline without the pass called `name` (unchanged if there is none): `--no-fuse`
    /// runs the front end without `fusion`.
    pub fn without(mut self, name: &str) -> PassManager {
        self.passes.retain(|p| p.name() != name);
        self
    }

    /// The pass called `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Pass> {
        self.passes.iter().find(|p| p.name() == name).map(|p| &**p)
    }

    /// Inserts `pass` right after the pass called `after` (`parse` puts it first). Its phase must
    /// be the phase of its neighbours, and its name new.
    pub fn insert_after(&mut self, after: &str, pass: Box<dyn Pass>) -> Result<(), String> {
        if self.names().contains(&pass.name()) {
            return Err(format!(
                "a pass named `{}` is already registered",
                pass.name()
            ));
        }
        let at = match after {
            "parse" => 0,
            _ => {
                self.passes
                    .iter()
                    .position(|p| p.name() == after)
                    .ok_or_else(|| {
                        format!(
                            "no pass `{after}` to insert after (passes: {})",
                            self.names().join(", ")
                        )
                    })?
                    + 1
            }
        };
        let before = at.checked_sub(1).map(|i| self.passes[i].phase());
        let next = self.passes.get(at).map(|p| p.phase());
        let fits = match pass.phase() {
            Phase::Frontend => before != Some(Phase::Schedule),
            Phase::Schedule => next != Some(Phase::Frontend),
        };
        if !fits {
            return Err(format!(
                "pass `{}` ({:?} phase) cannot run after `{after}`: the front end's passes come \
                 before the scheduling passes",
                pass.name(),
                pass.phase()
            ));
        }
        self.passes.insert(at, pass);
        Ok(())
    }

    /// Parses `src`, then runs every front-end pass in order, verifying after each and calling
    /// `observe(pass, module)` after each (for dumps and snapshot tests).
    pub fn run_frontend(
        &self,
        src: &str,
        defines: &Defines,
        observe: &mut dyn FnMut(&str, &Module),
    ) -> Result<Frontend, Diagnostics> {
        let generic = text::parse(src)?;
        verifier::verify(&generic)?;
        observe("parse", &generic);
        let schedule = ScheduleOptions::default();
        let cx = PassContext {
            defines,
            schedule: &schedule,
        };
        let mut cur = generic.clone();
        let (mut specialized, mut optimized, mut fused) = (None, None, None);
        for pass in self.passes.iter().filter(|p| p.phase() == Phase::Frontend) {
            if let Some(next) = pass.run(&cur, &cx)? {
                verifier::verify(&next)?;
                observe(pass.name(), &next);
                cur = next;
            }
            match pass.name() {
                "specialize" => specialized = Some(cur.clone()),
                "egraph" => optimized = Some(cur.clone()),
                "fusion" => fused = Some(cur.clone()),
                _ => {}
            }
        }
        let specialized = specialized.unwrap_or_else(|| generic.clone());
        let optimized = optimized.unwrap_or_else(|| specialized.clone());
        let fused = fused.unwrap_or_else(|| optimized.clone());
        Ok(Frontend {
            generic,
            specialized,
            optimized,
            fused,
            output: cur,
        })
    }

    /// Runs the scheduling passes on `m` for `opts.target` (none without a target), verifying
    /// after each pass that ran and calling `observe(pass, module)`.
    pub fn run_schedule(
        &self,
        m: &Module,
        opts: &ScheduleOptions,
        observe: &mut dyn FnMut(&str, &Module),
    ) -> Result<Module, Diagnostics> {
        if opts.target.is_none() {
            return Ok(m.clone());
        }
        let cx = PassContext {
            defines: &[],
            schedule: opts,
        };
        let mut cur = m.clone();
        for pass in self.passes.iter().filter(|p| p.phase() == Phase::Schedule) {
            if let Some(next) = pass.run(&cur, &cx)? {
                verifier::verify(&next)?;
                observe(pass.name(), &next);
                cur = next;
            }
        }
        Ok(cur)
    }

    /// The canonical IR text right after `pass`, the scheduling passes run with `opts` (which
    /// need a target). Empty when the pass did not run with these options.
    pub fn dump_after(
        &self,
        src: &str,
        defines: &Defines,
        pass: &str,
        opts: &ScheduleOptions,
    ) -> Result<String, DumpError> {
        let Some(phase) = (pass == "parse")
            .then_some(Phase::Frontend)
            .or_else(|| self.get(pass).map(|p| p.phase()))
        else {
            return Err(DumpError::UnknownPass(
                pass.to_string(),
                self.names().join(", "),
            ));
        };
        if phase == Phase::Schedule && opts.target.is_none() {
            return Err(DumpError::NeedsTarget(pass.to_string()));
        }
        let mut dump = None;
        let mut observe = |name: &str, m: &Module| {
            if name == pass {
                dump = Some(text::print(m));
            }
        };
        let f = self
            .run_frontend(src, defines, &mut observe)
            .map_err(DumpError::Failed)?;
        if phase == Phase::Schedule {
            self.run_schedule(&f.output, opts, &mut observe)
                .map_err(DumpError::Failed)?;
        }
        Ok(dump.unwrap_or_default())
    }
}
