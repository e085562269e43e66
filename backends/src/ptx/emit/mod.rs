//! The emit layer of the PTX backend: typed instructions ([`PtxInst`] with its [`Operand`]s),
//! virtual registers ([`Reg`]), and the [`Builder`] that holds one kernel body as a list of
//! lines. Nothing here knows about IR or lowering; every PTX instruction's text comes from
//! [`PtxInst`]'s `Display`.

pub mod builder;
pub mod inst;
pub mod isa;

pub use builder::{f32_lit, Builder};
pub use inst::{Label, Operand, Placed, PtxInst};
pub use inst::{Reg, RegClass};
