//! The compile plan: a user's flags, the per-target configuration row and the target, resolved
//! and validated once into one [`CompilePlan`], which every entry point hands to
//! [`crate::pipeline::compile`] (`kirc compile`, `run`, `bench`, `check`, `explain`, the dumps
//! and the library). Flags are checked here and nowhere else, so `compile`, `run` and `check`
//! accept and refuse the same things.
//!
//! The plan also owns the one constructor of [`ScheduleOptions`] ([`CompilePlan::schedule`] for
//! compilation, [`explore`] for `kirc check`'s forced dumps); the search over candidate
//! schedules that asks a backend which one fits lives in `crate::search`.

use crate::compiled::{CompileError, Emit, Stage};
use crate::configs::{self, Config};
pub use crate::flags::Flags;
use crate::options::{ScheduleOptions, WsChoice};
use crate::passes::{const_values, WsPlan};
use kir_backends::ptx::{PtxOptions, PIPELINE_STAGES};
use kir_backends::Target;

/// Which backend decides whether a candidate schedule fits: the code generator being targeted,
/// or the interpreter (for `--ws` plans, which no code generator is asked to lower).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judge {
    /// The PTX backend (also for `kirc run --target` on the CPU: the module that runs is the
    /// one PTX would lower).
    Ptx,
    /// The CUDA-C backend (unscheduled modules only).
    CudaC,
    /// The interpreter, which accepts every module.
    Interp,
}

/// Everything a compilation needs, resolved once: build it with [`CompilePlan::resolve`].
#[derive(Clone, Debug, PartialEq)]
pub struct CompilePlan {
    /// The target.
    pub target: Target,
    /// What to produce.
    pub emit: Emit,
    /// Only this kernel of the module, as the entry.
    pub kernel: Option<String>,
    /// Which module of the front end is lowered.
    pub stage: Stage,
    /// The user's `-D` overrides followed by the configuration row's tile constants.
    pub defines: Vec<(String, String)>,
    /// The user's flags (validated).
    pub flags: Flags,
    /// The per-target configuration row that applied (empty when none did).
    pub config: Config,
    /// A module whose kernels make no class together: each kernel's own configuration, by
    /// kernel name (their tile constants are in [`CompilePlan::defines`]; their warps, rings
    /// and warp roles apply to that kernel only). Empty otherwise.
    pub kernel_configs: Vec<(String, Config)>,
    /// The problem's runtime dims the configuration was chosen for (`M=16`), read from the
    /// shapes of the entry's tensors when the caller knows them; empty otherwise.
    pub dims: Vec<(String, u64)>,
    /// Which backend judges candidate schedules.
    pub judge: Judge,
    /// The tile constants [`CompilePlan::shrunk`] halved so far (their values are the plan's,
    /// not the user's: they may halve again).
    pub shrunk: Vec<String>,
}

impl CompilePlan {
    /// Resolves and validates a compilation of `src`: the flags are checked, and the per-target
    /// configuration ([`crate::configs`]) of a built-in op applies when the user set none of its
    /// tile constants, `--warps` or `--stages` (the rows of PTX and IR emission, or CUDA C's own
    /// rows, which only choose tiles that fit the target's shared memory). A source that does not parse or specialize gets no row (the pipeline reports
    /// its errors).
    pub fn resolve(
        src: &str,
        defines: &[(String, String)],
        target: Target,
        emit: Emit,
        flags: Flags,
    ) -> Result<CompilePlan, CompileError> {
        CompilePlan::resolve_for(src, defines, target, emit, flags, &[])
    }

    /// [`CompilePlan::resolve`] for a problem whose entry tensors have the given `shapes`
    /// (`(param, extents)`): the runtime dims they bind (a param declared `[Bt, M, K]` with
    /// extents `[1, 16, 4096]` gives `M = 16`) are features the configuration rows may read
    /// (a GEMM with few rows takes smaller tiles). A shape that names no tensor param, or whose
    /// rank differs, binds nothing.
    pub fn resolve_for(
        src: &str,
        defines: &[(String, String)],
        target: Target,
        emit: Emit,
        flags: Flags,
        shapes: &[(String, Vec<usize>)],
    ) -> Result<CompilePlan, CompileError> {
        flags.validate(target, emit).map_err(CompileError::Plain)?;
        let dims = bound_dims(src, defines, shapes);
        // A named warp-specialization plan replaces the rows' warp roles (and their tiles).
        let (config, kernel_configs) = if flags.ws_plan.is_some() || flags.ws_ptx.is_some() {
            (Config::default(), vec![])
        } else {
            target_config(src, defines, target, emit == Emit::Cuda, &flags, &dims)
        };
        let mut all = defines.to_vec();
        all.extend(config.defines.iter().cloned());
        for (_, c) in &kernel_configs {
            for d in &c.defines {
                if !all.iter().any(|(n, _)| *n == d.0) {
                    all.push(d.clone());
                }
            }
        }
        let judge = match (emit, &flags.ws_plan) {
            (Emit::Cuda, _) => Judge::CudaC,
            (_, Some(_)) => Judge::Interp,
            _ => Judge::Ptx,
        };
        Ok(CompilePlan {
            target,
            emit,
            kernel: None,
            stage: Stage::Output,
            defines: all,
            flags,
            config,
            kernel_configs,
            dims,
            judge,
            shrunk: vec![],
        })
    }

    /// The plan with one default tile constant halved, for a kernel that does not fit its
    /// target's shared memory at any ring depth: among the constants that play a tile role
    /// (query, key, dK/dV, M/N/K, row and column blocks; compiler/src/structure/) and that the
    /// user did not set, the largest, halved while it stays at 8 or more and its `where`
    /// accepts it; a constant halved before (one the configuration did not set) is halved again
    /// only when no other one can be. `None` when none can shrink, or when the user chose `--warps` or `--stages`
    /// (an explicit choice that does not fit stays an error naming the bytes).
    pub fn shrunk(&self, src: &str) -> Option<CompilePlan> {
        if self.flags.warps.is_some() || self.flags.stages.is_some() {
            return None;
        }
        let generic = kir_ir::text::parse(src).ok()?;
        let values = const_values(&generic, &self.defines).ok()?;
        let s = crate::structure::analyze(&generic, &values);
        // The user's own `-D`s: the plan's defines that no configuration set.
        let chosen = |name: &str| self.configured(name);
        let halved = |name: &str| self.shrunk.iter().any(|n| n == name);
        let user = |name: &str| {
            self.defines.iter().any(|(n, _)| n == name) && !chosen(name) && !halved(name)
        };
        let mut names: Vec<&str> = s
            .roles
            .iter()
            .chain(s.kernels.iter().flat_map(|k| k.roles.iter()))
            .filter_map(|(_, c)| c.as_deref())
            .filter(|c| !user(c))
            .collect();
        names.sort_unstable();
        names.dedup();
        let value = |name: &str| match values.iter().find(|(n, _)| n == name) {
            Some((_, kir_ir::EvalVal::Int(v))) => Some(*v),
            _ => None,
        };
        // The largest constant not halved yet (or set by the configuration: those always
        // compete), else the largest halved one.
        let (name, v) = names
            .iter()
            .filter_map(|&n| Some((n, value(n)?)))
            .filter(|&(n, v)| {
                v / 2 >= 8 && {
                    let mut d = self.defines.clone();
                    d.push((n.to_string(), (v / 2).to_string()));
                    const_values(&generic, &d).is_ok()
                }
            })
            .max_by_key(|&(n, v)| (chosen(n) || !halved(n), v))?;
        let mut plan = self.clone();
        plan.defines.retain(|(n, _)| n != name);
        plan.defines.push((name.to_string(), (v / 2).to_string()));
        if !plan.shrunk.iter().any(|n| n == name) {
            plan.shrunk.push(name.to_string());
        }
        let sep = if plan.config.report.is_empty() {
            ""
        } else {
            "; "
        };
        plan.config.report += &format!("{sep}shrunk to fit shared memory: {name} {v} -> {}", v / 2);
        Some(plan)
    }

    /// Whether constant `name` was set by the plan's configuration (the module's or a kernel's
    /// row), not by the user.
    pub fn configured(&self, name: &str) -> bool {
        self.config.defines.iter().any(|(n, _)| n == name)
            || self
                .kernel_configs
                .iter()
                .any(|(_, c)| c.defines.iter().any(|(n, _)| n == name))
    }

    /// The plan of kernel `name` of a module configured kernel by kernel: its own
    /// configuration (none where it has no row) in place of the module's.
    pub fn for_kernel(&self, name: &str) -> CompilePlan {
        let config = self
            .kernel_configs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, c)| c.clone())
            .unwrap_or_default();
        CompilePlan {
            config,
            kernel_configs: vec![],
            ..self.clone()
        }
    }

    /// What the compiled code depends on, as text: the plan less the problem dims the
    /// configuration was chosen from and the reports saying why. Two plans with equal
    /// identities compile `src` to the same code (a GEMM with M = 4096 and one with M = 8192
    /// that take the same row share it), so the on-disk cache and `kir.torch`'s programs are
    /// keyed by it.
    pub fn identity(&self) -> String {
        let mut p = self.clone();
        p.dims.clear();
        p.config.report.clear();
        for (_, c) in &mut p.kernel_configs {
            c.report.clear();
        }
        format!("{p:?}")
    }

    /// The `configuration:` lines of `--report`: the module's, or one per kernel.
    pub fn config_report(&self) -> String {
        if self.kernel_configs.is_empty() {
            return self.config.report.clone();
        }
        let lines: Vec<&str> = self
            .kernel_configs
            .iter()
            .map(|(_, c)| c.report.as_str())
            .collect();
        lines.join("\n")
    }

    /// The plan for only `kernel` of the module.
    pub fn with_kernel(mut self, kernel: Option<&str>) -> CompilePlan {
        self.kernel = kernel.map(str::to_string);
        self
    }

    /// The plan lowering the module of `stage` instead of the front end's output.
    pub fn with_stage(mut self, stage: Stage) -> CompilePlan {
        self.stage = stage;
        self
    }

    /// The PTX backend's options: the user's flags, with the configuration's warps where the
    /// user chose none.
    pub fn ptx_options(&self) -> PtxOptions {
        PtxOptions {
            warps: self.flags.warps.or(self.config.warps),
            min_blocks: self.config.min_blocks,
            ..self.flags.ptx_options()
        }
    }

    /// Whether a producer/consumer split is tried first, and whether it must succeed.
    pub fn warp_specialize(&self) -> WsWant {
        let named = self.flags.ws_plan.is_some() || self.flags.ws_ptx.is_some();
        match (named, self.flags.warp_specialize) {
            (true, _) | (false, Some(true)) => WsWant::Required,
            (false, Some(false)) => WsWant::No,
            (false, None) if self.config.warp_specialize => WsWant::Preferred,
            (false, None) => WsWant::No,
        }
    }

    /// The ring depth tried first: `--stages`, else the configuration's, else
    /// [`PIPELINE_STAGES`]; one more without `--stages` when the overlap is asked for (the
    /// paired overlap refills a stage one iteration later, so it keeps the prefetch distance
    /// with one more stage), unless warp-specialized.
    pub fn first_stages(&self, warp_specialized: bool) -> usize {
        let stages = self
            .flags
            .stages
            .or(self.config.stages)
            .unwrap_or(PIPELINE_STAGES);
        if !warp_specialized && self.flags.stages.is_none() && self.overlap() {
            stages.max(PIPELINE_STAGES + 1)
        } else {
            stages
        }
    }

    /// Whether `dot_overlap` is asked for (the flag, else the configuration).
    pub fn overlap(&self) -> bool {
        self.flags.overlap.unwrap_or(self.config.overlap)
    }

    /// Whether `swap_operands` is asked for (the flag, else the configuration).
    pub fn swap_operands(&self) -> bool {
        self.flags
            .swap_operands
            .unwrap_or(self.config.swap_operands)
    }

    /// The program count of a persistent grid: `--persistent N` (0: none), else the target's SM
    /// count where the configuration asks for it (warp-specialized candidates only) or
    /// `--stream-k on` does (a stream-K tail needs a persistent grid).
    pub fn persistent(&self, warp_specialized: bool) -> Option<u32> {
        match self.flags.persistent {
            Some(0) => None,
            Some(n) => Some(n),
            None => ((warp_specialized && self.config.persistent)
                || self.flags.stream_k == Some(true))
            .then(|| self.target.sm_count()),
        }
    }

    /// Whether the `cluster` pass runs, and strictly: `--cluster on` (an error where no kernel
    /// of the module qualifies), `--cluster off`, else where the configuration asks for it
    /// (warp-specialized persistent candidates on a target with clusters, where qualifying).
    pub fn cluster(&self, warp_specialized: bool) -> Option<bool> {
        match self.flags.cluster {
            Some(true) => Some(true),
            Some(false) => None,
            None => (warp_specialized
                && self.config.cluster
                && self.persistent(warp_specialized).is_some()
                && self.target.has_clusters())
            .then_some(false),
        }
    }

    /// Whether a persistent grid gets a stream-K tail (`stream_k`), and strictly: `--stream-k
    /// on` (an error where no kernel qualifies), `--stream-k off`, else where the
    /// configuration asks for it (where a kernel qualifies); only with a persistent grid.
    pub fn stream_k(&self, warp_specialized: bool) -> Option<bool> {
        self.persistent(warp_specialized)?;
        match self.flags.stream_k {
            Some(true) => Some(true),
            Some(false) => None,
            None => self.config.stream_k.then_some(false),
        }
    }

    /// The scheduling options of one candidate: `stages` deep, warp-specialized or not, with
    /// tensor-copy rings or cp.async ones. The only place [`ScheduleOptions`] is built for a
    /// compilation.
    pub fn schedule(&self, stages: usize, warp_specialized: bool, tma: bool) -> ScheduleOptions {
        let warp_specialize = if !warp_specialized {
            WsChoice::Off
        } else if let Some(choice) = self.flags.ws_plan.as_ref().or(self.flags.ws_ptx.as_ref()) {
            choice.clone()
        } else {
            match self.ptx_options().warps {
                Some(w) => WsChoice::Plan(WsPlan::one_consumer(w, self.config.consumer_regs)),
                None => WsChoice::PerKernel {
                    max_regs: self.config.consumer_regs,
                    roles: self.config.roles,
                },
            }
        };
        options(
            Some(self.target),
            Some(stages),
            warp_specialize,
            !tma,
            self.persistent(warp_specialized),
            self.config.tile_group,
            self.overlap() && (warp_specialized || tma),
            self.swap_operands(),
            self.cluster(warp_specialized),
            self.stream_k(warp_specialized),
        )
    }

    /// The kernel-symbol suffix of the PTX backend's options ([`CompilePlan::ptx_options`])
    /// and of a plan it lowers ([`Flags::ws_suffix`]): what follows the specialization's.
    pub fn symbol_suffix(&self) -> String {
        self.ptx_options().suffix() + &self.flags.ws_suffix()
    }
}

/// How warp specialization enters the schedule search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsWant {
    /// Not tried.
    No,
    /// Tried first; the unspecialized kernel where this one does not qualify (a configuration's
    /// choice).
    Preferred,
    /// The only candidate: its error is the compilation's (the user asked for it).
    Required,
}

/// The scheduling options `kirc check --dump-after PASS --target T` explores with: no
/// configuration, the pass forced to run so it can be shown (`warp_specialize` with the
/// target's plans unless `ws` names one, `dot_overlap` with the overlap on, `swap_operands`
/// on, `persistent` over the target's SM count unless `persistent` says otherwise, `cluster`
/// on both of those and on a kernel that qualifies).
pub fn explore(
    target: Option<Target>,
    pass: &str,
    stages: Option<usize>,
    ws: WsChoice,
    persistent: Option<u32>,
) -> ScheduleOptions {
    let warp_specialize = match ws {
        WsChoice::Off if pass == "warp_specialize" || pass == "cluster" => WsChoice::Auto,
        ws => ws,
    };
    let persistent = match persistent {
        None if pass == "persistent" || pass == "cluster" || pass == "stream_k" => {
            target.map(|t| t.sm_count())
        }
        p => p,
    };
    options(
        target,
        stages,
        warp_specialize,
        false,
        persistent,
        None,
        pass == "dot_overlap",
        pass == "swap_operands",
        // Where the kernel does not qualify, the dump shows it as it is.
        (pass == "cluster").then_some(false),
        (pass == "stream_k").then_some(false),
    )
}

/// The one constructor of [`ScheduleOptions`] (a test checks that no other code builds one).
#[allow(clippy::too_many_arguments)]
fn options(
    target: Option<Target>,
    stages: Option<usize>,
    warp_specialize: WsChoice,
    no_tma_rings: bool,
    persistent: Option<u32>,
    tile_group: Option<u32>,
    overlap: bool,
    swap_operands: bool,
    cluster: Option<bool>,
    stream_k: Option<bool>,
) -> ScheduleOptions {
    ScheduleOptions {
        target,
        stages,
        warp_specialize,
        no_tma_rings,
        persistent,
        tile_group: persistent.and(tile_group),
        overlap,
        swap_operands,
        cluster,
        stream_k,
    }
}

/// The configuration row for what `src`'s kernels are (compiler/src/structure/, keyed by class
/// and structural features, not by names), or for a module whose kernels make no class
/// together, each kernel's ([`configs::kernel_configs`]); the user's tile choices (`-D` of a
/// row's constant, `--warps`, `--stages`) keep every row out.
fn target_config(
    src: &str,
    defines: &[(String, String)],
    target: Target,
    cuda: bool,
    flags: &Flags,
    dims: &[(String, u64)],
) -> (Config, Vec<(String, Config)>) {
    let Ok(generic) = kir_ir::text::parse(src) else {
        return (Config::none("the source does not parse"), vec![]);
    };
    let Ok(values) = const_values(&generic, defines) else {
        return (Config::none("the constants do not specialize"), vec![]);
    };
    let structure = crate::structure::analyze(&generic, &values).with_dims(dims);
    let user_tiles = flags.warps.is_some() || flags.stages.is_some();
    let per_kernel =
        configs::kernel_configs(&structure, &generic, target, cuda, defines, user_tiles);
    if !per_kernel.is_empty() {
        return (Config::default(), per_kernel);
    }
    let config = configs::target_config(&structure, &generic, target, cuda, defines, user_tiles);
    (config, vec![])
}

/// The runtime dims that `shapes` (`(param, extents)` of the entry's tensors) bind: each
/// extent whose declared dim is a bare name, in the order given, of the param variant whose
/// condition holds with `defines` (a source that does not parse or specialize, an unknown
/// param or a rank that differs binds nothing).
fn bound_dims(
    src: &str,
    defines: &[(String, String)],
    shapes: &[(String, Vec<usize>)],
) -> Vec<(String, u64)> {
    let Ok(m) = kir_ir::text::parse(src) else {
        return vec![];
    };
    let Ok(values) = const_values(&m, defines) else {
        return vec![];
    };
    let holds = |p: &kir_ir::Param| match &p.cond {
        None => true,
        Some(c) => {
            // A constant's value; any other name (an enum variant: `EPILOGUE == swiglu`) is
            // itself.
            let lookup = |n: &str| values.iter().find(|(x, _)| x == n).map(|(_, v)| v.clone());
            matches!(c.eval(&lookup, true), Ok(kir_ir::EvalVal::Bool(true)))
        }
    };
    let params = match (m.entry_params(), m.kernels.values().next()) {
        (Some(p), _) => p.to_vec(),
        (None, Some(k)) if m.kernels.len() == 1 => k.params.clone(),
        _ => return vec![],
    };
    let mut dims: Vec<(String, u64)> = vec![];
    for (name, extents) in shapes {
        for p in params.iter().filter(|p| &p.name == name && holds(p)) {
            let kir_ir::ParamKind::Tensor(_, tt) = &p.kind else {
                continue;
            };
            if tt.dims.len() != extents.len() {
                continue;
            }
            for (d, &e) in tt.dims.iter().zip(extents) {
                if let kir_ir::ExprKind::Ident(n) = &d.kind {
                    if !dims.iter().any(|(x, _)| x == n) {
                        dims.push((n.clone(), e as u64));
                    }
                }
            }
        }
    }
    dims
}
