//! The differential check of one program: every pass against the one before it on the
//! interpreter, and every backend through its assembler.
//!
//! Order and what each stage promises (docs/passes.md):
//! - parse and verify the text (a rejection of a generated program is a generator bug);
//! - `specialize`; its module is the **reference**: its outputs on the inputs of the seed (a
//!   reference that fails at run time, e.g. a data-dependent out-of-bounds access without
//!   `other`, skips the program); for one seed in four it also runs with the instances in
//!   order instead of in parallel: the same bits (generated programs have no races);
//! - `egraph` with only its exact rules: bit-identical (a zero's sign may differ where
//!   [`bounds`](super::bounds) says `add-zero` may apply);
//! - `egraph` (every rule, or the variant under test): within the bound of each output (a
//!   division whose divisor's range only a run shows is bounded when a run of the reference
//!   with range checks passes: [`with_guards`]); outputs without a bound are counted as
//!   unchecked;
//! - `fusion` against `egraph`, `mask_split` against `fusion`: bit-identical;
//! - `pipelining` (default depth, 2 and 4 stages; held rings where a loop qualifies) and
//!   `warp_specialize` with every plan that applies, each followed by `dot_overlap` where it
//!   rotates a loop, against `mask_split`: bit-identical under several scheduler seeds (a split
//!   axis of any tile count: the last program's consumer past the grid writes nothing);
//! - a hand-scheduled ring against its plain twin: bit-identical under every seed;
//! - PTX for each requested target through ptxas (each kernel's module apart, as the runtime
//!   loads a program: `split_entries`), CUDA C through NVRTC and ptxas. A backend
//!   that refuses a program with an error (a limitation it states) is counted, not failed; a
//!   panic, an internal error, or code the assembler rejects, fails.
//!
//! NaNs compare equal whatever their payload. Every panic is caught and fails its stage.

use super::bounds::{egraph_bounds, egraph_bounds_guarded, with_guards};
use super::compare::compare;
use super::outcome::fail;
pub use super::outcome::{Failure, Stats, Verdict};
use super::rings::split_twin;
use kir_backends::interp::{run_printing, HostArg, HostTensor, InterpError, RunOptions};
use kir_backends::nvrtc::{ptxas, Nvrtc};
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_compiler::internal::egraph::rules::{all_rules, Rule};
use kir_compiler::internal::egraph::Limits;
use kir_compiler::internal::passes::{self, PipelineConfig, WsPlan};
use kir_ir::{Module, Opcode};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `m` on the interpreter, discarding what its `print` ops write (the checks compare
/// outputs; tests/tests/authoring.rs checks the lines themselves).
pub fn run_with(
    m: &Module,
    args: &BTreeMap<String, HostArg>,
    opts: &RunOptions,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    run_printing(m, args, opts, &mut std::io::sink())
}

/// The e-graph rules whose rewrites are not bit-exact (docs/passes.md gives their bounds).
pub const INEXACT_RULES: &[&str] = &[
    "exp-to-exp2",
    "mul-scalars-reassoc",
    "div-scalar-to-recip-mul",
    "div-broadcast-to-recip-mul",
    "div-sqrt-to-mul-rsqrt",
];

/// Every e-graph rule that is exact (all but [`INEXACT_RULES`]).
pub fn exact_rules() -> Vec<Rule> {
    all_rules()
        .into_iter()
        .filter(|r| !INEXACT_RULES.contains(&r.name.as_str()))
        .collect()
}

/// What to check.
#[derive(Clone)]
pub struct Config {
    /// The e-graph pass under test (the real one, or a planted variant in a test).
    pub egraph: fn(&Module) -> Module,
    /// PTX targets to assemble.
    pub targets: Vec<Target>,
    /// The target of the CUDA C to compile with NVRTC and assemble (none: skip).
    pub cuda: Option<Target>,
    /// Scheduler seeds per scheduled module.
    pub sched_seeds: u64,
}

impl Default for Config {
    /// The real passes, all four targets, CUDA C for sm_90a, 2 scheduler seeds.
    fn default() -> Config {
        Config {
            egraph: passes::egraph,
            targets: Target::ALL.to_vec(),
            cuda: Some(Target::Sm90a),
            sched_seeds: 2,
        }
    }
}

/// The seed in a case text's first line (`// rpg seed S`).
pub fn seed_of(text: &str) -> Option<u64> {
    text.lines()
        .next()?
        .strip_prefix("// rpg seed ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

type Outs = BTreeMap<String, HostTensor>;

fn guard<T>(stage: &str, f: impl FnOnce() -> T) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        Failure {
            stage: stage.into(),
            message: format!("panicked: {msg}"),
        }
    })
}

fn verify(stage: &str, m: &Module) -> Result<(), Failure> {
    kir_ir::verifier::verify(m).map_err(|e| {
        let t = kir_ir::text::print(m);
        fail(
            stage,
            format!("output does not verify:\n{}", e.render(stage, &t)),
        )
    })
}

fn run(
    stage: &str,
    m: &Module,
    args: &BTreeMap<String, HostArg>,
    seed: u64,
) -> Result<Outs, Failure> {
    let opts = RunOptions {
        parallel: true,
        seed,
    };
    guard(stage, || run_with(m, args, &opts))?.map_err(|e| {
        fail(
            stage,
            format!("run failed (the reference ran): {}", e.message),
        )
    })
}

/// Runs `after` under `seeds` scheduler seeds and demands `want` bit for bit.
fn scheduled(
    stage: &str,
    after: &Module,
    args: &BTreeMap<String, HostArg>,
    want: &Outs,
    seeds: u64,
    stats: &mut Stats,
) -> Result<(), Failure> {
    verify(stage, after)?;
    for s in 0..seeds {
        let got = run(&format!("{stage} seed {s}"), after, args, s)?;
        compare(&format!("{stage} seed {s}"), &got, want, None, stats)?;
    }
    Ok(())
}

/// The scheduling passes on the front end's last module (see the module doc).
fn schedule(
    ms: &Module,
    args: &BTreeMap<String, HostArg>,
    want: &Outs,
    cfg: &Config,
    stats: &mut Stats,
) -> Result<(), Failure> {
    // (stages, held, TMA ring): the TMA variant only counts where a ring qualifies (docs/passes.md).
    let variants: [(Option<usize>, bool, bool); 5] = [
        (None, false, false),
        (Some(2), false, false),
        (Some(4), false, false),
        (Some(3), true, false),
        (None, false, true),
    ];
    let mut unheld = None;
    for (stages, hold, tma) in variants {
        let stage = format!(
            "pipelining {}{}{}",
            stages.map_or("default".to_string(), |s| s.to_string()),
            if hold { " held" } else { "" },
            if tma { " tma" } else { "" }
        );
        let pc = PipelineConfig {
            smem_budget: 232_448,
            stages,
            hold_carried_dots: hold,
            tma_rings: tma,
        };
        let piped = match guard(&stage, || passes::pipelining(ms, &pc))? {
            Ok(m) => m,
            Err(e) => {
                let msg = format!("{e:?}");
                if msg.contains("over the target's") {
                    stats.add("pipelining over budget", 1);
                    continue;
                }
                return Err(fail(&stage, format!("failed: {msg}")));
            }
        };
        if crate::sched_diff::count(&piped, Opcode::AsyncCopy) == 0
            || (tma && crate::sched_diff::count(&piped, Opcode::MbarAlloc) == 0)
        {
            continue;
        }
        stats.add(format!("{stage} ringed"), 1);
        scheduled(&stage, &piped, args, want, cfg.sched_seeds, stats)?;
        if tma {
            overlapped("dot_overlap", &piped, args, want, cfg, stats)?;
        }
        if stages.is_none() && !tma {
            unheld = Some(piped);
        }
    }
    let Some(piped) = unheld else { return Ok(()) };
    for plan in WsPlan::ALL {
        let stage = format!("warp_specialize {}", plan.name);
        let Ok(ws) = guard(&stage, || passes::warp_specialize(&piped, &plan))? else {
            continue;
        };
        if crate::sched_diff::count(&ws, Opcode::WarpSpecialize) == 0 {
            continue;
        }
        stats.add(format!("{stage} applied"), 1);
        scheduled(&stage, &ws, args, want, cfg.sched_seeds, stats)?;
        overlapped(
            &format!("dot_overlap {}", plan.name),
            &ws,
            args,
            want,
            cfg,
            stats,
        )?;
    }
    Ok(())
}

/// `dot_overlap` on a scheduled module: where it rotates a loop, bit-identical to the reference
/// under several scheduler seeds.
fn overlapped(
    stage: &str,
    m: &Module,
    args: &BTreeMap<String, HostArg>,
    want: &Outs,
    cfg: &Config,
    stats: &mut Stats,
) -> Result<(), Failure> {
    let (rotated, n) = guard(stage, || passes::dot_overlap(m))?
        .map_err(|e| fail(stage, format!("failed: {e:?}")))?;
    if n == 0 {
        return Ok(());
    }
    stats.add(format!("{stage} rotated"), 1);
    scheduled(stage, &rotated, args, want, cfg.sched_seeds, stats)
}

fn backends(
    text: &str,
    cfg: &Config,
    nv: Option<&Nvrtc>,
    stats: &mut Stats,
) -> Result<(), Failure> {
    for &t in &cfg.targets {
        let stage = format!("ptx {}", t.name());
        match guard(&stage, || compile(text, &[], None, t, Emit::Ptx))? {
            Err(e) => refused(&stage, "ptx", &e.to_string(), stats)?,
            Ok(c) => {
                // What the runtime loads: one module per kernel, each a whole program.
                for (_, part) in kir_backends::runtime::split_entries(&c.text) {
                    ptxas(&part, t.name()).map_err(|e| fail(&stage, e))?;
                }
                stats.add(format!("ptxas {}", t.name()), 1);
            }
        }
    }
    if let (Some(t), Some(nv)) = (cfg.cuda, nv) {
        let stage = format!("cuda {}", t.name());
        match guard(&stage, || compile(text, &[], None, t, Emit::Cuda))? {
            Err(e) => refused(&stage, "cuda", &e.to_string(), stats)?,
            Ok(c) => {
                let arch = format!("--gpu-architecture={}", t.compute_name());
                let ptx = nv
                    .compile(&c.text, "rpg.cu", &[&arch])
                    .map_err(|e| fail(&stage, format!("NVRTC: {e}")))?;
                ptxas(&ptx, t.name())
                    .map_err(|e| fail(&stage, format!("ptxas on NVRTC's PTX: {e}")))?;
                stats.add(format!("nvrtc+ptxas {}", t.name()), 1);
            }
        }
    }
    Ok(())
}

/// Counts a backend's refusal; an internal error (a broken invariant, not a stated
/// limitation) fails the stage.
fn refused(stage: &str, backend: &str, msg: &str, stats: &mut Stats) -> Result<(), Failure> {
    if msg.contains("internal") {
        return Err(fail(stage, format!("internal error: {msg}")));
    }
    stats.add(format!("{backend} refused: {}", refusal(msg)), 1);
    Ok(())
}

/// A backend's error message without its varying parts (names, numbers), for counting.
fn refusal(msg: &str) -> String {
    let line = msg
        .lines()
        .find(|l| l.contains("error"))
        .or_else(|| msg.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("");
    let m = line.split("error: ").last().unwrap_or(line);
    let m: String = m
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    let m = m
        .split('`')
        .enumerate()
        .map(|(i, p)| if i % 2 == 1 { "_" } else { p })
        .collect::<Vec<_>>()
        .join("`");
    m.chars().take(90).collect()
}

/// The bounds of the `egraph` stage: those of [`egraph_bounds_guarded`] when a run of `spec`
/// with its guards shows every guarded divisor in range on these inputs, else the static ones
/// (those divisions then leave their outputs unbounded).
fn guarded_bounds(
    spec: &Module,
    args: &BTreeMap<String, HostArg>,
    stats: &mut Stats,
) -> BTreeMap<String, super::bounds::Bound> {
    let (b, guards) = egraph_bounds_guarded(spec);
    if guards.is_empty() {
        return b;
    }
    let m = with_guards(spec, &guards);
    let ok = kir_ir::verifier::verify(&m).is_ok()
        && guard("egraph guards", || {
            run_with(&m, args, &RunOptions::default())
        })
        .is_ok_and(|r| r.is_ok());
    stats.add(
        if ok {
            "egraph divisors in range at run time"
        } else {
            "egraph divisors out of range at run time"
        },
        1,
    );
    if ok {
        b
    } else {
        egraph_bounds(spec, true)
    }
}

/// Checks one program text (see the module doc): a generated case, or a saved reduced one.
pub fn check(text: &str, cfg: &Config, nv: Option<&Nvrtc>) -> (Verdict, Stats) {
    let mut stats = Stats::default();
    let v = match check_inner(text, cfg, nv, &mut stats) {
        Ok(v) => v,
        Err(f) => Verdict::Fail(f),
    };
    (v, stats)
}

fn front(stage: &str, text: &str) -> Result<Module, Failure> {
    let g = guard(stage, || kir_ir::text::parse(text))?.map_err(|e| {
        fail(
            stage,
            format!("does not parse:\n{}", e.render("case", text)),
        )
    })?;
    kir_ir::verifier::verify(&g).map_err(|e| {
        fail(
            stage,
            format!("does not verify:\n{}", e.render("case", text)),
        )
    })?;
    let s = guard("specialize", || passes::specialize(&g, &[]))?
        .map_err(|e| fail("specialize", format!("failed:\n{}", e.render("case", text))))?;
    verify("specialize", &s)?;
    Ok(s)
}

fn check_inner(
    text: &str,
    cfg: &Config,
    nv: Option<&Nvrtc>,
    stats: &mut Stats,
) -> Result<Verdict, Failure> {
    let seed = seed_of(text).ok_or_else(|| fail("generate", "no `// rpg seed S` line"))?;
    let (module_text, twin) = split_twin(text);
    let spec = front("generate", module_text)?;
    // Kernels that order an add with a semaphore (`ordered`).
    let ordered = spec
        .kernels
        .values()
        .filter(|k| k.dfg.ops.values().any(|o| o.opcode == Opcode::SemWait))
        .count();
    if ordered > 0 {
        stats.add("ordered sections", ordered as u64);
    }
    let args = match super::inputs::args(&spec, seed) {
        Ok(a) => a,
        Err(e) => return Ok(Verdict::Skip(format!("inputs: {e}"))),
    };
    // The reference: the specialized module, or for a ring its plain twin.
    let reference = match twin {
        Some(t) => front("generate twin", t)?,
        None => spec.clone(),
    };
    let want = match run_with(&reference, &args, &RunOptions::default()) {
        Ok(o) => o,
        Err(e) => return Ok(Verdict::Skip(format!("reference: {}", e.message))),
    };
    // Instances in order instead of in parallel: the same bits (generated programs never let
    // two instances write one element), one seed in four.
    if seed % 4 == 0 {
        let opts = RunOptions {
            parallel: false,
            seed: 0,
        };
        let seq = guard("interp-sequential", || run_with(&reference, &args, &opts))?
            .map_err(|e| fail("interp-sequential", e.message))?;
        compare("interp-sequential", &seq, &want, None, stats)?;
    }
    if twin.is_some() {
        scheduled("ring", &spec, &args, &want, cfg.sched_seeds.max(4), stats)?;
    }
    let base = if twin.is_some() {
        run("ring", &spec, &args, 0)?
    } else {
        want.clone()
    };
    // The e-graph, exact rules only.
    let exact = guard("egraph-exact", || {
        passes::egraph_with(&spec, &exact_rules(), &Limits::default()).0
    })?;
    verify("egraph-exact", &exact)?;
    let got = run("egraph-exact", &exact, &args, 0)?;
    compare(
        "egraph-exact",
        &got,
        &base,
        Some(&egraph_bounds(&spec, false)),
        stats,
    )?;
    // The e-graph as configured.
    let eg = guard("egraph", || (cfg.egraph)(&spec))?;
    verify("egraph", &eg)?;
    let eg_out = run("egraph", &eg, &args, 0)?;
    let bounds = guarded_bounds(&spec, &args, stats);
    compare("egraph", &eg_out, &base, Some(&bounds), stats)?;
    let fused = guard("fusion", || passes::fusion(&eg))?;
    verify("fusion", &fused)?;
    if fused != eg {
        stats.add("fusion changed", 1);
    }
    let fused_out = run("fusion", &fused, &args, 0)?;
    compare("fusion", &fused_out, &eg_out, None, stats)?;
    let ms = guard("mask_split", || passes::mask_split(&fused))?;
    verify("mask_split", &ms)?;
    if ms != fused {
        stats.add("mask_split changed", 1);
    }
    let ms_out = run("mask_split", &ms, &args, 0)?;
    compare("mask_split", &ms_out, &fused_out, None, stats)?;
    if twin.is_none() {
        schedule(&ms, &args, &ms_out, cfg, stats)?;
    }
    backends(module_text, cfg, nv, stats)?;
    Ok(Verdict::Pass)
}
