//! What the subcommands share: loading a module's source (a path or a built-in op name),
//! `-D NAME=VALUE` parsing, the front end, the on-disk cache of `--no-cache` commands, rendering
//! errors, and writing to stdout and stderr (a closed stdout ends the command quietly, as
//! [`CliError::BrokenPipe`]).

use kir_compiler::internal::pass::PassManager;
use kir_compiler::internal::pipeline;
use kir_ir::Diagnostics;
use std::io::Write;
use std::path::Path;

/// A module's source text and the name errors show for it (shared with the library, so a
/// framework's errors read as kirc's).
pub use kir_compiler::internal::source::Source;

/// Why a command stopped. `kirc` prints a user error and exits with code 2; a broken pipe
/// ends it quietly with [`BROKEN_PIPE_EXIT`].
pub enum CliError {
    /// An error with no place in a source file.
    Plain(String),
    /// Errors located in a source file.
    Located {
        file: String,
        src: String,
        diags: Diagnostics,
    },
    /// Standard output was closed by its reader (`kirc compile … -o - | head`): nothing more is
    /// written, no output file is left, and the exit code is [`BROKEN_PIPE_EXIT`].
    BrokenPipe,
}

/// The exit code after a broken pipe: 141 (128 + SIGPIPE), what a shell reports for a Unix tool
/// that SIGPIPE ended.
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Writes `text` to standard output and flushes it. A closed pipe is [`CliError::BrokenPipe`];
/// a standard output that was already closed when kirc started (`kirc … >&-`) and any other
/// failure (a full disk) are errors naming standard output.
pub fn out(text: &str) -> Result<(), CliError> {
    if closed_at_start(1) {
        return Err(CliError::Plain(CLOSED_STDOUT.into()));
    }
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())
        .and_then(|_| o.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => CliError::BrokenPipe,
            _ => CliError::Plain(format!("cannot write to standard output: {e}")),
        })
}

/// The error for output to a standard output that was closed when kirc started.
const CLOSED_STDOUT: &str =
    "standard output is closed (`>&-`): nothing can be written there (give `-o FILE`, or redirect it to a file or `/dev/null`)";

/// True when standard stream `fd` (1 or 2) was closed when kirc started (`kirc … >&-`).
///
/// Rust's runtime opens `/dev/null` read-write on a standard stream that is closed at start
/// (so that no file kirc opens later takes its number), and writes there then succeed
/// silently. A shell's `> /dev/null` opens it write-only, so `/dev/null` open read-write on
/// stdout or stderr is the closed stream (`1<> /dev/null` looks the same and is taken as
/// closed too). Only Linux shows this through `/proc`; elsewhere nothing is detected.
fn closed_at_start(fd: u32) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let is_null = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|p| p == Path::new("/dev/null"));
    if !is_null {
        return false;
    }
    // `flags:` in /proc/self/fdinfo is octal; the access mode is its low two bits (2: O_RDWR).
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & 3 == 2)
}

/// Writes `text` to standard error; a closed or full stderr is ignored (there is nowhere left to
/// report it).
pub fn note(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Writes `what` (output the user asked for on standard error, e.g. `--report`) to standard
/// error: unlike [`note`], a failure (a full or closed stderr) is an error, so the command
/// fails instead of losing it silently.
pub fn err_out(text: &str, what: &str) -> Result<(), CliError> {
    if closed_at_start(2) {
        return Err(CliError::Plain(format!(
            "cannot write {what} to standard error: it is closed"
        )));
    }
    let mut e = std::io::stderr().lock();
    e.write_all(text.as_bytes())
        .and_then(|_| e.flush())
        .map_err(|err| CliError::Plain(format!("cannot write {what} to standard error: {err}")))
}

impl CliError {
    /// Errors located in `src`.
    pub fn located(src: &Source, diags: impl Into<Diagnostics>) -> CliError {
        CliError::Located {
            file: src.name.clone(),
            src: src.text.clone(),
            diags: diags.into(),
        }
    }

    /// The text printed to stderr: `file:line:col: error: ...`, the source line and a caret
    /// for each located error; `error: ...` for the others.
    pub fn render(&self) -> String {
        match self {
            CliError::BrokenPipe => String::new(),
            CliError::Plain(m) => format!("error: {m}\n"),
            CliError::Located { file, src, diags } => {
                kir_compiler::internal::source::render(file, src, diags)
            }
        }
    }
}

/// Reads `file` (at most [`kir_compiler::internal::limits::MAX_SOURCE_BYTES`]); if no such file exists,
/// takes the built-in op of that name.
pub fn load(file: &str) -> Result<Source, CliError> {
    Source::load(file).map_err(CliError::Plain)
}

/// Parses `NAME=VALUE` (the argument of `-D`).
pub fn parse_define(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) if is_name(n.trim()) && !v.trim().is_empty() => {
            Ok((n.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(format!(
            "expected NAME=VALUE (e.g. -D HEAD_DIM=64), found `{s}`"
        )),
    }
}

/// True for an identifier: a letter or `_`, then letters, digits and `_`.
pub fn is_name(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The warp-specialization choice of `--ws`: none, `auto` (the target's plans in order) or a
/// named plan.
pub fn ws_choice(ws: Option<&str>) -> Result<pipeline::WsChoice, CliError> {
    use kir_compiler::internal::passes::WsPlan;
    match ws {
        None => Ok(pipeline::WsChoice::Off),
        Some("auto") => Ok(pipeline::WsChoice::Auto),
        Some(name) => WsPlan::from_name(name)
            .map(pipeline::WsChoice::Plan)
            .ok_or_else(|| {
                let names: Vec<&str> = WsPlan::ALL.iter().map(|p| p.name).collect();
                CliError::Plain(format!(
                    "unknown --ws plan `{name}` (auto, {})",
                    names.join(", ")
                ))
            }),
    }
}

/// The plan `--ws` names for the PTX backend (`kirc compile`, `kirc run --device cuda`, `kirc
/// bench`): `None` without the flag, else the target's plans in order (`auto`) or one by name.
pub fn ws_ptx(ws: Option<&str>) -> Result<Option<pipeline::WsChoice>, CliError> {
    ws.map(|w| ws_choice(Some(w))).transpose()
}

/// A target by name, or an error listing the targets.
pub fn target(name: &str) -> Result<kir_backends::Target, CliError> {
    use kir_backends::Target;
    Target::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
        CliError::Plain(format!(
            "unknown target `{name}`{} (targets: {})",
            kir_compiler::internal::suggest::did_you_mean(name, names.iter().copied()),
            names.join(", ")
        ))
    })
}

/// Runs every pass of the pipeline with `defines` (verifying after each); what runs and compiles
/// is the result's `output`.
pub fn frontend(
    src: &Source,
    defines: &[(String, String)],
) -> Result<pipeline::Frontend, CliError> {
    frontend_with(src, defines, kir_compiler::internal::options::Fusion::Auto)
}

/// [`frontend`] with the `fusion` pass skipped when `fusion` is `Off` (`--no-fuse`).
pub fn frontend_with(
    src: &Source,
    defines: &[(String, String)],
    fusion: kir_compiler::internal::options::Fusion,
) -> Result<pipeline::Frontend, CliError> {
    let pm = match fusion {
        kir_compiler::internal::options::Fusion::Off => PassManager::standard().without("fusion"),
        _ => PassManager::standard(),
    };
    pm.run_frontend(&src.text, defines, &mut |_, _| {})
        .map_err(|d| CliError::located(src, d))
}

/// PTX lowering choices shared by `kirc compile`, `run` and `bench`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PtxFlags {
    /// Warps per block (1, 2, or a multiple of 4 up to 32) instead of the backend's choice; e.g. `--warps
    /// 4` for attention_fwd with BLOCK_M=128, BLOCK_N=64 at d128 (docs/backends.md)
    #[arg(long, value_name = "N")]
    pub warps: Option<u32>,
    /// Depth of the cp.async pipelining ring of loops (1 to 8; 1 = none) instead of 2
    #[arg(long, value_name = "N")]
    pub stages: Option<usize>,
    /// Warp specialization on sm_90a (`--warp-specialize`): `on` splits each pipelined loop into a producer warpgroup
    /// (tensor copies, 32 registers) and the block's warps as its consumer (the registers left,
    /// at most 240, `setmaxnreg`), or fails naming why the kernel does not qualify; `off` keeps
    /// one role. Default: the per-target configuration's choice (on for GEMM and for attention
    /// at head dim 128)
    #[arg(long = "warp-specialize", value_name = "on|off")]
    pub warp_specialize: Option<WsFlag>,
    /// Persistent grid: N programs (1 to 65535) walk every tile of each kernel with a loop
    /// (the `persistent` pass, docs/passes.md); `off` for one program per tile. Default: the
    /// per-target configuration's choice
    #[arg(long, value_name = "N|off", value_parser = persistent_flag)]
    pub persistent: Option<u32>,
    /// Intra-warpgroup overlap on sm_90a TMA rings (in the consumer with --warp-specialize on):
    /// `on` issues each ring loop's q·kᵀ of block j and p·v of block j − 1 as asynchronous
    /// wgmma groups, with block j's softmax under the p·v (the `dot_overlap` pass,
    /// docs/passes.md); `off` keeps the loop as it is. Default: the per-target configuration's
    /// choice
    #[arg(long, value_name = "on|off")]
    pub overlap: Option<WsFlag>,
    /// Each dot loop's accumulator computed transposed, so the operand with many rows is the
    /// matrix units' M (the `swap_operands` pass, docs/passes.md): `on` or `off`. Default: the
    /// per-target configuration's choice (on for GEMMs of at most 32 rows on sm_90a)
    #[arg(long = "swap-operands", value_name = "on|off")]
    pub swap_operands: Option<WsFlag>,
    /// Clusters of two programs that share their tensor copies (TMA multicast), for a
    /// warp-specialized kernel on a persistent grid (the `cluster` pass, docs/passes.md): `on`
    /// (an error naming each kernel and why where none qualifies) or `off`. Default: the
    /// per-target configuration's choice
    #[arg(long, value_name = "on|off")]
    pub cluster: Option<WsFlag>,
    /// A persistent grid's last tiles shared out by K iterations, so that the last wave keeps
    /// every program busy (the `stream_k` pass, docs/passes.md): `on` (where a kernel
    /// qualifies: one K loop of dot accumulators) or `off`. Default: the per-target
    /// configuration's choice
    #[arg(long = "stream-k", value_name = "on|off")]
    pub stream_k: Option<WsFlag>,
    /// Lower the `fusion` pass's fused program wherever the pass applies. Default: the fused
    /// program where the cost model estimates it faster on the target than the unfused kernels
    /// (both as they would be scheduled; `--report` shows the two estimates)
    #[arg(long, conflicts_with = "no_fuse")]
    pub fuse: bool,
    /// Skip the `fusion` pass: every kernel of the program runs as written
    #[arg(long)]
    pub no_fuse: bool,
}

/// Parses `--persistent`: a program count from 1 to 65535, or `off` (0).
fn persistent_flag(s: &str) -> Result<u32, String> {
    if s == "off" {
        return Ok(0);
    }
    match s.parse::<u32>() {
        Ok(n) if (1..=65535).contains(&n) => Ok(n),
        _ => Err(format!("`{s}`: a program count from 1 to 65535, or `off`")),
    }
}

/// The values of `--warp-specialize`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsFlag {
    On,
    Off,
}

impl PtxFlags {
    /// The compile plan's flags, with the interpreter plan of `--ws` (`kirc run --device cpu`)
    /// if any (`kirc compile`, `run --device cuda` and `bench` set `ws_ptx`, the PTX backend's
    /// plan, on the result).
    pub fn flags(
        &self,
        ws_plan: Option<pipeline::WsChoice>,
    ) -> kir_compiler::internal::plan::Flags {
        kir_compiler::internal::plan::Flags {
            warps: self.warps,
            stages: self.stages,
            warp_specialize: self.warp_specialize.map(|w| w == WsFlag::On),
            persistent: self.persistent,
            overlap: self.overlap.map(|w| w == WsFlag::On),
            swap_operands: self.swap_operands.map(|w| w == WsFlag::On),
            ws_plan,
            ws_ptx: None,
            fusion: self.fusion(),
            cluster: self.cluster.map(|w| w == WsFlag::On),
            stream_k: self.stream_k.map(|w| w == WsFlag::On),
        }
    }

    /// The fusion choice of `--fuse` / `--no-fuse`.
    pub fn fusion(&self) -> kir_compiler::internal::options::Fusion {
        use kir_compiler::internal::options::Fusion;
        match (self.fuse, self.no_fuse) {
            (true, _) => Fusion::On,
            (_, true) => Fusion::Off,
            _ => Fusion::Auto,
        }
    }

    /// Whether any lowering flag was given (`--fuse` and `--no-fuse` choose the program, not
    /// its lowering, and are not counted).
    pub fn any(&self) -> bool {
        self.warps.is_some()
            || self.stages.is_some()
            || self.warp_specialize.is_some()
            || self.persistent.is_some()
            || self.overlap.is_some()
            || self.swap_operands.is_some()
            || self.cluster.is_some()
            || self.stream_k.is_some()
    }
}

/// A compile error as `kirc` prints it (located in `src` when it has a place).
pub fn compile_error(src: &Source, e: kir_compiler::internal::compile::CompileError) -> CliError {
    match e {
        kir_compiler::internal::compile::CompileError::Source(d) => CliError::located(src, d),
        kir_compiler::internal::compile::CompileError::Plain(m) => CliError::Plain(m),
    }
}

/// The canonical IR right after `pass` in the compilation `plan` describes: the front end's
/// passes, and the scheduling passes of the candidate the backend lowered, so the dump is the IR
/// that `kirc compile` lowers. A pass that did not run for it is an error saying so.
pub fn dump_lowered(
    src: &Source,
    plan: &kir_compiler::internal::plan::CompilePlan,
    pass: &str,
) -> Result<String, CliError> {
    if !pipeline::PASSES.contains(&pass) {
        return Err(CliError::Plain(format!(
            "{} (and `layout` for kirc compile)",
            pipeline::DumpError::UnknownPass(pass.to_string(), pipeline::PASSES.join(", "))
        )));
    }
    let mut dump = None;
    pipeline::compile_observed(&src.text, plan, &mut |name, m| {
        if name == pass {
            dump = Some(kir_ir::text::print(m));
        }
    })
    .map_err(|e| compile_error(src, e))?;
    dump.ok_or_else(|| {
        CliError::Plain(format!(
            "pass `{pass}` does not run when compiling this module for {} with these flags (the \
             scheduled module the backend lowers did not need it); `kirc check --dump-after \
             {pass} --target {}` forces it",
            plan.target.name(),
            plan.target.name()
        ))
    })
}

/// The on-disk cache a command uses: the one the environment names (docs/cache.md), unless
/// `--no-cache` was given or it is off (`KIR_CACHE_DIR=off`).
pub fn cache(no_cache: bool) -> Option<kir_compiler::internal::cache::Cache> {
    if no_cache {
        return None;
    }
    kir_compiler::internal::cache::Cache::from_env()
}
