//! The verifier: checks a [`Module`] for every structural, naming, scoping and typing rule of the IR
//! and reports all violations at once, each with the most precise span available.
//!
//! It works on generic modules (tile dims such as `BLOCK_M`, element types such as `DTYPE`) and on
//! specialized ones: a rule that needs a concrete shape or dtype is skipped while that fact is still
//! symbolic, but structure, names, arity and dominance are always checked. It never panics, whatever
//! the input: arenas are read with `.get()` and dangling references become diagnostics.
//!
//! Layout of the checks:
//! - `names`: constants, kernel signatures and params (name resolution in every constant
//!   expression outside kernel bodies); `program`: the entry program and its launches;
//! - `walk`: region structure, `yield` placement, SSA scoping and dominance inside a kernel body,
//!   filling the state `body` holds (with the accessors the type rules share); `table`:
//!   conformance of each op to its row of the op table;
//! - `rules` (with `rules_memory` and `rules_compute`): the type rule of every opcode, dispatched
//!   by one exhaustive `match`;
//! - `tune`: the `tune {…}` sets of int constants (non-empty, distinct, within the `where`);
//! - `limits`: the resource limits of tiles (element count, bytes against a block's registers);
//! - `common`: the diagnostics helpers and decidable facts (`dim_eq`, `ty_eq`, ...) every check
//!   uses.
//!
//! Ops and blocks that are left in a kernel's arenas but are not reachable from its body are
//! ignored (passes may detach them); every reachable op must sit in exactly one block.

mod body;
mod common;
pub mod limits;
mod names;
mod program;
mod rules;
mod rules_compute;
mod rules_memory;
pub mod rules_sched;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_more;
#[cfg(test)]
mod tests_tune;
mod tune;
mod walk;

use crate::error::Diagnostics;
use crate::module::Module;

/// Verifies `m`, returning every error found (never only the first).
///
/// A module that verifies can be specialized, printed and interpreted without structural surprises:
/// names resolve, every value is defined before use in an enclosing scope, every op matches its
/// row of the op table, and every type rule whose facts are known holds.
pub fn verify(m: &Module) -> Result<(), Diagnostics> {
    let mut errs = Vec::new();
    names::check_module(m, &mut errs);
    tune::check_tune(m, &mut errs);
    for (_, k) in m.kernels.iter() {
        let dims = names::kernel_dims(m, k);
        names::check_kernel_signature(m, k, &dims, &mut errs);
        walk::check_body(m, k, &dims, &mut errs);
    }
    if let Some(p) = &m.program {
        program::check_program(m, p, &mut errs);
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(errs))
    }
}
