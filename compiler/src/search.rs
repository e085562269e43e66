//! The schedule search: which scheduled module a backend lowers. Candidates are offered in a
//! fixed order and a [`Backend`] says whether each fits ([`Backend::accepts`], then
//! [`Backend::lower`] or its [`Rejection`]):
//!
//! 1. warp-specialized (when the plan asks for it: [`WsWant`]), at the plan's first ring depth;
//!    a required one ends the search with its error, a preferred one falls through;
//! 2. one role at depth d = the plan's first depth: tensor-copy rings where the target has them,
//!    cp.async rings when the backend does not lay a tensor copy's buffer out for it
//!    ([`Rejection::TensorCopyLayout`]);
//! 3. without `--stages`, a ring that does not fit the target's shared memory (the pass's own
//!    count, or [`Rejection::OverShared`] from the backend) is retried one stage shallower, down
//!    to depth 1: the unscheduled module.
//!
//! Every candidate tried, and why it was left, is kept in [`Searched::tried`]. When every
//! candidate fails after a preferred warp-specialized one, the error is the last candidate's with
//! the warp-specialized one's reason as a note ([`SearchError::noting`]): a one-role candidate's
//! error alone can mislead where only the specialized form could have qualified (`--cluster on`
//! with stream-K: the one-role kernel "is not warp-specialized", the specialized one "orders its
//! adds with semaphores").

use crate::options::{ScheduleOptions, WsChoice};
use crate::pass::PassManager;
use crate::plan::{CompilePlan, WsWant};
use kir_backends::backend::{Backend, LowerError, Lowered, Rejection};
use kir_ir::{Diagnostic, Diagnostics, Module, Opcode};

/// The outcome of a search: the module the backend lowered, what it produced, the IR after each
/// scheduling pass of that candidate, and the candidates tried before it.
pub struct Searched {
    /// The scheduled module that was lowered.
    pub module: Module,
    /// The backend's output for it.
    pub lowered: Lowered,
    /// `(pass, module)` after each scheduling pass that ran for the chosen candidate.
    pub passes: Vec<(String, Module)>,
    /// One line per candidate left behind, and why.
    pub tried: Vec<String>,
}

/// Why the search stopped without a module.
#[derive(Debug)]
pub enum SearchError {
    /// Errors located in the source.
    Source(Diagnostics),
    /// An error with no location.
    Plain(String),
}

impl SearchError {
    /// This error with `note` (why an earlier candidate was left) added: under the first
    /// located error that has no note of its own, else as a line after a plain message.
    pub fn noting(self, note: &Option<String>) -> SearchError {
        let Some(note) = note else {
            return self;
        };
        match self {
            SearchError::Source(mut d) => {
                match d.0.iter_mut().find(|e| e.note.is_none()) {
                    Some(e) => e.note = Some(note.clone()),
                    None => d.0.push(Diagnostic {
                        message: note.clone(),
                        span: d.0.first().map(|e| e.span).unwrap_or_default(),
                        note: None,
                    }),
                }
                SearchError::Source(d)
            }
            SearchError::Plain(m) => SearchError::Plain(format!("{m}\n({note})")),
        }
    }
}

/// Runs the search for `spec` (the front end's module for the plan's stage) with `backend`.
pub fn search(
    plan: &CompilePlan,
    spec: &Module,
    backend: &dyn Backend,
    suffix: &str,
) -> Result<Searched, SearchError> {
    let mut tried = Vec::new();
    if !backend.takes_scheduled_ir() {
        return unscheduled(backend, spec, suffix, tried);
    }
    let mut ws_left: Option<String> = None;
    match plan.warp_specialize() {
        WsWant::No => {}
        want => {
            let stages = plan.first_stages(true);
            match candidate(
                plan,
                spec,
                backend,
                suffix,
                plan.schedule(stages, true, false),
            ) {
                Ok(mut s) => {
                    s.tried = tried;
                    return Ok(s);
                }
                Err(e) if want == WsWant::Required => return Err(e.into_error()),
                Err(e) => {
                    let why = e.why();
                    tried.push(format!("warp-specialized, {stages} stages: {why}"));
                    ws_left = Some(format!(
                        "the warp-specialized candidate ({stages} stages) was tried first: {why}"
                    ));
                }
            }
        }
    }
    let explicit = plan.flags.stages.is_some();
    let mut stages = plan.first_stages(false);
    loop {
        if stages < 2 {
            return unscheduled(backend, spec, suffix, tried).map_err(|e| e.noting(&ws_left));
        }
        // Tensor-copy rings where the pass makes them (targets with TMA and wgmma); a module
        // whose tensor copies the backend would not lay out (written by hand, or a tile whose
        // dots take mma.sync) is offered again with cp.async rings.
        let mut result = candidate(
            plan,
            spec,
            backend,
            suffix,
            plan.schedule(stages, false, true),
        );
        if let Err(Left::Rejected(Rejection::TensorCopyLayout)) = &result {
            tried.push(format!(
                "{stages} stages, tensor-copy rings: {}",
                Rejection::TensorCopyLayout.describe()
            ));
            result = candidate(
                plan,
                spec,
                backend,
                suffix,
                plan.schedule(stages, false, false),
            );
        }
        match result {
            Ok(mut s) => {
                s.tried = tried;
                return Ok(s);
            }
            Err(e) if !explicit && e.over_shared() => {
                tried.push(format!("{stages} stages: {}", e.why()));
                stages -= 1;
            }
            Err(e) => return Err(e.into_error().noting(&ws_left)),
        }
    }
}

/// The last candidate: the module as the front end left it.
fn unscheduled(
    backend: &dyn Backend,
    spec: &Module,
    suffix: &str,
    tried: Vec<String>,
) -> Result<Searched, SearchError> {
    let mut s = lower(backend, spec.clone(), suffix, Vec::new()).map_err(Left::into_error)?;
    s.tried = tried;
    Ok(s)
}

/// Why one candidate was left.
enum Left {
    /// The scheduling passes failed (over the target's budget, or the kernel does not qualify).
    Schedule(Diagnostics),
    /// The backend turned it down.
    Rejected(Rejection),
    /// The backend failed.
    Failed(SearchError),
}

impl Left {
    /// Whether a shallower ring may fit.
    fn over_shared(&self) -> bool {
        match self {
            // The pass's only error for a depth of 2 or more: the ring does not fit.
            Left::Schedule(d) => d.0.iter().all(|e| e.message.contains("over the target's")),
            Left::Rejected(Rejection::OverShared { .. }) => true,
            Left::Rejected(Rejection::TensorCopyLayout) | Left::Failed(_) => false,
        }
    }

    fn why(&self) -> String {
        match self {
            Left::Schedule(d) => d.0.first().map_or_else(String::new, |e| e.message.clone()),
            Left::Rejected(r) => r.describe(),
            Left::Failed(SearchError::Plain(m)) => m.clone(),
            Left::Failed(SearchError::Source(d)) => {
                d.0.first().map_or_else(String::new, |e| e.message.clone())
            }
        }
    }

    fn into_error(self) -> SearchError {
        match self {
            Left::Schedule(d) => SearchError::Source(d),
            Left::Rejected(Rejection::OverShared { message, span, .. }) => match span {
                Some(span) => {
                    SearchError::Source(Diagnostics::from(Diagnostic::new(span, message)))
                }
                None => SearchError::Plain(message),
            },
            Left::Rejected(r) => SearchError::Plain(r.describe()),
            Left::Failed(e) => e,
        }
    }
}

/// Schedules `spec` with `opts`, asks the backend, and lowers.
fn candidate(
    plan: &CompilePlan,
    spec: &Module,
    backend: &dyn Backend,
    suffix: &str,
    opts: ScheduleOptions,
) -> Result<Searched, Left> {
    let mut passes = Vec::new();
    let m = PassManager::standard()
        .run_schedule(spec, &opts, &mut |p, m| {
            passes.push((p.to_string(), m.clone()))
        })
        .map_err(Left::Schedule)?;
    if plan.flags.warp_specialize == Some(true) {
        not_specialized(&m).map_err(|d| Left::Failed(SearchError::Source(d)))?;
    }
    match opts.warp_specialize {
        // The per-kernel plan keeps each kernel's own block as its consumer, so the backend's
        // layout plan is the consumer's: a producer's tensor copies must fill stages in the
        // layout they write. (A named plan's consumers take other warps; its errors are the
        // backend's.)
        WsChoice::PerKernel { .. } => {
            specialized_layout(&m, backend).map_err(|d| Left::Failed(SearchError::Source(d)))?
        }
        WsChoice::Auto | WsChoice::Plan(_) => {}
        // cp.async rings take no tensor-copy layout check.
        WsChoice::Off if !opts.no_tma_rings => backend.accepts(&m).map_err(Left::Rejected)?,
        WsChoice::Off => {}
    }
    lower(backend, m, suffix, passes)
}

/// Lowers `m` with the backend.
fn lower(
    backend: &dyn Backend,
    m: Module,
    suffix: &str,
    passes: Vec<(String, Module)>,
) -> Result<Searched, Left> {
    match backend.lower(&m, suffix) {
        Ok(lowered) => Ok(Searched {
            module: m,
            lowered,
            passes,
            tried: Vec::new(),
        }),
        Err(LowerError::Rejected(r)) => Err(Left::Rejected(r)),
        Err(LowerError::Failed { message, span }) => Err(Left::Failed(match span {
            Some(span) => SearchError::Source(Diagnostics::from(Diagnostic::new(span, message))),
            None => SearchError::Plain(message),
        })),
    }
}

/// `--warp-specialize on` for a kernel the pass left in one role (no pipelined loop to split):
/// an error at the kernel naming why, instead of a renamed copy of the unspecialized kernel.
/// In a program where some kernel was specialized, a kernel without a `dot` (attention_bwd's
/// delta preprocess, beside its two specialized kernels) has nothing for a producer to feed and
/// stays as it is; where none was, every kernel is named.
fn not_specialized(m: &Module) -> Result<(), Diagnostics> {
    let specialized = |k: &kir_ir::Kernel| has_op(k, k.body, Opcode::WarpSpecialize);
    let any = m.kernels.values().any(specialized);
    let errs: Vec<Diagnostic> = m
        .kernels
        .values()
        .filter(|k| {
            let dots = has_op(k, k.body, Opcode::Dot) || has_op(k, k.body, Opcode::DotAsync);
            !specialized(k) && (dots || !any)
        })
        .map(|k| {
            Diagnostic::new(
                k.span,
                format!(
                    "--warp-specialize on: kernel `{}` has no pipelined loop (a loop whose dot \
                     operands are loaded from global memory) for a producer to fill",
                    k.name
                ),
            )
        })
        .collect();
    none_or(errs)
}

/// Each warp-specialized kernel of `m` whose producer's tensor copies fill a buffer the backend
/// would not lay out for them (its dots take mma.sync at the kernel's tiles): an error at the
/// first such copy. Without this check the backend fails at the copy with its own words.
fn specialized_layout(m: &Module, backend: &dyn Backend) -> Result<(), Diagnostics> {
    let errs: Vec<Diagnostic> = m
        .kernels
        .values()
        .filter(|k| has_op(k, k.body, Opcode::WarpSpecialize))
        .filter_map(|k| {
            let mut one = m.clone();
            one.kernels = Default::default();
            one.kernels.push(k.clone());
            backend.accepts(&one).err()?;
            let copy = k
                .dfg
                .ops
                .values()
                .find(|od| od.opcode == Opcode::AsyncCopy && od.attr("bar").is_some())?;
            Some(Diagnostic::new(
                copy.span,
                format!(
                    "warp specialization copies this tile with TMA into the layout wgmma reads, \
                     but kernel `{}`'s dots take mma.sync at its tiles (`kirc compile --report` \
                     says why): give tiles that wgmma takes with -D, or leave warp \
                     specialization off",
                    k.name
                ),
            ))
        })
        .collect();
    none_or(errs)
}

/// `Ok` when `errs` is empty, else its errors.
fn none_or(errs: Vec<Diagnostic>) -> Result<(), Diagnostics> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(errs))
    }
}

/// Whether block `b` of `k`, or a region nested in it, holds an op with `opcode`.
fn has_op(k: &kir_ir::Kernel, b: kir_ir::Block, opcode: Opcode) -> bool {
    k.dfg.blocks[b].ops.iter().any(|&o| {
        let op = &k.dfg.ops[o];
        op.opcode == opcode || op.regions.iter().any(|&r| has_op(k, r, opcode))
    })
}

impl From<SearchError> for crate::compiled::CompileError {
    fn from(e: SearchError) -> crate::compiled::CompileError {
        match e {
            SearchError::Source(d) => crate::compiled::CompileError::Source(d),
            SearchError::Plain(m) => crate::compiled::CompileError::Plain(m),
        }
    }
}
