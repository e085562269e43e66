//! [`CompiledKernel`] and its [`Backend`]: what [`crate::Kernel::compile`] returns — the code, its typed launch
//! metadata, the symbols, the specialization compiled in and the reports `kirc compile
//! --report` prints — built from the compiler's internal result.

use super::error::Error;
use super::meta::KernelMeta;
use crate::cache::Cached;
use crate::plan::CompilePlan;
use crate::source::Source;
use kir_backends::Target;

/// The code a compilation emits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PTX for the target, scheduled and tuned per target (`kirc compile --emit ptx`).
    #[default]
    Ptx,
    /// One self-contained CUDA C file for NVRTC: scalar FP32, no warps, rings or warp roles
    /// (`--emit cuda`).
    Cuda,
}

/// A compiled module: PTX or CUDA C text, and everything needed to launch it.
///
/// ```
/// use kir_compiler::{Backend, Kernel, Target};
///
/// let k = Kernel::op("rmsnorm_fwd").target(Target::Sm90a).cache(false).compile()?;
/// assert_eq!(k.backend(), Backend::Ptx);
/// assert!(k.code().starts_with("//") || k.code().contains(".version"));
/// // Every symbol of the metadata is an entry of the code.
/// for symbol in k.symbols() {
///     assert!(k.code().contains(&format!(".entry {symbol}(")));
/// }
/// // The constants compiled in, in declaration order (DTYPE among them).
/// assert!(k.specialization().iter().any(|(name, _)| name == "DTYPE"));
/// # Ok::<(), kir_compiler::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledKernel {
    source_name: String,
    target: Target,
    backend: Backend,
    code: String,
    meta: KernelMeta,
    specialization: Vec<(String, String)>,
    configuration: String,
    report: String,
    cache: String,
}

impl CompiledKernel {
    /// Types the compiler's result of `src` under `plan`.
    pub(crate) fn new(
        src: &Source,
        plan: &CompilePlan,
        backend: Backend,
        cached: Cached,
    ) -> Result<CompiledKernel, Error> {
        let out = &cached.compiled;
        let json = out.meta.clone().ok_or_else(|| {
            Error::Compile("the backend produced no launch metadata (META.json)".into())
        })?;
        let meta: KernelMeta = serde_json::from_value(json)
            .map_err(|e| Error::Compile(format!("META.json does not fit its schema: {e}")))?;
        // The constants as the pipeline specialized them (the kernel symbols' suffix).
        let specialization = match kir_ir::text::parse(&src.text) {
            Ok(generic) => crate::passes::const_values(&generic, &plan.defines)
                .map_err(|d| Error::compile(src, crate::compiled::CompileError::Source(d)))?
                .into_iter()
                .map(|(n, v)| (n, v.to_string()))
                .collect(),
            Err(d) => {
                return Err(Error::compile(
                    src,
                    crate::compiled::CompileError::Source(d),
                ))
            }
        };
        // `kirc compile --report`, less its last line (what the cache did).
        let mut report = cached.report.clone();
        for t in &out.tried {
            report += &format!("schedule search: passed over {t}\n");
        }
        let configuration = plan.config_report();
        if !configuration.is_empty() {
            report += &configuration;
            report.push('\n');
        }
        if let Some(f) = &out.fusion {
            report += &format!("fusion: {f}\n");
        }
        Ok(CompiledKernel {
            source_name: src.name.clone(),
            target: plan.target,
            backend,
            code: out.text.clone(),
            meta,
            specialization,
            configuration,
            report,
            cache: cached.outcome.line(),
        })
    }

    /// The code: PTX text, or one CUDA C file (`kirc compile -o` writes exactly this).
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The typed launch metadata.
    pub fn meta(&self) -> &KernelMeta {
        &self.meta
    }

    /// META.json as `kirc compile --meta` writes it, byte for byte (pretty-printed, keys in
    /// order, a final newline).
    pub fn meta_json(&self) -> String {
        // Through a JSON value, whose keys are sorted as the compiler's document's are.
        let value = serde_json::to_value(&self.meta).unwrap_or(serde_json::Value::Null);
        serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
    }

    /// The symbol of every kernel, in the order of [`KernelMeta::kernels`]: the name to look a
    /// function up by in the loaded module.
    pub fn symbols(&self) -> impl Iterator<Item = &str> + '_ {
        self.meta.kernels.iter().map(|k| k.symbol.as_str())
    }

    /// Every specialization constant of the module with the value compiled in (what was
    /// defined, else the configuration row's choice, else the declared default), in declaration
    /// order, values as the kernel symbols spell them (`bf16`, `128`, `true`).
    pub fn specialization(&self) -> &[(String, String)] {
        &self.specialization
    }

    /// The configuration line(s) of the report: which per-target row applied and why, or why
    /// none did (docs/configs.md); empty when nothing was said.
    pub fn configuration(&self) -> &str {
        &self.configuration
    }

    /// `kirc compile --report`'s text without its last line: for PTX the backend's lowering
    /// decisions per kernel, the schedules the search passed over, the configuration and the
    /// fusion decision. Every line ends with a newline.
    pub fn report(&self) -> &str {
        &self.report
    }

    /// What the on-disk cache did, the report's last line: `cache: off`, `cache: hit KEY`,
    /// `cache: stored KEY`, ...
    pub fn cache_outcome(&self) -> &str {
        &self.cache
    }

    /// The target compiled for.
    pub fn target(&self) -> Target {
        self.target
    }

    /// The code's language.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The name the source goes by in messages (its path, or `<op>.kir`).
    pub fn source_name(&self) -> &str {
        &self.source_name
    }
}
