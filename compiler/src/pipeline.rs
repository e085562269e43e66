//! The pipeline: the compile driver ([`compile`], run with a [`CompilePlan`]) and the entry
//! points over the pass manager ([`crate::pass`], whose registry is the one place passes are
//! ordered).
//!
//! The front end is `parse` → verify → `specialize` → verify → `egraph` → verify → `fusion` →
//! verify → `mask_split` → verify ([`run_observed`]); its last module, [`Frontend::output`], is
//! what the backends, `kirc run`, `kirc compile` and `kirc bench` consume. Each intermediate
//! module is kept in [`Frontend`] and checked differentially against the one before it by the
//! test suite. The scheduling passes follow for a target ([`schedule_observed`]): when asked,
//! `swap_operands` (a dot loop's accumulator computed transposed), when asked `persistent` (a
//! fixed number of programs walking every tile), then `pipelining` (an N-stage
//! shared-memory ring of each loop's dot-operand loads), when asked `warp_specialize` (producer
//! and consumer partitions), and when asked `dot_overlap` (each TMA ring loop's fresh stage dot
//! issued with the previous block's accumulating dot, in the consumer when warp-specialized);
//! they need the target's shared-memory budget, so they run only with
//! [`ScheduleOptions::target`] set. Which scheduling options a compilation uses is decided by the
//! schedule search (`crate::search`) from the plan. Every pass can be dumped: [`compile_observed`]
//! shows the IR a backend lowered (`kirc compile/run --dump-after PASS`), and [`dump_after_with`]
//! the IR with a pass forced to run (`kirc check --dump-after PASS [--target T]`, snapshot tests).

use crate::compiled::{check_ptx_size, specialization_suffix, CompileError, Compiled, Emit, Stage};
use crate::cost;
use crate::options::Fusion;
use crate::pass::{PassManager, Phase};
use crate::passes;
use crate::plan::{CompilePlan, Judge};
use crate::search;
use crate::split;
use kir_backends::backend::{Backend, CudaCBackend, InterpBackend, PtxBackend};
use kir_ir::{text, Diagnostics, Module};
use std::sync::LazyLock;

pub use crate::options::{ws_plans, Defines, DumpError, Frontend, ScheduleOptions, WsChoice};
pub use crate::split::entry_module;

/// The passes in pipeline order, by the name `--dump-after` takes: `parse` and the passes of
/// [`PassManager::standard`] (the registry, `pass/registry.rs`, is the one list).
pub static PASSES: LazyLock<Vec<&'static str>> = LazyLock::new(|| PassManager::standard().names());

/// The passes of [`PASSES`] that schedule for a target (they need [`ScheduleOptions::target`]).
pub static SCHEDULE_PASSES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let pm = PassManager::standard();
    pm.names()
        .into_iter()
        .filter(|n| pm.get(n).is_some_and(|p| p.phase() == Phase::Schedule))
        .collect()
});

/// Runs the scheduling passes on the front end's final module for `opts.target` (none without
/// a target), verifying after each and calling `observe(pass, module)`.
pub fn schedule_observed(
    m: &Module,
    opts: &ScheduleOptions,
    observe: &mut dyn FnMut(&str, &Module),
) -> Result<Module, Diagnostics> {
    PassManager::standard().run_schedule(m, opts, observe)
}

/// Runs every pass in order, verifying after each one that changes the IR, and calls
/// `observe(pass, module)` after each pass (for dumps and snapshot tests).
pub fn run_observed(
    src: &str,
    defines: &Defines,
    observe: &mut dyn FnMut(&str, &Module),
) -> Result<Frontend, Diagnostics> {
    PassManager::standard().run_frontend(src, defines, observe)
}

/// Runs the whole pipeline; returns the generic and the specialized module (for tests and tools
/// that look at specialization itself; what runs is [`output`]).
pub fn frontend(src: &str, defines: &Defines) -> Result<(Module, Module), Diagnostics> {
    let f = run_observed(src, defines, &mut |_, _| {})?;
    Ok((f.generic, f.specialized))
}

/// Runs the whole pipeline; returns the module the backends and the interpreter run
/// ([`Frontend::output`]).
pub fn output(src: &str, defines: &Defines) -> Result<Module, Diagnostics> {
    Ok(run_observed(src, defines, &mut |_, _| {})?.output)
}

/// Compiles `src` as `plan` says: the front end with the plan's defines, the module of the
/// plan's stage (its entry kernel), then for PTX the schedule search (`crate::search`: the
/// scheduling passes, candidate by candidate, until the backend accepts one), the backend, and
/// META.json. What `kirc compile`, `run`, `bench` and the library all call.
pub fn compile(src: &str, plan: &CompilePlan) -> Result<Compiled, CompileError> {
    compile_observed(src, plan, &mut |_, _| {})
}

/// [`compile`], calling `observe(pass, module)` after every front-end pass and after every
/// scheduling pass of the candidate that was lowered: a dump of a pass is exactly the IR the
/// backend went on to lower.
///
/// A kernel that fits its target's shared memory at no ring depth with the default tiles is
/// compiled again with a default tile constant halved ([`CompilePlan::shrunk`]), until it fits
/// or nothing is left to shrink; each step is a line of [`Compiled::tried`]. A tile the user set
/// with `-D` (or `--warps`/`--stages`) is never changed: that error stands.
pub fn compile_observed(
    src: &str,
    plan: &CompilePlan,
    observe: &mut dyn FnMut(&str, &Module),
) -> Result<Compiled, CompileError> {
    let mut plan = plan.clone();
    let mut shrunk: Vec<String> = vec![];
    loop {
        match compile_planned(src, &plan, observe) {
            Err(e) if e.to_string().contains("bytes of shared memory") => {
                let Some(smaller) = plan.shrunk(src) else {
                    return Err(e);
                };
                let step = smaller
                    .config
                    .report
                    .rsplit("; ")
                    .next()
                    .unwrap_or_default();
                shrunk.push(format!("the default tiles, then {step}: {e}"));
                plan = smaller;
            }
            Ok(mut out) => {
                out.tried.extend(shrunk);
                return Ok(out);
            }
            Err(e) => return Err(e),
        }
    }
}

/// [`compile_observed`] for one plan, with no shrinking.
fn compile_planned(
    src: &str,
    plan: &CompilePlan,
    observe: &mut dyn FnMut(&str, &Module),
) -> Result<Compiled, CompileError> {
    let frontend = |pm: PassManager, defines: &Defines, seen: &mut Vec<(String, Module)>| {
        pm.run_frontend(src, defines, &mut |p, m| {
            seen.push((p.to_string(), m.clone()))
        })
        .map_err(CompileError::Source)
    };
    let mut seen = vec![];
    let manager = || match plan.flags.fusion {
        Fusion::Off => PassManager::standard().without("fusion"),
        Fusion::Auto | Fusion::On => PassManager::standard(),
    };
    let mut f = frontend(manager(), &plan.defines, &mut seen)?;
    let mut fused = f.fused != f.optimized;
    // The fused kernels' own configurations (crate::fused_plan): the fused candidate is
    // specialized and lowered with them, the unfused one with `plan`.
    let mut fused_plan = None;
    if fused && matches!(plan.stage, Stage::Fused | Stage::Output) {
        if let Some(p) = plan.for_fused(src, &f.fused) {
            if p.defines != plan.defines {
                let mut again = vec![];
                let g = frontend(manager(), &p.defines, &mut again)?;
                if g.fused != g.optimized {
                    (f, seen) = (g, again);
                    fused_plan = Some(p);
                }
            } else {
                fused_plan = Some(p);
            }
        }
    }
    fused = f.fused != f.optimized;
    let fused_config = fused_plan
        .as_ref()
        .map(|p| format!("; the fused module's {}", p.config_report()));
    let weigh = plan.flags.fusion == Fusion::Auto
        && fused
        && plan.judge == Judge::Ptx
        && plan.emit == Emit::Ptx
        && plan.stage == Stage::Output;
    let mut out = lower(f, fused_plan.as_ref().unwrap_or(plan), &mut seen)?;
    if weigh {
        let mut seen_unfused = vec![];
        let g = frontend(
            PassManager::standard().without("fusion"),
            &plan.defines,
            &mut seen_unfused,
        )?;
        let unfused = lower(g, plan, &mut seen_unfused)?;
        let cost = |c: &Compiled, seen: &[(String, Module)]| {
            let spec = seen
                .iter()
                .rev()
                .find(|(p, _)| p == "mask_split")
                .map(|x| &x.1)?;
            cost::estimate(spec, &c.module, &c.reports, plan.target)
        };
        let (a, b) = (cost(&out, &seen), cost(&unfused, &seen_unfused));
        let take_unfused = match (&a, &b) {
            (Some(a), Some(b)) => b.seconds < a.seconds,
            _ => false,
        };
        let text = |e: &Option<cost::Estimate>| match e {
            Some(e) => format!("{:.3} ms ({})", e.seconds * 1e3, e.launches.join("; ")),
            None => "unknown".to_string(),
        };
        let note = format!(
            "{} (estimates with every dim = {}: fused {}, unfused {}){}",
            if take_unfused {
                "not taken, the unfused kernels are estimated faster"
            } else {
                "taken"
            },
            passes::NOMINAL_DIM,
            text(&a),
            text(&b),
            fused_config.clone().unwrap_or_default()
        );
        if take_unfused {
            (out, seen) = (unfused, seen_unfused);
        }
        out.fusion = Some(note);
    } else if fused {
        let why = match plan.flags.fusion {
            Fusion::On => "taken (--fuse)",
            _ => "taken (no target to estimate for)",
        };
        out.fusion = Some(format!("{why}{}", fused_config.unwrap_or_default()));
    } else if plan.flags.fusion == Fusion::Off {
        out.fusion = Some("not run (--no-fuse)".to_string());
    }
    for (p, m) in &seen {
        observe(p, m);
    }
    Ok(out)
}

/// Lowers the front end's module `f` as `plan` asks, pushing each scheduling pass's module of
/// the candidate lowered onto `seen`.
fn lower(
    f: Frontend,
    plan: &CompilePlan,
    seen: &mut Vec<(String, Module)>,
) -> Result<Compiled, CompileError> {
    let spec = match plan.stage {
        Stage::Specialized => f.specialized,
        Stage::Optimized => f.optimized,
        Stage::Fused => f.fused,
        Stage::Output => f.output,
    };
    let spec = entry_module(spec, plan.kernel.as_deref()).map_err(CompileError::Plain)?;
    let values = passes::const_values(&f.generic, &plan.defines).map_err(CompileError::Source)?;
    let mut suffix = specialization_suffix(&values);
    let target = plan.target;
    // A module configured kernel by kernel: one kernel of it takes its own configuration, and
    // two or more are scheduled one by one ([`split`]).
    let one;
    let plan = match plan.kernel.as_deref() {
        Some(k) if !plan.kernel_configs.is_empty() => {
            one = plan.for_kernel(k);
            &one
        }
        _ => plan,
    };
    if plan.judge == Judge::Ptx
        && plan.emit != Emit::Ir
        && !plan.kernel_configs.is_empty()
        && spec.kernels.len() > 1
    {
        return split::lower(&spec, plan, &suffix, seen);
    }
    let backend: Box<dyn Backend> = match (plan.emit, plan.judge) {
        (Emit::Ir, _) => {
            return Ok(Compiled {
                text: text::print(&spec),
                meta: None,
                module: spec,
                reports: Vec::new(),
                tried: Vec::new(),
                fusion: None,
            })
        }
        (_, Judge::CudaC) => Box::new(CudaCBackend { target }),
        (_, Judge::Interp) => Box::new(InterpBackend { target }),
        (_, Judge::Ptx) => {
            suffix.push_str(&plan.symbol_suffix());
            Box::new(PtxBackend {
                target,
                opts: plan.ptx_options(),
            })
        }
    };
    let found = search::search(plan, &spec, &*backend, &suffix)?;
    seen.extend(found.passes.iter().map(|(p, m)| (p.to_string(), m.clone())));
    if plan.judge == Judge::Ptx {
        check_ptx_size(&found.module, target, &found.lowered)?;
    }
    let meta = (plan.judge != Judge::Interp).then(|| {
        kir_backends::meta::module_meta(
            &found.module,
            target,
            backend.name(),
            found.lowered.version,
            &found.lowered.kernels,
        )
    });
    Ok(Compiled {
        text: found.lowered.text,
        meta,
        module: found.module,
        reports: found.lowered.reports,
        tried: found.tried,
        fusion: None,
    })
}

/// The canonical IR text right after `pass` (one of [`PASSES`] but the scheduling ones).
pub fn dump_after(src: &str, defines: &Defines, pass: &str) -> Result<String, DumpError> {
    dump_after_with(src, defines, pass, &ScheduleOptions::default())
}

/// The canonical IR text right after `pass` (one of [`PASSES`]); the scheduling passes run with
/// `opts` (as [`crate::plan::explore`] builds them to force `pass` to run) and need its target.
pub fn dump_after_with(
    src: &str,
    defines: &Defines,
    pass: &str,
    opts: &ScheduleOptions,
) -> Result<String, DumpError> {
    PassManager::standard().dump_after(src, defines, pass, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "module m\n\nconst N: int = 4 where N > 0\n\n\
        kernel @k(x: in tensor<f32>[R], y: out tensor<f32>[R]) grid [cdiv(R, N), 1, 1] {\n\
        \x20 %i = program_id 0 : i32\n\
        \x20 %n = const N : i32\n\
        \x20 %o = mul %i, %n : i32\n\
        \x20 %t = load x[%o] other 0.0 : tile<N x f32>\n\
        \x20 store y[%o], %t guard\n\
        }\n";

    #[test]
    fn dump_after_each_pass() {
        let parsed = dump_after(SRC, &[], "parse").unwrap();
        assert!(parsed.contains("const N: int = 4"), "{parsed}");
        let spec = dump_after(SRC, &[("N".into(), "8".into())], "specialize").unwrap();
        assert!(!spec.contains("const N"), "{spec}");
        assert!(spec.contains("tile<8xf32>"), "{spec}");
        assert!(spec.contains("cdiv(R, 8)"), "{spec}");
        let err = dump_after(SRC, &[], "no-such-pass").unwrap_err();
        assert!(matches!(err, DumpError::UnknownPass(..)));
        // The message lists every pass.
        let msg = err.to_string();
        for p in PASSES.iter() {
            assert!(msg.contains(p), "{msg}");
        }
        // Every pass that needs no target is dumpable without one.
        for p in PASSES.iter().filter(|p| !SCHEDULE_PASSES.contains(p)) {
            assert!(!dump_after(SRC, &[], p).unwrap().is_empty(), "{p}");
        }
    }

    #[test]
    fn frontend_reports_where_violations() {
        let err = frontend(SRC, &[("N".into(), "0".into())]).unwrap_err();
        assert!(err.0[0].message.contains("does not satisfy"), "{err:?}");
    }

    #[test]
    fn every_builtin_specializes_with_defaults() {
        for (name, src) in crate::oplib::builtins() {
            if let Err(d) = frontend(src, &[]) {
                panic!("{name}: {}", d.render(&format!("{name}.kir"), src));
            }
        }
    }
}
