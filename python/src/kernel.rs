//! `kir.compile`: the compile path of `kirc compile` — one `CompilePlan::resolve` from the
//! source, the constants, the target and what to emit, then `kir_compiler::internal::cache::compile` (the
//! on-disk cache of docs/cache.md where the environment enables it, `KIR_CACHE_DIR=off` or
//! `cache=False` for none, which is `pipeline::compile` itself) — and [`Compiled`], what it
//! returns to Python.
//!
//! [`Compiled`] keeps the whole compilation (`kir_compiler::internal::cache::Cached`: the text,
//! META.json, the module that was lowered, the backend's reports), not only its text, so that
//! a launch on a caller's stream can be added to it later without compiling again.

use crate::errors::Failure;
use kir_backends::Target;
use kir_compiler::internal::cache::{self, Cached};
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_compiler::internal::source::Source;
use pyo3::prelude::*;
use std::sync::Arc;

/// A compiled module (the native half of `kir.Kernel`).
#[pyclass(frozen, module = "kir._kir", name = "Compiled")]
pub struct Compiled {
    /// The source's name in messages (a path, `<op>.kir`, or `<source>`).
    source_name: String,
    target: Target,
    emit: Emit,
    kernel: Option<String>,
    /// The compilation, shared with whatever later launches it.
    cached: Arc<Cached>,
}

impl Compiled {
    /// What was emitted.
    pub fn emit_kind(&self) -> Emit {
        self.emit
    }

    /// The compilation (shared).
    pub fn cached(&self) -> Arc<Cached> {
        Arc::clone(&self.cached)
    }
}

/// The name `kir.compile` takes for an emitted language.
fn emit_name(emit: Emit) -> &'static str {
    match emit {
        Emit::Ptx => "ptx",
        Emit::Cuda => "cuda",
        Emit::Ir => "ir",
    }
}

#[pymethods]
impl Compiled {
    /// The emitted text: PTX, CUDA C or the IR.
    #[getter]
    fn text(&self) -> &str {
        &self.cached.compiled.text
    }

    /// META.json as JSON text (`kirc compile --meta` writes the same value), or `None` for IR.
    #[getter]
    fn meta_json(&self) -> Option<String> {
        self.cached.compiled.meta.as_ref().map(|m| m.to_string())
    }

    /// The target's name (`sm_90a`).
    #[getter]
    fn target(&self) -> &'static str {
        self.target.name()
    }

    /// What was emitted: `ptx`, `cuda` or `ir`.
    #[getter]
    fn emit(&self) -> &'static str {
        emit_name(self.emit)
    }

    /// The source's name in messages.
    #[getter]
    fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The kernel compiled alone as the entry, if one was named.
    #[getter]
    fn kernel(&self) -> Option<&str> {
        self.kernel.as_deref()
    }

    /// The PTX backend's lowering decisions of each kernel and the schedules the search passed
    /// over (the first part of `kirc compile --report`; empty for CUDA C and IR).
    #[getter]
    fn report(&self) -> String {
        let mut text = self.cached.report.clone();
        for t in &self.cached.compiled.tried {
            text += &format!("schedule search: passed over {t}\n");
        }
        if let Some(f) = &self.cached.compiled.fusion {
            text += &format!("fusion: {f}\n");
        }
        text
    }

    /// What the on-disk cache did: `cache: hit KEY`, `cache: stored KEY`, `cache: off`, ...
    #[getter]
    fn cache(&self) -> String {
        self.cached.outcome.line()
    }

    fn __repr__(&self) -> String {
        format!(
            "<kir._kir.Compiled {} for {} ({})>",
            self.source_name,
            self.target.name(),
            emit_name(self.emit)
        )
    }
}

/// The target named `name`, or an input error listing the targets.
pub fn target(name: &str) -> Result<Target, Failure> {
    Target::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
        Failure::input(
            "target",
            format!(
                "unknown target `{name}`{} (targets: {})",
                kir_compiler::internal::suggest::did_you_mean(name, names.iter().copied()),
                names.join(", ")
            ),
        )
    })
}

/// The emitted language named `name`, or an input error listing them.
pub fn emit(name: &str) -> Result<Emit, Failure> {
    Emit::from_name(name)
        .ok_or_else(|| Failure::input("emit", format!("unknown emit `{name}` (ptx, cuda, ir)")))
}

/// Compiles `src` with `defines` for `target`, emitting `emit` (only `kernel`, as the entry,
/// when given), through the on-disk cache when `use_cache` and the environment enable it.
pub fn compile(
    src: Source,
    defines: &[(String, String)],
    target: Target,
    emit: Emit,
    kernel: Option<String>,
    use_cache: bool,
) -> Result<Compiled, Failure> {
    if let Some(name) = &kernel {
        check_kernel(&src, name)?;
    }
    let plan = CompilePlan::resolve(&src.text, defines, target, emit, Flags::default())
        .map_err(|e| Failure::compile(&src, e))?
        .with_kernel(kernel.as_deref());
    let store = if use_cache {
        cache::Cache::from_env()
    } else {
        None
    };
    let cached =
        cache::compile(&src.text, &plan, store.as_ref()).map_err(|e| Failure::compile(&src, e))?;
    Ok(Compiled {
        source_name: src.name,
        target,
        emit,
        kernel,
        cached: Arc::new(cached),
    })
}

/// An input error when the module of `src` has no kernel `name` (a source that does not parse
/// is left to the compilation, which reports it located).
pub fn check_kernel(src: &Source, name: &str) -> Result<(), Failure> {
    let Ok(m) = kir_ir::text::parse(&src.text) else {
        return Ok(());
    };
    if m.kernel(name).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = m.kernels.values().map(|k| k.name.as_str()).collect();
    Err(Failure::input(
        "kernel",
        format!(
            "kernel={name:?}: module `{}` has no such kernel (kernels: {})",
            m.name,
            names.join(", ")
        ),
    ))
}
