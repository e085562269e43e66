//! The IR editing toolkit for passes that restructure kernels: building ops and blocks
//! ([`build`]), cloning ops between kernels with renaming ([`clone`]), def-use queries and use
//! rewriting ([`uses`]), constant folding of integer scalars ([`fold`]), and clean-ups — common-subexpression elimination, dead-code elimination
//! and merging sibling loops ([`cleanup`]).
//!
//! Every helper keeps the kernel well formed as long as its stated preconditions hold; callers
//! verify the module afterwards and renumber it ([`crate::renumber::renumber_kernel`]).

pub mod build;
pub mod cleanup;
pub mod clone;
pub mod fold;
pub mod uses;

pub use build::{add_carried, append_if, iconst, insert_op, op2, simple, splice_ops, yield_block};
pub use cleanup::{cse, dce, merge_loops};
pub use clone::{rename_expr, Cloner};
pub use uses::{
    contains, def_data, def_op, for_each_use, is_pure, ops_in, parent_block, prints, reads_deep,
    region_inputs, replace_uses, slice_among, use_count, users, uses_deep, writes_memory,
};

#[cfg(test)]
mod tests;
