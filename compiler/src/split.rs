//! Compiling a module kernel by kernel: a program whose kernels make no class together (an
//! RMSNorm and a GEMM, two projections and a SwiGLU) has a configuration per kernel
//! ([`crate::configs::kernel_configs`]), and each kernel's configuration sets its warps, ring
//! depth, warp roles and persistence, which the scheduling passes and the PTX backend apply to
//! a whole module. So each kernel runs the schedule search ([`crate::search`]) on its own, as
//! the module of just that kernel would, and the kernels the searches chose are lowered into one
//! PTX module ([`kir_backends::backend::lower_ptx`]), each with its own symbol suffix and
//! lowering options, beside the program that launches them.
//!
//! Also the one way a kernel is carved out of a module: [`entry_module`], the module whose
//! entry runs or compiles (`--kernel`).

use crate::compiled::{check_ptx_size, CompileError, Compiled};
use crate::pass::PassManager;
use crate::plan::CompilePlan;
use crate::search::{self, Searched};
use kir_backends::backend::{lower_ptx, PtxBackend};
use kir_backends::ptx::PtxOptions;
use kir_ir::{Kernel, Module};

/// Lowers `spec` (the front end's module, two or more kernels) kernel by kernel for the PTX
/// backend, `suffix` being the specialization's symbol suffix; pushes each scheduling pass's
/// module (every kernel as it stood after that pass) onto `seen`.
pub fn lower(
    spec: &Module,
    plan: &CompilePlan,
    suffix: &str,
    seen: &mut Vec<(String, Module)>,
) -> Result<Compiled, CompileError> {
    let target = plan.target;
    let mut found: Vec<(Searched, String, PtxOptions)> = vec![];
    let mut tried = vec![];
    for k in spec.kernels.values() {
        let kplan = plan.for_kernel(&k.name);
        let one = entry_module(spec.clone(), Some(&k.name)).map_err(CompileError::Plain)?;
        let opts = kplan.ptx_options();
        let ksuffix = format!("{suffix}{}", kplan.symbol_suffix());
        let backend = PtxBackend { target, opts };
        let s = search::search(&kplan, &one, &backend, &ksuffix)?;
        tried.extend(s.tried.iter().map(|t| format!("kernel `{}`: {t}", k.name)));
        found.push((s, ksuffix, opts));
    }
    let chosen: Vec<Kernel> = found
        .iter()
        .map(|(s, _, _)| only_kernel(&s.module))
        .collect::<Result<_, _>>()?;
    let items: Vec<(&Kernel, &str, PtxOptions)> = chosen
        .iter()
        .zip(&found)
        .map(|(k, (_, sfx, opts))| (k, sfx.as_str(), *opts))
        .collect();
    let lowered =
        lower_ptx(&spec.name, target, &items).map_err(|e| CompileError::Plain(describe(e)))?;
    let module = with_kernels(spec, chosen.iter().cloned());
    check_ptx_size(&module, target, &lowered)?;
    seen.extend(pass_modules(spec, &found));
    let meta =
        kir_backends::meta::module_meta(&module, target, "ptx", lowered.version, &lowered.kernels);
    Ok(Compiled {
        text: lowered.text,
        meta: Some(meta),
        module,
        reports: lowered.reports,
        tried,
        fusion: None,
    })
}

/// The one kernel of a module the search returned for one kernel.
fn only_kernel(m: &Module) -> Result<Kernel, CompileError> {
    match m.kernels.values().collect::<Vec<_>>()[..] {
        [k] => Ok(k.clone()),
        _ => Err(CompileError::Plain(format!(
            "the schedule search of one kernel of module `{}` returned {} kernels",
            m.name,
            m.kernels.len()
        ))),
    }
}

/// `spec` with its kernels replaced by `kernels` (in the same order).
fn with_kernels(spec: &Module, kernels: impl Iterator<Item = Kernel>) -> Module {
    let mut m = spec.clone();
    m.kernels = cranelift_entity::PrimaryMap::new();
    for k in kernels {
        m.kernels.push(k);
    }
    m
}

/// The lowering error of the linked module (each kernel was already lowered by its search, so
/// this is not expected; it keeps its message).
fn describe(e: kir_backends::backend::LowerError) -> String {
    match e {
        kir_backends::backend::LowerError::Rejected(r) => r.describe(),
        kir_backends::backend::LowerError::Failed { message, .. } => message,
    }
}

/// For each scheduling pass that ran for some kernel, in pipeline order, the module with every
/// kernel as it stood after that pass (a kernel the pass did not run for keeps its form from
/// the pass before, or the front end's).
fn pass_modules(spec: &Module, found: &[(Searched, String, PtxOptions)]) -> Vec<(String, Module)> {
    let mut current: Vec<Kernel> = spec.kernels.values().cloned().collect();
    let mut out = vec![];
    for pass in PassManager::standard().names() {
        let mut ran = false;
        for (i, (s, _, _)) in found.iter().enumerate() {
            if let Some((_, m)) = s.passes.iter().find(|(p, _)| p == pass) {
                if let Ok(k) = only_kernel(m) {
                    current[i] = k;
                    ran = true;
                }
            }
        }
        if ran {
            out.push((
                pass.to_string(),
                with_kernels(spec, current.iter().cloned()),
            ));
        }
    }
    out
}

/// The module whose entry runs or compiles: `m` itself, or (with `kernel`) a module holding just
/// that kernel, which becomes the entry. A module with several kernels and no program needs one.
pub fn entry_module(m: Module, kernel: Option<&str>) -> Result<Module, String> {
    let names = || {
        m.kernels
            .values()
            .map(|k| k.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(name) = kernel else {
        if m.entry_params().is_none() {
            return Err(format!(
                "module `{}` has {} kernels and no program: choose one with --kernel ({})",
                m.name,
                m.kernels.len(),
                names()
            ));
        }
        return Ok(m);
    };
    let Some((_, k)) = m.kernel(name) else {
        return Err(format!(
            "--kernel {name}: module `{}` has no such kernel (kernels: {})",
            m.name,
            names()
        ));
    };
    let mut kernels = cranelift_entity::PrimaryMap::new();
    kernels.push(k.clone());
    Ok(Module {
        doc: m.doc.clone(),
        name: m.name.clone(),
        consts: vec![],
        kernels,
        program: None,
    })
}
