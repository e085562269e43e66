//! Elementwise ops of the dispatcher: the unary and binary op families and `fma`, reading
//! their operands from the instance and binding the result; their semantics are in
//! [`super::math`] (`unary`, `binary`, `fma`), which knows nothing of the dispatcher.

use super::exec::{Flow, Instance};
use super::math::{binary, fma, unary};
use super::InterpError;
use kir_ir::OpData;

impl Instance<'_> {
    /// An elementwise unary op ([`super::math::unary`] has its semantics).
    pub(super) fn exec_unary(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let u = o
            .opcode
            .unary()
            .ok_or_else(|| self.fail(o.span, "internal: not a unary op"))?;
        let x = self.operand(o, 0)?;
        let r = self.m(o, unary(u, &x))?;
        self.set1(o, r)
    }

    /// An elementwise binary op ([`super::math::binary`] has its semantics).
    pub(super) fn exec_binary(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let b = o
            .opcode
            .binary()
            .ok_or_else(|| self.fail(o.span, "internal: not a binary op"))?;
        let (x, y) = (self.operand(o, 0)?, self.operand(o, 1)?);
        let r = self.m(o, binary(b, &x, &y))?;
        self.set1(o, r)
    }

    /// `fma a, b, c` ([`super::math::fma`] has its semantics).
    pub(super) fn exec_fma(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let [a, b, c] = self.operands3(o)?;
        let r = self.m(o, fma(&a, &b, &c))?;
        self.set1(o, r)
    }
}
