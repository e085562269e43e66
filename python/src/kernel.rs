//! `kir.compile`: the compile path of `kirc compile` — one `CompilePlan::resolve` from the
//! source, the constants, the target and what to emit, then `kir_compiler::internal::cache::compile` (the
//! on-disk cache of docs/cache.md where the environment enables it, `KIR_CACHE_DIR=off` or
//! `cache=False` for none, which is `pipeline::compile` itself) — and [`Compiled`], what it
//! returns to Python.
//!
//! [`Compiled`] keeps the whole compilation (`kir_compiler::internal::cache::Cached`: the text,
//! META.json, the module that was lowered, the backend's reports), not only its text, so that
//! a launch on a caller's stream can be added to it later without compiling again.
//! [`from_ptx`] builds the same value from files (PTX, META.json and the module that was
//! lowered, as `kirc compile --meta --lowered` writes them), for launching code compiled
//! elsewhere.

use crate::errors::Failure;
use kir_backends::Target;
use kir_compiler::internal::cache::{self, Cached, Outcome};
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

    /// The target it was compiled for.
    pub fn target_kind(&self) -> Target {
        self.target
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

    /// The module that was lowered, as canonical IR text (what `kirc compile --lowered`
    /// writes).
    #[getter]
    fn lowered(&self) -> String {
        kir_ir::text::print(&self.cached.compiled.module)
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
/// `shapes` are the extents the caller will pass for entry tensors: the dims they bind are
/// features the configuration rows read (`CompilePlan::resolve_for`, as `kirc bench --shape`);
/// the code still runs for every shape.
pub fn compile(
    src: Source,
    defines: &[(String, String)],
    target: Target,
    emit: Emit,
    kernel: Option<String>,
    use_cache: bool,
    shapes: &[(String, Vec<usize>)],
) -> Result<Compiled, Failure> {
    if let Some(name) = &kernel {
        check_kernel(&src, name)?;
    }
    let plan = CompilePlan::resolve_for(&src.text, defines, target, emit, Flags::default(), shapes)
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

/// The identity of the compilation [`compile`] would make of `src` with `defines` for
/// `target` (PTX) and the entry tensors' `shapes` (`CompilePlan::identity`): equal for two
/// calls exactly when they compile to the same code, so `kir.torch` keys its loaded programs
/// by it and compiles once per configuration, not once per shape. Cheap next to a compilation
/// (the source is parsed and its structure read, nothing is lowered).
pub fn plan_identity(
    src: &Source,
    defines: &[(String, String)],
    target: Target,
    shapes: &[(String, Vec<usize>)],
) -> Result<String, Failure> {
    let plan = CompilePlan::resolve_for(
        &src.text,
        defines,
        target,
        Emit::Ptx,
        Flags::default(),
        shapes,
    )
    .map_err(|e| Failure::compile(src, e))?;
    Ok(plan.identity())
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

/// A compilation made from its files: `ptx` (the PTX text), `meta_json` (its META.json) and
/// `lowered` (the canonical text of the module that was lowered to it, `kirc compile
/// --lowered`). The module must parse, verify and be fully specialized, META.json must name a
/// target and describe the module's kernels with their launch ABI (the checks of a load,
/// without the driver), and the PTX must define every kernel's `.entry` symbol; otherwise an
/// input error names `ptx`, `meta` or `lowered`. Nothing is compiled.
#[pyfunction]
pub fn from_ptx(
    py: Python<'_>,
    ptx: String,
    meta_json: String,
    lowered: String,
) -> PyResult<Compiled> {
    let r = py.detach(|| -> Result<Compiled, Failure> {
        let meta: serde_json::Value = serde_json::from_str(&meta_json)
            .map_err(|e| Failure::input("meta", format!("meta: not JSON: {e}")))?;
        let name = meta
            .get("target")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| Failure::input("meta", "meta: no `target` (is it a META.json?)"))?;
        let target = target(name)
            .map_err(|_| Failure::input("meta", format!("meta: unknown target `{name}`")))?;
        let module = kir_ir::text::parse(&lowered).map_err(|d| {
            Failure::input(
                "lowered",
                format!(
                    "lowered: the module does not parse:\n{}",
                    d.render("<lowered>", &lowered)
                ),
            )
        })?;
        kir_ir::verifier::verify(&module).map_err(|d| {
            Failure::input(
                "lowered",
                format!(
                    "lowered: the module does not verify:\n{}",
                    d.render("<lowered>", &lowered)
                ),
            )
        })?;
        kir_backends::runtime::check_meta(&meta, &module).map_err(|e| {
            Failure::input(
                "meta",
                format!("meta does not describe the lowered module: {e}"),
            )
        })?;
        let kernels = meta
            .get("kernels")
            .and_then(serde_json::Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for k in kernels {
            let symbol = k
                .get("symbol")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("");
            let defined = ptx.match_indices(".entry ").any(|(i, m)| {
                let rest = &ptx[i + m.len()..];
                rest.strip_prefix(symbol)
                    .is_some_and(|r| r.starts_with(|c: char| c == '(' || c.is_whitespace()))
            });
            if !defined {
                return Err(Failure::input(
                    "ptx",
                    format!("ptx: no `.entry {symbol}` (the kernel META.json lists)"),
                ));
            }
        }
        let compiled = kir_compiler::internal::compile::Compiled {
            text: ptx,
            meta: Some(meta),
            module,
            reports: Vec::new(),
            tried: Vec::new(),
            fusion: None,
        };
        Ok(Compiled {
            source_name: "<ptx>".to_string(),
            target,
            emit: Emit::Ptx,
            kernel: None,
            cached: Arc::new(Cached {
                compiled,
                report: String::new(),
                outcome: Outcome::Off,
            }),
        })
    });
    crate::errors::py_result(py, r)
}
