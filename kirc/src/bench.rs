//! `kirc bench FILE [--kernel NAME] [-D NAME=VALUE]... --shape NAME=AxBxC ... [--arg
//! NAME=NUMBER|PATH.npy]... [--warmup N] [--iters N] [--flops EXPR | --bytes EXPR] [--target T]
//! [--ws PLAN] [--no-cache]`: times a module's entry on the GPU (feature `cuda`), compiled and
//! loaded through the on-disk cache of docs/cache.md unless `--no-cache` is given.
//!
//! Tensors named by `--shape` get random values generated on the device (floats uniform in
//! [-1, 1), u8 any byte, i32/i64/i1 0 or 1); the others come from `--arg` `.npy` files, as for
//! `kirc run`; scalars come from `--arg NAME=NUMBER`. Outs and temps are poisoned once. After
//! `--warmup` untimed runs, each of `--iters` runs of the whole program is timed between two
//! CUDA events; the median is reported, with the minimum and maximum.
//!
//! Throughput: `--flops EXPR` (TFLOP/s) or `--bytes EXPR` (TB/s), where EXPR is arithmetic
//! (`+ - * /`, parentheses, numbers) over the entry's dims and the module's integer constants,
//! e.g. `--flops '2*Bt*M*N*K'`. Without either: attention_fwd counts 4·B·Hq·Sq·Sk·HEAD_DIM
//! FLOPs (halved when CAUSAL = 1), gemm 2·Bt·M·N·K (twice that with EPILOGUE = swiglu), and
//! every other module the bytes of its entry tensors, each read or written once (inout twice):
//! exactly the traffic of rmsnorm_fwd and layernorm_fwd.
//!
//! With `--message-format json` the report is one object, `{"type": "bench", ...}`, with the
//! same figures ([`Report::json`], docs/cli.md).

use crate::bench_report::Work;
#[cfg(feature = "cuda")]
use crate::bench_report::{FirstLaunch, Report};
use crate::common::{self, CliError};
use crate::message::MessageFormat;
#[cfg(feature = "cuda")]
use crate::run::host_args;
use crate::run::parse_arg;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Arguments of `kirc bench`.
#[derive(clap::Args)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Time this kernel of the module alone, as the entry (instead of the program).
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// A tensor param filled with random values on the device, with this shape (repeatable).
    #[arg(long = "shape", value_name = "NAME=AxBxC", value_parser = parse_shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// An entry argument: a number for a scalar param, a .npy file for a tensor param.
    #[arg(long = "arg", value_name = "NAME=NUMBER|PATH.npy", value_parser = parse_arg)]
    args: Vec<(String, String)>,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// FLOPs of one run, as an expression over dims and constants (reports TFLOP/s).
    #[arg(long, value_name = "EXPR", conflicts_with = "bytes")]
    flops: Option<String>,
    /// Bytes moved by one run, as an expression over dims and constants (reports TB/s).
    #[arg(long, value_name = "EXPR")]
    bytes: Option<String>,
    /// The PTX target (sm_80, sm_90a, sm_100a, sm_120a); default: the GPU's.
    #[arg(long, value_name = "TARGET")]
    target: Option<String>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u32,
    #[command(flatten)]
    ptx: common::PtxFlags,
    /// Warp-specialize with this plan (auto, fa3, gemm, 2p6c; docs/passes.md) instead of the
    /// configuration's warp roles, as `kirc compile --ws` does.
    #[arg(long, value_name = "PLAN")]
    ws: Option<String>,
    /// Compile and load without the on-disk cache (docs/cache.md).
    #[arg(long)]
    no_cache: bool,
}

/// Parses `NAME=AxBxC` (dims separated by `x` or `,`).
pub fn parse_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let err = || format!("expected NAME=AxBxC (e.g. --shape q=4x16x4096x128), found `{s}`");
    let (n, v) = s.split_once('=').ok_or_else(err)?;
    if !common::is_name(n) {
        return Err(err());
    }
    let dims = v
        .split(['x', ','])
        .map(|d| d.trim().parse::<usize>().map_err(|_| err()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((n.to_string(), dims))
}

/// Evaluates `+ - * /` arithmetic with parentheses over `names`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub fn eval_expr(src: &str, names: &BTreeMap<String, f64>) -> Result<f64, String> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
        names: &'a BTreeMap<String, f64>,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
                self.i += 1;
            }
        }
        fn sum(&mut self) -> Result<f64, String> {
            let mut v = self.prod()?;
            loop {
                self.ws();
                match self.s.get(self.i) {
                    Some(b'+') => (self.i += 1, v += self.prod()?).0,
                    Some(b'-') => (self.i += 1, v -= self.prod()?).0,
                    _ => return Ok(v),
                }
            }
        }
        fn prod(&mut self) -> Result<f64, String> {
            let mut v = self.atom()?;
            loop {
                self.ws();
                match self.s.get(self.i) {
                    Some(b'*') => (self.i += 1, v *= self.atom()?).0,
                    Some(b'/') => (self.i += 1, v /= self.atom()?).0,
                    _ => return Ok(v),
                }
            }
        }
        fn atom(&mut self) -> Result<f64, String> {
            self.ws();
            let start = self.i;
            match self.s.get(self.i) {
                Some(b'(') => {
                    self.i += 1;
                    let v = self.sum()?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b')') {
                        return Err(format!("expected `)` at column {}", self.i + 1));
                    }
                    self.i += 1;
                    Ok(v)
                }
                Some(b'-') => {
                    self.i += 1;
                    Ok(-self.atom()?)
                }
                Some(c) if c.is_ascii_digit() || *c == b'.' => {
                    while self.s.get(self.i).is_some_and(|c| {
                        c.is_ascii_alphanumeric()
                            || *c == b'.'
                            || (matches!(c, b'+' | b'-')
                                && matches!(self.s[self.i - 1], b'e' | b'E'))
                    }) {
                        self.i += 1;
                    }
                    let t = String::from_utf8_lossy(&self.s[start..self.i]);
                    t.parse().map_err(|_| format!("bad number `{t}`"))
                }
                Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                    while self
                        .s
                        .get(self.i)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                    {
                        self.i += 1;
                    }
                    let t = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                    self.names.get(&t).copied().ok_or_else(|| {
                        let known: Vec<&str> = self.names.keys().map(String::as_str).collect();
                        format!("unknown name `{t}` (known: {})", known.join(", "))
                    })
                }
                _ => Err(format!(
                    "expected a number, a name or `(` at column {}",
                    self.i + 1
                )),
            }
        }
    }
    let mut p = P {
        s: src.as_bytes(),
        i: 0,
        names,
    };
    let v = p.sum()?;
    p.ws();
    if p.i != src.len() {
        return Err(format!(
            "unexpected `{}` at column {}",
            &src[p.i..],
            p.i + 1
        ));
    }
    Ok(v)
}

/// The work of one run: from `--flops`/`--bytes`, or the built-in formula for the module.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn work(
    a: &Args,
    module: &str,
    names: &BTreeMap<String, f64>,
    io_bytes: u64,
) -> Result<Work, CliError> {
    let ev = |e: &str, what: &str| {
        eval_expr(e, names).map_err(|m| CliError::Plain(format!("--{what} `{e}`: {m}")))
    };
    if let Some(e) = &a.flops {
        return Ok(Work::Flops(ev(e, "flops")?, e.clone()));
    }
    if let Some(e) = &a.bytes {
        return Ok(Work::Bytes(ev(e, "bytes")?, e.clone()));
    }
    let formula = match (module, a.kernel.as_deref()) {
        ("attention_fwd", None | Some("attention_fwd")) => {
            Some("4*B*Hq*Sq*Sk*HEAD_DIM / (1 + CAUSAL)")
        }
        ("gemm", None | Some("gemm")) => Some("2*Bt*M*N*K * (1 + SWIGLU)"),
        _ => None,
    };
    Ok(match formula {
        Some(f) => Work::Flops(ev(f, "flops")?, f.to_string()),
        None => Work::Bytes(
            io_bytes as f64,
            "the entry tensors, each read or written once".into(),
        ),
    })
}

/// Runs `kirc bench`.
#[cfg(feature = "cuda")]
pub fn main(a: Args, format: MessageFormat) -> Result<ExitCode, CliError> {
    use crate::device;
    use kir_backends::interp::{HostArg, HostTensor};
    use kir_backends::runtime;
    use kir_ir::{EvalVal, ParamKind};
    use std::collections::BTreeSet;

    let src = common::load(&a.file)?;
    let f = common::frontend(&src, &a.defines)?;
    let consts = kir_compiler::internal::passes::const_values(&f.generic, &a.defines)
        .map_err(|d| CliError::located(&src, d))?;
    let m = kir_compiler::internal::pipeline::entry_module(f.output, a.kernel.as_deref())
        .map_err(CliError::Plain)?;
    let mut args = host_args(&src, &m, &a.args)?;
    let mut random = BTreeSet::new();
    let params = m.entry_params().unwrap_or(&[]);
    for (name, shape) in &a.shapes {
        let dtype = match params.iter().find(|p| &p.name == name).map(|p| &p.kind) {
            Some(ParamKind::Tensor(_, tt)) => tt.elem.known().unwrap_or(kir_ir::Dtype::F32),
            _ => {
                return Err(CliError::Plain(format!(
                    "--shape {name}: the entry has no tensor param `{name}`"
                )))
            }
        };
        if args.contains_key(name) || !random.insert(name.clone()) {
            return Err(CliError::Plain(format!(
                "`{name}` is given twice (--shape and --arg)"
            )));
        }
        let t = HostTensor {
            dtype,
            shape: shape.clone(),
            data: kir_backends::interp::HostData::F64(Vec::new()),
        };
        args.insert(name.clone(), HostArg::Tensor(t));
    }
    let gpu = device::open_gpu(&src)?;
    let cache = common::cache(a.no_cache);
    let t0 = std::time::Instant::now();
    // A configuration `kirc tune` found for this source, specialization (the defines of
    // untunable constants), target, shape bucket and GPU applies unless the user chose lowering
    // flags or tunable constants themselves.
    let mut defines = a.defines.clone();
    let mut flags = kir_compiler::internal::plan::Flags {
        ws_ptx: common::ws_ptx(a.ws.as_deref())?,
        ..a.ptx.flags(None)
    };
    let mut tuned = Vec::new();
    let (spec, user_tiles) = device::split_tunable(&src.text, &a.defines);
    let chosen = a.ptx.any() || a.ws.is_some();
    if let (Some(c), false, true) = (&cache, chosen, user_tiles.is_empty()) {
        let target = device::target_of(a.target.as_deref(), &gpu)?;
        let bucket = device::shape_bucket(&a.shapes);
        if let Some(t) = c.lookup_tuned(
            &src.text,
            &spec,
            target,
            &bucket,
            Some(&device::gpu_id(&gpu)),
        ) {
            tuned = t.defines.clone();
            defines.extend(t.defines.iter().cloned());
            let fusion = flags.fusion;
            flags = t.flags();
            flags.fusion = fusion;
        }
    }
    let c = device::compile_for(
        &src,
        &defines,
        a.kernel.as_deref(),
        a.target.as_deref(),
        flags,
        &gpu,
        cache.as_ref(),
        &device::tensor_shapes(&args),
    )?;
    let t1 = std::time::Instant::now();
    let rt = |e| device::runtime_error(&c.src, e);
    let (mut p, image) = device::load(&gpu, &c, cache.as_ref())?;
    let t2 = std::time::Instant::now();
    let mut b = p.bind(&args, &random, a.seed).map_err(rt)?;
    let t3 = std::time::Instant::now();
    p.launch(&mut b).map_err(rt)?;
    p.synchronize().map_err(rt)?;
    let t4 = std::time::Instant::now();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let first = FirstLaunch {
        total_ms: ms(t4 - t0),
        compile_ms: ms(t1 - t0),
        cache: match (c.hit, cache.is_some()) {
            (true, _) => "hit",
            (false, true) => "compiled",
            (false, false) => "off",
        },
        load_ms: ms(t2 - t1),
        image,
        bind_ms: ms(t3 - t2),
        run_ms: ms(t4 - t3),
    };
    let t = runtime::bench(&p, &mut b, a.warmup, a.iters).map_err(rt)?;
    let mut names: BTreeMap<String, f64> =
        b.dims.iter().map(|(k, &v)| (k.clone(), v as f64)).collect();
    for (n, v) in &consts {
        let x = match v {
            EvalVal::Int(i) => *i as f64,
            EvalVal::Bool(b) => *b as i32 as f64,
            EvalVal::Float(x) => *x,
            EvalVal::Sym(_) => continue,
        };
        names.insert(n.clone(), x);
    }
    let swiglu = consts
        .iter()
        .any(|(n, v)| n == "EPILOGUE" && v.to_string() == "swiglu");
    names.insert("SWIGLU".into(), swiglu as i32 as f64);
    let report = Report {
        module: src.name.clone(),
        dims: b.dims.clone(),
        gpu: gpu.name.clone(),
        median_ms: t.median_ms,
        min_ms: t.min_ms,
        max_ms: t.max_ms,
        iters: t.iters,
        warmup: a.warmup,
        work: work(&a, &m.name, &names, b.io_bytes())?,
        first,
        tuned,
    };
    crate::common::out(&match format {
        MessageFormat::Human => report.human(),
        MessageFormat::Json => crate::message::line(&report.json()),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `kirc bench` in a kirc built without the runtime: an error saying how to build it.
#[cfg(not(feature = "cuda"))]
pub fn main(_a: Args, _format: MessageFormat) -> Result<ExitCode, CliError> {
    Err(crate::device::not_built("kirc bench"))
}

#[cfg(test)]
mod tests {
    use super::eval_expr;
    use std::collections::BTreeMap;

    #[test]
    fn expressions_follow_precedence_and_names() {
        let names: BTreeMap<String, f64> = [("M".to_string(), 3.0), ("N_2".to_string(), 5.0)]
            .into_iter()
            .collect();
        assert_eq!(eval_expr("2*M*N_2", &names), Ok(30.0));
        assert_eq!(eval_expr("1 + 2 * 3", &names), Ok(7.0));
        assert_eq!(eval_expr("(1 + 2) * 3 / 2", &names), Ok(4.5));
        assert_eq!(eval_expr("-M + 1e3", &names), Ok(997.0));
        assert_eq!(eval_expr("4*M / (1 + 1)", &names), Ok(6.0));
        assert!(eval_expr("2*Q", &names)
            .unwrap_err()
            .contains("unknown name `Q`"));
        assert!(eval_expr("2*(M", &names).is_err());
        assert!(eval_expr("2 M", &names).is_err());
    }
}
