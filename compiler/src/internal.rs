//! The compiler's internals, for kir's own crates: the command line (kirc/), the integration
//! tests (tests/) and the Python package (python/). **Unstable**: nothing here is covered by
//! semver, any item may change or go away in any release, and none of it is documented on
//! docs.rs (the module is `#[doc(hidden)]`). A framework uses the crate root instead
//! ([`crate::Kernel`], [`crate::CompiledKernel`], [`crate::KernelMeta`], [`crate::Error`]);
//! docs/api.md says what is stable and why this module exists.
//!
//! The modules keep their files where they were (compiler/src/plan.rs, compiler/src/cache/, …):
//! they are declared here so that their one public path is `kir_compiler::internal::NAME`, and
//! the crate root imports them privately so that the crate itself still names them
//! `crate::NAME`. The modules no outside crate needs (the configuration rows, the structural
//! analysis, the schedule search, the per-kernel split) are private modules of the root.

#[path = "cache/mod.rs"]
pub mod cache;
#[path = "compile.rs"]
pub mod compile;
#[path = "compiled.rs"]
pub mod compiled;
#[path = "cost.rs"]
pub mod cost;
#[path = "egraph/mod.rs"]
pub mod egraph;
#[path = "limits.rs"]
pub mod limits;
#[path = "npy.rs"]
pub mod npy;
#[path = "oplib.rs"]
pub mod oplib;
#[path = "options.rs"]
pub mod options;
#[path = "outfile.rs"]
pub mod outfile;
#[path = "pass/mod.rs"]
pub mod pass;
#[path = "passes/mod.rs"]
pub mod passes;
#[path = "pipeline.rs"]
pub mod pipeline;
#[path = "plan.rs"]
pub mod plan;
#[path = "source.rs"]
pub mod source;
#[path = "suggest.rs"]
pub mod suggest;
#[path = "traffic.rs"]
pub mod traffic;
#[path = "tune/mod.rs"]
pub mod tune;
