//! The autotuner behind `kirc tune` (docs/tuning.md): searches the tile constants that a module
//! declares tunable (`const BLOCK_M: int = 64 tune {32, 64, 128} where …`) and the lowering
//! flags of the target, and returns the fastest candidate that computes the right results.
//!
//! For every candidate of the space ([`space`]), in a fixed order:
//! 1. **compile** it with [`CompilePlan::resolve`] and [`pipeline::compile`] for the target:
//!    what the compiler rejects (a `where` violated, shared memory or PTX size over the
//!    target's limits, warp specialization that does not apply) is dropped and counted;
//!    a candidate whose PTX and META.json equal an earlier one's (up to kernel symbols) is
//!    dropped as a duplicate;
//! 2. **check** it once: [`Measure::run`] on small ragged random inputs ([`check`]), compared
//!    with the interpreter's results on the same inputs (the module at the user's `-D`s with
//!    every other constant at its default) within the output dtype's tolerance; a wrong
//!    candidate is dropped with an [`Event::Dropped`];
//! 3. **time** it with [`Measure::time`] on the given shapes.
//!
//! An [`Event::Progress`] follows every candidate. The winner is the fastest timed candidate
//! ([`TuneResult::winner`]; ties go to the earlier one), as `-D` flags and as a
//! `crate::configs::Config` value ([`Candidate::config`]). Nothing is stored on disk here.
//!
//! Layout: `types` (the leaf: candidates, the [`Measure`] trait, results, errors), `space`
//! (enumeration), `check` (inputs and comparison), `report` (progress line and table), this
//! file (the loop).

pub mod check;
pub mod report;
pub mod space;
pub mod types;

pub use check::{MAX_CHECK_ELEMENTS, SMALL_DIM};
pub use space::MAX_SPACE;
pub use types::{
    Axes, Candidate, Dropped, Event, Measure, Prepared, Progress, Shapes, Timed, TuneError,
    TuneOptions, TuneResult,
};

use crate::compiled::{CompileError, Compiled, Emit};
use crate::pipeline;
use crate::plan::CompilePlan;
use kir_backends::interp::{self, HostArg, HostTensor};
use kir_backends::Target;
use std::collections::BTreeMap;
use std::time::Instant;

/// Tunes `src` for `target` with the user's `defines` fixed, timing on `shapes`, with the
/// default [`TuneOptions`].
pub fn tune(
    src: &str,
    defines: &[(String, String)],
    target: Target,
    shapes: &Shapes,
    measure: &mut dyn Measure,
    progress: &mut dyn FnMut(&Event),
) -> Result<TuneResult, TuneError> {
    tune_with(
        src,
        defines,
        target,
        shapes,
        &TuneOptions::default(),
        measure,
        progress,
    )
}

/// [`tune`] with options: flags the user fixed, scalar params, the check's shapes, its seed
/// and the largest space searched.
pub fn tune_with(
    src: &str,
    defines: &[(String, String)],
    target: Target,
    shapes: &Shapes,
    opts: &TuneOptions,
    measure: &mut dyn Measure,
    progress: &mut dyn FnMut(&Event),
) -> Result<TuneResult, TuneError> {
    let start = Instant::now();
    if shapes.is_empty() {
        return Err(TuneError::Input(
            "no shapes to time on: give one --shape NAME=AxB… per input tensor".into(),
        ));
    }
    let Prepared {
        axes,
        candidates,
        check_shapes,
        scalars,
        reference,
    } = prepare(src, defines, target, shapes, opts)?;
    let args = check::random_args(&reference, &check_shapes, &scalars, opts.seed);
    let want = interp::run(&reference, &args).map_err(|e| TuneError::Reference(e.to_string()))?;

    let mut result = TuneResult {
        axes,
        space: candidates.len(),
        dropped: Vec::new(),
        timed: Vec::new(),
        check_shapes,
    };
    let mut seen: Vec<(String, String)> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let mut all = defines.to_vec();
        all.extend(c.defines());
        let compiled = CompilePlan::resolve(src, &all, target, Emit::Ptx, c.flags.clone())
            .and_then(|plan| pipeline::compile(src, &plan));
        let outcome = match compiled {
            Err(e) => Err(Dropped::Rejected(first_line(&e.to_string()))),
            Ok(compiled) => {
                let key = code_key(&compiled);
                match seen.iter().find(|(k, _)| *k == key) {
                    Some((_, earlier)) => Err(Dropped::Duplicate(earlier.clone())),
                    None => {
                        seen.push((key, c.label()));
                        check_and_time(c, &compiled, &args, &want, shapes, &scalars, measure)
                    }
                }
            }
        };
        match outcome {
            Ok(ms) => result.timed.push(Timed {
                candidate: c.clone(),
                median_ms: ms,
            }),
            Err(d) => {
                if let Dropped::Wrong(why) | Dropped::Failed(why) = &d {
                    progress(&Event::Dropped {
                        label: c.label(),
                        why: why.clone(),
                    });
                }
                result.dropped.push((c.clone(), d));
            }
        }
        let best = result
            .timed
            .iter()
            .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
            .map(|t| (t.candidate.label(), t.median_ms));
        progress(&Event::Progress(Progress {
            done: i + 1,
            total: candidates.len(),
            best,
            elapsed: start.elapsed(),
        }));
    }
    // A stable sort: equal times keep enumeration order.
    result
        .timed
        .sort_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
    if result.timed.is_empty() {
        let (rejected, duplicate, wrong, failed) = result.counts();
        let first = result
            .dropped
            .iter()
            .find_map(|(c, d)| match d {
                Dropped::Rejected(why) => {
                    Some(format!("; the first rejection ({}): {why}", c.label()))
                }
                Dropped::Duplicate(_) | Dropped::Wrong(_) | Dropped::Failed(_) => None,
            })
            .unwrap_or_default();
        return Err(TuneError::NoneLeft(format!(
            "{rejected} rejected by the compiler, {duplicate} duplicates, {wrong} wrong, \
             {failed} failed to run{first}"
        )));
    }
    Ok(result)
}

/// Everything but the measurements: the flags validated, the front end run, the space
/// enumerated, the shapes and scalars checked against the entry and the check's shapes chosen
/// (no shapes at all is accepted here, and gives no check shapes). `kirc tune --list` prints
/// this without a GPU.
pub fn prepare(
    src: &str,
    defines: &[(String, String)],
    target: Target,
    shapes: &Shapes,
    opts: &TuneOptions,
) -> Result<Prepared, TuneError> {
    opts.flags
        .validate(target, Emit::Ptx)
        .map_err(TuneError::Space)?;
    let f = pipeline::run_observed(src, defines, &mut |_, _| {})
        .map_err(|d| TuneError::Source(CompileError::Source(d)))?;
    let (axes, candidates) =
        space::enumerate(&f.generic, defines, target, &opts.flags, opts.limit)?;
    // Without shapes (`kirc tune --list` may omit them) there is nothing to check them for.
    if !shapes.is_empty() {
        check::check_shapes_fit(&f.output, shapes, "--shape")?;
    }
    let check_shapes = if opts.check_shapes.is_empty() {
        check::small_shapes(&f.output, shapes)
    } else {
        check::check_shapes_fit(&f.output, &opts.check_shapes, "--check-shape")?;
        opts.check_shapes.clone()
    };
    let scalars = check::scalars(&f.output, &opts.scalars)?;
    Ok(Prepared {
        axes,
        candidates,
        check_shapes,
        scalars,
        reference: f.output,
    })
}

/// Checks one compiled candidate against the interpreter's results, then times it.
fn check_and_time(
    c: &Candidate,
    compiled: &Compiled,
    args: &BTreeMap<String, HostArg>,
    want: &BTreeMap<String, HostTensor>,
    shapes: &Shapes,
    scalars: &BTreeMap<String, HostArg>,
    measure: &mut dyn Measure,
) -> Result<f64, Dropped> {
    let got = measure
        .run(c, compiled, args)
        .map_err(|e| Dropped::Failed(format!("the check run failed: {e}")))?;
    check::compare(&got, want).map_err(Dropped::Wrong)?;
    let ms = measure
        .time(c, compiled, shapes, scalars)
        .map_err(|e| Dropped::Failed(format!("timing failed: {e}")))?;
    if ms.is_finite() && ms >= 0.0 {
        Ok(ms)
    } else {
        Err(Dropped::Failed(format!("timing gave {ms} ms")))
    }
}

/// The code of a compilation, with every kernel symbol replaced by its index: candidates with
/// equal keys run the same code with the same launches.
fn code_key(c: &Compiled) -> String {
    let meta = c.meta.as_ref().map(|m| m.to_string()).unwrap_or_default();
    let mut key = format!("{}\n{meta}", c.text);
    let symbols: Vec<String> = c
        .meta
        .as_ref()
        .and_then(|m| m.get("kernels"))
        .and_then(|k| k.as_array())
        .map(|ks| {
            ks.iter()
                .filter_map(|k| k.get("symbol").and_then(|s| s.as_str()).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    // Longest first, so a symbol that prefixes another is not replaced inside it.
    let mut order: Vec<(usize, &String)> = symbols.iter().enumerate().collect();
    order.sort_by_key(|(_, s)| std::cmp::Reverse(s.len()));
    for (i, s) in order {
        if !s.is_empty() {
            key = key.replace(s.as_str(), &format!("@kernel{i}@"));
        }
    }
    key
}

/// The first line of an error message.
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}
