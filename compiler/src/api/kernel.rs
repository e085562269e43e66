//! [`Kernel`]: the settings of one compilation — the source, the constants, the target, the
//! backend and the lowering flags — and [`Kernel::compile`], which resolves them into the
//! compile plan and compiles exactly as `kirc compile` does (the same plan, the same pipeline,
//! the same on-disk cache), so the code and META.json are byte for byte kirc's.

use super::compiled::{Backend, CompiledKernel};
use super::error::Error;
use crate::cache;
use crate::compiled::Emit;
use crate::options::Fusion;
use crate::plan::{CompilePlan, Flags};
use crate::source::Source;
use kir_backends::Target;
use std::path::PathBuf;

/// Where the module comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Input {
    /// A built-in op by name.
    Op(String),
    /// A `.kir` file.
    Path(PathBuf),
    /// A path if one exists, else a built-in op (kirc's `FILE` argument).
    Load(String),
    /// Source text and the name its errors show.
    Text { name: String, text: String },
}

/// A kernel to compile: its source and every setting, built up by chained calls and compiled by
/// [`Kernel::compile`]. Settings not made are `kirc compile`'s defaults: target sm_90a, PTX,
/// the per-target configuration's tiles, warps and rings, fusion where the cost model says so,
/// and the on-disk cache of the environment (docs/cache.md).
///
/// ```
/// use kir_compiler::{Backend, Kernel, Target};
///
/// // A built-in op with a constant set, for sm_90a, 8 warps and a 3-deep ring.
/// let gemm = Kernel::op("gemm")
///     .define("DTYPE", "bf16")
///     .target(Target::Sm90a)
///     .warps(8)
///     .stages(3)
///     .cache(false)
///     .compile()?;
/// assert!(gemm.symbols().all(|s| s.contains("_WARPS_8")));
///
/// // Source text of your own, as CUDA C.
/// let src = r#"module scale
///
/// kernel @scale(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [cdiv(N, 256), 1, 1] {
///   %p = program_id 0 : i32
///   %b = const 256 : i32
///   %o = mul %p, %b : i32
///   %x = load x[%o] other 0.0 : tile<256xf32>
///   %y = add %x, %x : tile<256xf32>
///   store y[%o], %y guard
/// }
/// "#;
/// let cu = Kernel::source("scale.kir", src)
///     .target(Target::Sm80)
///     .backend(Backend::Cuda)
///     .cache(false)
///     .compile()?;
/// assert!(cu.code().contains("__global__"));
/// assert_eq!(cu.meta().grid(&[("N", 1000)])?, [4, 1, 1]);
/// # Ok::<(), kir_compiler::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a Kernel does nothing until compiled"]
pub struct Kernel {
    input: Input,
    defines: Vec<(String, String)>,
    target: Target,
    backend: Backend,
    kernel: Option<String>,
    flags: Flags,
    shapes: Vec<(String, Vec<usize>)>,
    cache: bool,
}

impl Kernel {
    fn new(input: Input) -> Kernel {
        Kernel {
            input,
            defines: Vec::new(),
            target: Target::Sm90a,
            backend: Backend::Ptx,
            kernel: None,
            flags: Flags::default(),
            shapes: Vec::new(),
            cache: true,
        }
    }

    /// The built-in op `name` (`gemm`, `attention_fwd`, ...; `kirc ops` lists them). An unknown
    /// name is an [`Error::Load`] listing the ops.
    pub fn op(name: impl Into<String>) -> Kernel {
        Kernel::new(Input::Op(name.into()))
    }

    /// The `.kir` file at `path` (at most 16 MiB). Its errors name the path as given.
    pub fn path(path: impl Into<PathBuf>) -> Kernel {
        Kernel::new(Input::Path(path.into()))
    }

    /// `kirc compile FILE`'s rule: the file `name` if it exists, else the built-in op of that
    /// name (`attention_fwd` and `attention_fwd.kir` both name the op).
    pub fn load(name: impl Into<String>) -> Kernel {
        Kernel::new(Input::Load(name.into()))
    }

    /// Module source `text`; errors show it as `name`.
    pub fn source(name: impl Into<String>, text: impl Into<String>) -> Kernel {
        Kernel::new(Input::Text {
            name: name.into(),
            text: text.into(),
        })
    }

    /// Sets the specialization constant `name` to `value` (`-D NAME=VALUE`: `128`, `bf16`,
    /// `true`); the last value given for a name wins. Setting a constant that a configuration
    /// row chooses keeps the row out (docs/configs.md).
    pub fn define(mut self, name: impl Into<String>, value: impl ToString) -> Kernel {
        self.defines
            .push((name.into(), value.to_string().trim().to_string()));
        self
    }

    /// The target (default sm_90a).
    pub fn target(mut self, target: Target) -> Kernel {
        self.target = target;
        self
    }

    /// The code to emit (default PTX).
    pub fn backend(mut self, backend: Backend) -> Kernel {
        self.backend = backend;
        self
    }

    /// Compiles only kernel `name` of the module, as the entry (`--kernel`).
    pub fn kernel(mut self, name: impl Into<String>) -> Kernel {
        self.kernel = Some(name.into());
        self
    }

    /// Warps per block: 1, 2, or a multiple of 4 up to 32 (`--warps`; PTX only).
    pub fn warps(mut self, warps: u32) -> Kernel {
        self.flags.warps = Some(warps);
        self
    }

    /// The depth of the pipelining ring, 1 to 16, 1 meaning none (`--stages`; PTX only).
    pub fn stages(mut self, stages: usize) -> Kernel {
        self.flags.stages = Some(stages);
        self
    }

    /// `true`: a producer warpgroup feeding the block's warps (sm_90a), or an error naming why
    /// the kernel does not qualify; `false`: one role (`--warp-specialize on|off`; PTX only).
    pub fn warp_specialize(mut self, on: bool) -> Kernel {
        self.flags.warp_specialize = Some(on);
        self
    }

    /// A persistent grid of `programs` programs (1 to 65535) walking every tile; 0 for one
    /// program per tile (`--persistent N|off`; PTX only).
    pub fn persistent(mut self, programs: u32) -> Kernel {
        self.flags.persistent = Some(programs);
        self
    }

    /// Pairs each TMA ring loop's dots asynchronously, or not (`--overlap on|off`; sm_90a).
    pub fn overlap(mut self, on: bool) -> Kernel {
        self.flags.overlap = Some(on);
        self
    }

    /// `true`: the persistent programs of a warp-specialized kernel in clusters of two that
    /// share their ring copies, or, where no kernel of the module qualifies, an error naming
    /// each kernel and why; `false`: no
    /// clusters (`--cluster on|off`; PTX on targets with clusters; default: the configuration's
    /// choice).
    pub fn cluster(mut self, on: bool) -> Kernel {
        self.flags.cluster = Some(on);
        self
    }

    /// `true`: a persistent grid's last tiles shared out by K iterations, so the last wave
    /// keeps every program busy (`--stream-k on|off`; PTX only; default: the configuration's
    /// choice).
    pub fn stream_k(mut self, on: bool) -> Kernel {
        self.flags.stream_k = Some(on);
        self
    }

    /// Whether the `fusion` pass's fused program is lowered (`--fuse`, `--no-fuse`; default:
    /// where the cost model estimates it faster).
    pub fn fusion(mut self, fusion: Fusion) -> Kernel {
        self.flags.fusion = fusion;
        self
    }

    /// The shape the caller will pass for the entry tensor `param`: the runtime dims it binds
    /// are features the configuration rows may read (a GEMM with few rows takes smaller tiles).
    /// The code still runs for every shape.
    pub fn shape(mut self, param: impl Into<String>, extents: &[usize]) -> Kernel {
        self.shapes.push((param.into(), extents.to_vec()));
        self
    }

    /// Whether the on-disk cache of the environment (docs/cache.md; `KIR_CACHE_DIR`) is read
    /// and written (default `true`, as `kirc compile`; `false` is `--no-cache`). A hit returns
    /// what compiling returns.
    pub fn cache(mut self, on: bool) -> Kernel {
        self.cache = on;
        self
    }

    /// Compiles: loads the source, resolves the compile plan (validating every setting against
    /// its range, the backend and the target, and applying the per-target configuration), runs
    /// the pipeline (through the on-disk cache when enabled) and types the result. The code and
    /// META.json are byte for byte what `kirc compile` writes for the same settings.
    pub fn compile(&self) -> Result<CompiledKernel, Error> {
        let src = self.read_source()?;
        let emit = match self.backend {
            Backend::Ptx => Emit::Ptx,
            Backend::Cuda => Emit::Cuda,
        };
        let plan = CompilePlan::resolve_for(
            &src.text,
            &self.defines,
            self.target,
            emit,
            self.flags.clone(),
            &self.shapes,
        )
        .map_err(|e| Error::compile(&src, e))?
        .with_kernel(self.kernel.as_deref());
        let store = if self.cache {
            cache::Cache::from_env()
        } else {
            None
        };
        let cached = cache::compile(&src.text, &plan, store.as_ref())
            .map_err(|e| Error::compile(&src, e))?;
        CompiledKernel::new(&src, &plan, self.backend, cached)
    }

    /// The source of the input, or why it cannot be read.
    fn read_source(&self) -> Result<Source, Error> {
        match &self.input {
            Input::Load(name) => Source::load(name).map_err(Error::Load),
            Input::Op(name) => {
                let op = name.strip_suffix(".kir").unwrap_or(name);
                match crate::oplib::builtin(op) {
                    Some(text) => Ok(Source {
                        name: format!("{op}.kir"),
                        text: text.to_string(),
                    }),
                    None => {
                        let names: Vec<&str> = crate::oplib::builtins().map(|(n, _)| n).collect();
                        Err(Error::Load(format!(
                            "{name}: no built-in op of that name (built-in ops: {})",
                            names.join(", ")
                        )))
                    }
                }
            }
            Input::Path(path) => {
                let shown = path.display().to_string();
                let text = crate::limits::read_source(path)
                    .map_err(|e| Error::Load(format!("{shown}: {e}")))?;
                Ok(Source { name: shown, text })
            }
            Input::Text { name, text } => Ok(Source {
                name: name.clone(),
                text: text.clone(),
            }),
        }
    }
}
