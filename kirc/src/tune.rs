//! `kirc tune OP|FILE [-D NAME=VALUE]... --shape NAME=AxB... [--arg NAME=NUMBER]... [--target
//! T] [--warmup N] [--iters N] [--flops EXPR] [--check-shape NAME=AxB]... [--limit N] [--list]`:
//! searches the module's tunable constants (`tune {…}` sets) and the target's lowering flags
//! for the fastest candidate on the GPU (docs/tuning.md; the library side is
//! `kir_compiler::internal::tune`).
//!
//! Every candidate is compiled for the target (the compiler's rejections are counted), checked
//! once against the interpreter on small ragged inputs (a wrong one is dropped with a warning
//! on stderr), and timed with CUDA events (median after warm-up). A progress line on stderr
//! follows every candidate; stdout gets the table, the winner as `kirc` flags and as a
//! configuration value. `--list` prints the space and the check's shapes without a GPU.
//! Timing needs the CUDA runtime (feature `cuda`) and a driver; without either the command
//! fails with exit code 2 saying what is needed.

#[cfg(feature = "cuda")]
use crate::bench::eval_expr;
use crate::bench::parse_shape;
use crate::common::{self, CliError};
use kir_compiler::internal::tune::{self, Event, TuneError, TuneOptions};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::process::ExitCode;

/// Arguments of `kirc tune`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Fix a specialization constant (repeatable): a tunable one is then not searched.
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// The shape of an input tensor for timing (repeatable; one per input).
    #[arg(long = "shape", value_name = "NAME=AxBxC", value_parser = parse_shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// A scalar param's value (default 0.5 for floats, 1 for integers).
    #[arg(long = "arg", value_name = "NAME=NUMBER", value_parser = parse_scalar)]
    args: Vec<(String, f64)>,
    /// The shape of an input tensor in the interpreter check (default: the --shape dims, each
    /// above 160 shrunk to 160 + dim % 32).
    #[arg(long = "check-shape", value_name = "NAME=AxBxC", value_parser = parse_shape)]
    check_shapes: Vec<(String, Vec<usize>)>,
    /// The PTX target (sm_80, sm_90a, sm_100a, sm_120a); default: the GPU's.
    #[arg(long, value_name = "TARGET")]
    target: Option<String>,
    /// Untimed runs before timing each candidate.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Timed runs per candidate (the median is reported).
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// FLOPs of one run, as an expression over dims and constants (adds TFLOP/s to the table).
    #[arg(long, value_name = "EXPR")]
    flops: Option<String>,
    /// Seed of the random inputs (the check's and the timed ones).
    #[arg(long, default_value_t = 0)]
    seed: u32,
    /// The largest search space tuned.
    #[arg(long, default_value_t = 4096)]
    limit: usize,
    /// Print the search space and the check's shapes, and exit (no GPU needed; needs --target).
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    ptx: common::PtxFlags,
    /// Do not keep the winner in the on-disk cache (docs/cache.md), where `kirc bench` of the
    /// same source, defines, target, shape bucket and GPU would use it.
    #[arg(long)]
    no_cache: bool,
}

/// Parses `NAME=NUMBER`.
fn parse_scalar(s: &str) -> Result<(String, f64), String> {
    let err = || format!("expected NAME=NUMBER (e.g. --arg eps=1e-5), found `{s}`");
    let (n, v) = s.split_once('=').ok_or_else(err)?;
    if !common::is_name(n) {
        return Err(err());
    }
    let x: f64 = v.trim().parse().map_err(|_| err())?;
    if !x.is_finite() {
        return Err(err());
    }
    Ok((n.to_string(), x))
}

/// The tuner's options from the arguments.
fn options(a: &Args) -> TuneOptions {
    TuneOptions {
        flags: a.ptx.flags(None),
        scalars: a.args.clone(),
        check_shapes: a.check_shapes.clone(),
        seed: u64::from(a.seed),
        limit: a.limit,
    }
}

/// A tuning error as a `kirc` error (source errors located in the source).
fn tune_error(src: &common::Source, e: TuneError) -> CliError {
    match e {
        TuneError::Source(e) => common::compile_error(src, e),
        e @ (TuneError::Space(_)
        | TuneError::Input(_)
        | TuneError::Reference(_)
        | TuneError::NoneLeft(_)) => CliError::Plain(e.to_string()),
    }
}

/// `--list`: the axes, the candidates and the check's shapes.
fn list(a: &Args, src: &common::Source) -> Result<ExitCode, CliError> {
    let Some(t) = &a.target else {
        return Err(CliError::Plain(
            "--list needs --target (without a GPU there is no default target)".into(),
        ));
    };
    let target = common::target(t)?;
    let p = tune::prepare(&src.text, &a.defines, target, &a.shapes, &options(a))
        .map_err(|e| tune_error(src, e))?;
    let mut s = String::new();
    let axes: Vec<String> = p
        .axes
        .iter()
        .map(|(n, v)| format!("{n} {{{}}}", v.join(", ")))
        .collect();
    let _ = writeln!(
        s,
        "{}: {} candidates on {} ({})",
        src.name,
        p.candidates.len(),
        target.name(),
        axes.join(" × ")
    );
    for (n, v) in &p.check_shapes {
        let d: Vec<String> = v.iter().map(usize::to_string).collect();
        let _ = writeln!(s, "check shape: {n}={}", d.join("x"));
    }
    for c in &p.candidates {
        let _ = writeln!(s, "{}", c.label());
    }
    common::out(&s)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
/// The names `--flops` may use: the dims bound by the shapes and the integer constants at the
/// user's `-D`s and the defaults.
fn flop_names(
    src: &common::Source,
    a: &Args,
    reference: &kir_ir::Module,
) -> Result<BTreeMap<String, f64>, CliError> {
    let mut names = BTreeMap::new();
    let f = common::frontend(src, &a.defines)?;
    let consts = kir_compiler::internal::passes::const_values(&f.generic, &a.defines)
        .map_err(|d| CliError::located(src, d))?;
    for (n, v) in consts {
        if let kir_ir::EvalVal::Int(i) = v {
            names.insert(n, i as f64);
        }
    }
    for p in reference.entry_params().unwrap_or(&[]) {
        let (kir_ir::ParamKind::Tensor(_, tt), Some((_, shape))) =
            (&p.kind, a.shapes.iter().find(|(n, _)| *n == p.name))
        else {
            continue;
        };
        for (e, &v) in tt.dims.iter().zip(shape) {
            if let kir_ir::ExprKind::Ident(d) = &e.kind {
                names.entry(d.clone()).or_insert(v as f64);
            }
        }
    }
    Ok(names)
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
/// Writes one event to stderr: the progress line (rewritten in place on a terminal), or a
/// dropped candidate's warning on a line of its own.
fn show(e: &Event, tty: bool) {
    match e {
        Event::Progress(p) => {
            let line = tune::report::progress_line(p);
            if tty {
                common::note(&format!("\r\x1b[2K{line}"));
            } else {
                common::note(&format!("{line}\n"));
            }
        }
        Event::Dropped { label, why } => {
            let lead = if tty { "\r\x1b[2K" } else { "" };
            common::note(&format!(
                "{lead}warning: WRONG OR FAILING CANDIDATE DROPPED: {label}: {why}\n"
            ));
        }
    }
}

/// Runs `kirc tune`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    if a.list {
        return list(&a, &src);
    }
    if a.shapes.is_empty() {
        return Err(CliError::Plain(
            "kirc tune needs the timed shapes: one --shape NAME=AxB… per input tensor".into(),
        ));
    }
    if a.iters == 0 {
        return Err(CliError::Plain("--iters must be at least 1".into()));
    }
    // Everything that needs no GPU is checked first.
    let pre_target = match &a.target {
        Some(t) => Some(common::target(t)?),
        None => None,
    };
    if let Some(t) = pre_target {
        tune::prepare(&src.text, &a.defines, t, &a.shapes, &options(&a))
            .map_err(|e| tune_error(&src, e))?;
    }
    gpu_main(&a, &src)
}

/// The GPU side: open the device, tune with [`crate::device::GpuMeasure`], print the table.
#[cfg(feature = "cuda")]
fn gpu_main(a: &Args, src: &common::Source) -> Result<ExitCode, CliError> {
    use std::io::IsTerminal;
    let gpu = crate::device::open_gpu(src)?;
    let target = crate::device::target_of(a.target.as_deref(), &gpu)?;
    let opts = options(a);
    let mut measure = crate::device::GpuMeasure {
        gpu: &gpu,
        warmup: a.warmup,
        iters: a.iters,
        seed: a.seed,
    };
    let tty = std::io::stderr().is_terminal();
    let r = tune::tune_with(
        &src.text,
        &a.defines,
        target,
        &a.shapes,
        &opts,
        &mut measure,
        &mut |e| show(e, tty),
    );
    if tty {
        common::note("\n");
    }
    let r = r.map_err(|e| tune_error(src, e))?;
    let flops = match &a.flops {
        Some(e) => {
            let p = tune::prepare(&src.text, &a.defines, target, &a.shapes, &opts)
                .map_err(|e| tune_error(src, e))?;
            let names = flop_names(src, a, &p.reference)?;
            Some(eval_expr(e, &names).map_err(|m| CliError::Plain(format!("--flops `{e}`: {m}")))?)
        }
        None => None,
    };
    let mut text = format!("{} on {} ({})\n", src.name, gpu.name, target.name());
    text += &tune::report::table(&r, flops);
    // The winner is kept for this source, specialization, target, shape bucket and GPU, where
    // `kirc bench` finds it (docs/tuning.md, "The winner").
    if let Some(cache) = common::cache(a.no_cache) {
        let w = &r.winner().candidate;
        // Kept for the specialization (the defines of untunable constants); the tunable
        // constants the user fixed belong to the configuration, with the winner's.
        let (spec, mut fixed) = crate::device::split_tunable(&src.text, &a.defines);
        fixed.extend(w.defines());
        let config = kir_compiler::internal::cache::TunedConfig {
            defines: fixed,
            warps: w.flags.warps,
            stages: w.flags.stages,
            warp_specialize: w.flags.warp_specialize,
            persistent: w.flags.persistent,
            overlap: w.flags.overlap,
            swap_operands: w.flags.swap_operands,
            cluster: w.flags.cluster,
            stream_k: w.flags.stream_k,
        };
        let bucket = crate::device::shape_bucket(&a.shapes);
        let id = crate::device::gpu_id(&gpu);
        match cache.store_tuned(
            &src.text,
            &src.name,
            &spec,
            target,
            &bucket,
            Some(&id),
            &config,
        ) {
            Ok(key) => text += &format!("winner stored in the kir cache ({key})\n"),
            Err(why) => text += &format!("winner not stored in the kir cache: {why}\n"),
        }
    }
    common::out(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `kirc tune` in a kirc built without the runtime: an error saying how to build it.
#[cfg(not(feature = "cuda"))]
fn gpu_main(a: &Args, src: &common::Source) -> Result<ExitCode, CliError> {
    let _ = (a, src);
    Err(crate::device::not_built(
        "kirc tune (timing candidates on a GPU; `--list --target T` shows the space without one)",
    ))
}
