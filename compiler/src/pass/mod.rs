//! The pass manager: the [`Pass`] trait every pass implements, the context a pass runs in,
//! and [`PassManager`], which holds the passes in pipeline order ([`registry::standard`], the
//! one list) and runs them, verifying after each and handing each result to an observer (the
//! dumps, the interpreter's before/after checks and the golden snapshots are driven from it).
//!
//! Adding a pass is one file holding the pass and its `impl Pass`, plus one line in
//! [`registry::standard`]; a framework or a test can also insert its own pass into a
//! [`PassManager`] with [`PassManager::insert_after`].

mod manager;
pub mod registry;
mod types;

pub use manager::PassManager;
pub use types::{Level, Pass, PassContext, Phase, Preserves};
