//! Typed entity references (cranelift-entity) for the IR's arenas.

use cranelift_entity::entity_impl;

/// An SSA value: an op result or a block argument. Printed `%vN` (or `%name`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "%v");

/// An operation inside a kernel body.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Op(u32);
entity_impl!(Op, "op");

/// A block: the body of a region (kernel body, `for` body, `if` branch). Printed `^bbN` in debug output.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Block(u32);
entity_impl!(Block, "^bb");

/// A kernel of a module. Printed `@name` in text.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId(u32);
entity_impl!(KernelId, "@k");
