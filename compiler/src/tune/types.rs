//! The tuner's data (a leaf: it imports nothing else of `tune`): a [`Candidate`] (tuned
//! constant values and lowering flags), the [`Measure`] trait that runs and times one, the
//! options, the [`Event`]s reported while tuning, the [`TuneResult`] and the [`TuneError`].

use crate::compiled::{CompileError, Compiled};
use crate::configs::Config;
use crate::plan::Flags;
use kir_backends::interp::{HostArg, HostTensor};
use kir_ir::Module;
use std::collections::BTreeMap;
use std::time::Duration;

/// Tensor shapes by entry param name (`--shape NAME=AxB`).
pub type Shapes = [(String, Vec<usize>)];

/// The axes of a search space: a constant's or flag's name, and its values as text.
pub type Axes = Vec<(String, Vec<String>)>;

/// One point of the search space: a value for every tuned constant and the lowering flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The tuned constants, in declaration order.
    pub consts: Vec<(String, i64)>,
    /// The lowering flags (the user's fixed ones and the searched ones).
    pub flags: Flags,
}

impl Candidate {
    /// The constants as `-D` pairs.
    pub fn defines(&self) -> Vec<(String, String)> {
        self.consts
            .iter()
            .map(|(n, v)| (n.clone(), v.to_string()))
            .collect()
    }

    /// `BLOCK_M=64 BLOCK_N=128 warps=4 stages=3 ws=off`: the constants and the flags that are
    /// set, for tables and warnings.
    pub fn label(&self) -> String {
        let mut parts: Vec<String> = self
            .consts
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        let f = &self.flags;
        if let Some(w) = f.warps {
            parts.push(format!("warps={w}"));
        }
        if let Some(s) = f.stages {
            parts.push(format!("stages={s}"));
        }
        if let Some(ws) = f.warp_specialize {
            parts.push(format!("ws={}", if ws { "on" } else { "off" }));
        }
        match f.persistent {
            Some(0) => parts.push("persistent=off".into()),
            Some(p) => parts.push(format!("persistent={p}")),
            None => {}
        }
        if let Some(o) = f.overlap {
            parts.push(format!("overlap={}", if o { "on" } else { "off" }));
        }
        if let Some(s) = f.swap_operands {
            parts.push(format!("swap={}", if s { "on" } else { "off" }));
        }
        if let Some(c) = f.cluster {
            parts.push(format!("cluster={}", if c { "on" } else { "off" }));
        }
        if let Some(s) = f.stream_k {
            parts.push(format!("stream_k={}", if s { "on" } else { "off" }));
        }
        parts.join(" ")
    }

    /// The candidate as `kirc` arguments: `-D BLOCK_M=64 … --warps 4 --stages 3
    /// --warp-specialize off`.
    pub fn cli_args(&self) -> String {
        let mut parts: Vec<String> = self
            .consts
            .iter()
            .map(|(n, v)| format!("-D {n}={v}"))
            .collect();
        let f = &self.flags;
        let on = |b: bool| if b { "on" } else { "off" };
        if let Some(w) = f.warps {
            parts.push(format!("--warps {w}"));
        }
        if let Some(s) = f.stages {
            parts.push(format!("--stages {s}"));
        }
        if let Some(ws) = f.warp_specialize {
            parts.push(format!("--warp-specialize {}", on(ws)));
        }
        match f.persistent {
            Some(0) => parts.push("--persistent off".into()),
            Some(p) => parts.push(format!("--persistent {p}")),
            None => {}
        }
        if let Some(o) = f.overlap {
            parts.push(format!("--overlap {}", on(o)));
        }
        if let Some(s) = f.swap_operands {
            parts.push(format!("--swap-operands {}", on(s)));
        }
        if let Some(c) = f.cluster {
            parts.push(format!("--cluster {}", on(c)));
        }
        if let Some(s) = f.stream_k {
            parts.push(format!("--stream-k {}", on(s)));
        }
        parts.join(" ")
    }

    /// The candidate as a configuration row's value ([`Config`]): the tuned constants as
    /// defines, the warps and ring depth, and the switches that were on.
    pub fn config(&self) -> Config {
        Config {
            defines: self.defines(),
            warps: self.flags.warps,
            stages: self.flags.stages,
            warp_specialize: self.flags.warp_specialize == Some(true),
            persistent: matches!(self.flags.persistent, Some(n) if n > 0),
            overlap: self.flags.overlap == Some(true),
            swap_operands: self.flags.swap_operands == Some(true),
            cluster: self.flags.cluster == Some(true),
            stream_k: self.flags.stream_k == Some(true),
            // Not one of the tuner's axes: a tuned configuration states no `.minnctapersm` of
            // its own, so where a row asked for one (attention_bwd d96 on sm_90a) ptxas keeps
            // its own register cap, and a candidate that spills there is what the tuner times.
            min_blocks: None,
            // Nor is the consumer's register budget: a tuned warp-specialized candidate's
            // consumer gets what its block leaves it.
            consumer_regs: None,
            // Nor are two programs' roles as two consumers (`WsPlan::roles`): a tuned
            // warp-specialized candidate gives each kernel one consumer.
            roles: false,
            // Nor is the tile order of a kernel with no group constant: the plan resolved with
            // the candidate's flags takes it from the row its structure matches (configs.rs).
            tile_group: None,
            report: format!("configuration: tuned: {}", self.cli_args()),
        }
    }
}

/// Runs and times compiled candidates: on a GPU (`kirc tune`), or deterministically in tests.
pub trait Measure {
    /// Runs `compiled` once on `args` (by entry param name, as [`kir_backends::interp::run`]
    /// takes them) and returns every `out`/`inout` tensor; the tuner compares them with the
    /// interpreter's.
    fn run(
        &mut self,
        candidate: &Candidate,
        compiled: &Compiled,
        args: &BTreeMap<String, HostArg>,
    ) -> Result<BTreeMap<String, HostTensor>, String>;

    /// Times `compiled` on inputs of `shapes` (random values; the scalars from `scalars`):
    /// the median time of one run of the program, in milliseconds.
    fn time(
        &mut self,
        candidate: &Candidate,
        compiled: &Compiled,
        shapes: &Shapes,
        scalars: &BTreeMap<String, HostArg>,
    ) -> Result<f64, String>;
}

/// What the tuner may be told besides the source, `-D`s, target and shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneOptions {
    /// Lowering flags the user fixed (`--warps 4`): those axes are not searched.
    pub flags: Flags,
    /// Scalar params by name (default: 0.5 for floats, 1 for integers).
    pub scalars: Vec<(String, f64)>,
    /// The shapes of the interpreter check (default: the timed shapes, each dim above
    /// [`crate::internal::tune::SMALL_DIM`] shrunk).
    pub check_shapes: Vec<(String, Vec<usize>)>,
    /// The seed of the check's random inputs.
    pub seed: u64,
    /// The largest search space tuned (a larger one is an error naming its axes).
    pub limit: usize,
}

impl Default for TuneOptions {
    fn default() -> TuneOptions {
        TuneOptions {
            flags: Flags::default(),
            scalars: Vec::new(),
            check_shapes: Vec::new(),
            seed: 0,
            limit: 4096,
        }
    }
}

/// A tuning run before any measurement ([`crate::internal::tune::prepare`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// The axes searched: constant or flag name, and its values.
    pub axes: Axes,
    /// Every candidate, in enumeration order.
    pub candidates: Vec<Candidate>,
    /// The shapes of the interpreter check.
    pub check_shapes: Vec<(String, Vec<usize>)>,
    /// The scalar params, by name.
    pub scalars: BTreeMap<String, HostArg>,
    /// The module the interpreter's reference results come from: the front end's output at
    /// the user's `-D`s, every other constant at its default.
    pub reference: Module,
}

/// Where the tuner is, reported after every candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Candidates finished (timed, or dropped).
    pub done: usize,
    /// Candidates in the space.
    pub total: usize,
    /// The fastest so far: its label and median time (ms).
    pub best: Option<(String, f64)>,
    /// Time since tuning started.
    pub elapsed: Duration,
}

/// What the tuner reports while it runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A candidate is finished.
    Progress(Progress),
    /// A candidate compiled but gave wrong results, or failed to run: it is dropped.
    Dropped {
        /// `BLOCK_M=64 …`.
        label: String,
        /// Why (the output and its error, or the runtime's message).
        why: String,
    },
}

/// Why a candidate was left out before timing.
#[derive(Clone, Debug, PartialEq)]
pub enum Dropped {
    /// The compiler rejected it (a `where` violated, shared memory or the PTX size over the
    /// target's limit, warp specialization that does not apply): the first line of the error.
    Rejected(String),
    /// Its PTX is the same as an earlier candidate's (up to kernel symbols): that one's label.
    Duplicate(String),
    /// Its results differ from the interpreter's beyond the tolerance.
    Wrong(String),
    /// It failed to run or to be timed.
    Failed(String),
}

/// One timed candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Timed {
    /// The candidate.
    pub candidate: Candidate,
    /// Median milliseconds per run of the program.
    pub median_ms: f64,
}

/// The outcome of tuning.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneResult {
    /// The tuned axes: constant or flag name, and the values searched.
    pub axes: Axes,
    /// Every candidate in the space, in enumeration order.
    pub space: usize,
    /// The candidates that were not timed, and why.
    pub dropped: Vec<(Candidate, Dropped)>,
    /// The timed candidates, fastest first (ties keep enumeration order).
    pub timed: Vec<Timed>,
    /// The shapes the interpreter check used.
    pub check_shapes: Vec<(String, Vec<usize>)>,
}

impl TuneResult {
    /// The fastest candidate (there is one: tuning fails when none is timed).
    pub fn winner(&self) -> &Timed {
        &self.timed[0]
    }

    /// How many candidates were dropped for each reason: (rejected, duplicate, wrong, failed).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for (_, d) in &self.dropped {
            match d {
                Dropped::Rejected(_) => c.0 += 1,
                Dropped::Duplicate(_) => c.1 += 1,
                Dropped::Wrong(_) => c.2 += 1,
                Dropped::Failed(_) => c.3 += 1,
            }
        }
        c
    }
}

/// Why tuning failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The source does not parse, verify or specialize with the user's `-D`s.
    #[error("{0}")]
    Source(CompileError),
    /// The search space is empty or too large, or a flag is out of range.
    #[error("{0}")]
    Space(String),
    /// The shapes or scalars do not fit the entry.
    #[error("{0}")]
    Input(String),
    /// The interpreter could not compute the reference results.
    #[error("the interpreter's reference run failed on the check shapes: {0}")]
    Reference(String),
    /// No candidate was left to time.
    #[error("no candidate was left to time: {0}")]
    NoneLeft(String),
}
