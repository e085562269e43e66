//! The pipeline: the one place passes are ordered.
//!
//! The pipeline is `parse` → verify → `specialize` → verify → `egraph` → verify → `fusion` →
//! verify → `mask_split` → verify. Later stages (layout assignment, scheduling, lowering) are
//! appended to [`PASSES`] and to [`run_observed`], in order; each pass stays a free function in
//! `crate::passes`. The backends and `kirc run` consume the last module, [`Frontend::output`];
//! each intermediate module is kept in [`Frontend`] and checked differentially against the one
//! before it by the test suite. Every pass can be dumped: [`dump_after`] returns the canonical IR
//! text right after a named pass, which is what `kirc check --dump-after PASS` prints and what
//! snapshot tests record.

use crate::passes;
use kir_ir::{text, verifier, Diagnostics, Module};

/// The passes in pipeline order, by the name `--dump-after` takes.
pub const PASSES: &[&str] = &["parse", "specialize", "egraph", "fusion", "mask_split"];

/// `-D NAME=VALUE` overrides, in command-line order (the last one of a name wins).
pub type Defines = [(String, String)];

/// What the front end produces.
#[derive(Clone, Debug, PartialEq)]
pub struct Frontend {
    /// The module as parsed (constants, `static_if`s and conditional params still present).
    pub generic: Module,
    /// The module after specialization: no constants, all dtypes known.
    pub specialized: Module,
    /// The specialized module after e-graph rewriting (`egraph` pass).
    pub optimized: Module,
    /// The optimized module after kernel-graph fusion (`fusion` pass); equal to `optimized`
    /// for modules without a program or without fusible patterns.
    pub fused: Module,
    /// The fused module after mask-block splitting (`mask_split` pass), the last pass: what
    /// `kirc run`, `kirc compile`, `kirc bench` and the backends consume.
    pub output: Module,
}

/// Runs every pass in order, verifying after each one that changes the IR, and calls
/// `observe(pass, module)` after each pass (for dumps and snapshot tests).
pub fn run_observed(
    src: &str,
    defines: &Defines,
    observe: &mut dyn FnMut(&str, &Module),
) -> Result<Frontend, Diagnostics> {
    let generic = text::parse(src)?;
    verifier::verify(&generic)?;
    observe("parse", &generic);

    let specialized = passes::specialize(&generic, defines)?;
    verifier::verify(&specialized)?;
    observe("specialize", &specialized);

    let optimized = passes::egraph(&specialized);
    verifier::verify(&optimized)?;
    observe("egraph", &optimized);

    let fused = passes::fusion(&optimized);
    verifier::verify(&fused)?;
    observe("fusion", &fused);

    let output = passes::mask_split(&fused);
    verifier::verify(&output)?;
    observe("mask_split", &output);

    Ok(Frontend {
        generic,
        specialized,
        optimized,
        fused,
        output,
    })
}

/// Runs the whole pipeline; returns the generic and the specialized module (for tests and tools
/// that look at specialization itself; what runs is [`output`]).
pub fn frontend(src: &str, defines: &Defines) -> Result<(Module, Module), Diagnostics> {
    let f = run_observed(src, defines, &mut |_, _| {})?;
    Ok((f.generic, f.specialized))
}

/// Runs the whole pipeline; returns the module the backends and the interpreter run
/// ([`Frontend::output`]).
pub fn output(src: &str, defines: &Defines) -> Result<Module, Diagnostics> {
    Ok(run_observed(src, defines, &mut |_, _| {})?.output)
}

/// Why [`dump_after`] produced no text.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DumpError {
    /// The pass name is not in [`PASSES`].
    #[error("unknown pass `{0}` (passes: {passes})", passes = PASSES.join(", "))]
    UnknownPass(String),
    /// The input failed before or in the pass.
    #[error("{0}")]
    Failed(Diagnostics),
}

/// The canonical IR text right after `pass` (one of [`PASSES`]).
pub fn dump_after(src: &str, defines: &Defines, pass: &str) -> Result<String, DumpError> {
    if !PASSES.contains(&pass) {
        return Err(DumpError::UnknownPass(pass.to_string()));
    }
    let mut dump = None;
    run_observed(src, defines, &mut |name, m| {
        if name == pass {
            dump = Some(text::print(m));
        }
    })
    .map_err(DumpError::Failed)?;
    // Every pass in PASSES is observed once the run succeeds.
    Ok(dump.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "module m\n\nconst N: int = 4 where N > 0\n\n\
        kernel @k(x: in tensor<f32>[R], y: out tensor<f32>[R]) grid [cdiv(R, N), 1, 1] {\n\
        \x20 %i = program_id 0 : i32\n\
        \x20 %n = const N : i32\n\
        \x20 %o = mul %i, %n : i32\n\
        \x20 %t = load x[%o] other 0.0 : tile<N x f32>\n\
        \x20 store y[%o], %t guard\n\
        }\n";

    #[test]
    fn dump_after_each_pass() {
        let parsed = dump_after(SRC, &[], "parse").unwrap();
        assert!(parsed.contains("const N: int = 4"), "{parsed}");
        let spec = dump_after(SRC, &[("N".into(), "8".into())], "specialize").unwrap();
        assert!(!spec.contains("const N"), "{spec}");
        assert!(spec.contains("tile<8xf32>"), "{spec}");
        assert!(spec.contains("cdiv(R, 8)"), "{spec}");
        let err = dump_after(SRC, &[], "no-such-pass").unwrap_err();
        assert!(matches!(err, DumpError::UnknownPass(_)));
        // The message lists every pass.
        let msg = err.to_string();
        for p in PASSES {
            assert!(msg.contains(p), "{msg}");
        }
        // Every pass is dumpable.
        for p in PASSES {
            assert!(!dump_after(SRC, &[], p).unwrap().is_empty(), "{p}");
        }
    }

    #[test]
    fn frontend_reports_where_violations() {
        let err = frontend(SRC, &[("N".into(), "0".into())]).unwrap_err();
        assert!(err.0[0].message.contains("does not satisfy"), "{err:?}");
    }

    #[test]
    fn every_builtin_specializes_with_defaults() {
        for (name, src) in crate::oplib::builtins() {
            if let Err(d) = frontend(src, &[]) {
                panic!("{name}: {}", d.render(&format!("{name}.kir"), src));
            }
        }
    }
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
