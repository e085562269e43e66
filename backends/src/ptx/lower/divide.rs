//! i32 `div` and `rem` by a power-of-two constant `2^k` (known while lowering, `statics.rs`),
//! with `div.s32`/`rem.s32`'s truncation toward zero, without a division instruction: ptxas
//! (13.0, sm_90a) expands a signed division by a constant into its general reciprocal sequence,
//! two `MUFU.RCP` and some twenty dependent instructions, which sat in every pipelined loop's
//! ring index (stage = i % S, phase = (i / S) % 2) between a consumer's wait for its wgmma group
//! and its next issue (docs/gpu-results/2026-12-04-x2-gemm-stalls.txt). A dividend that is never
//! negative (`sign.rs`) takes the unsigned form, one shift or mask; any other the signed form,
//! which biases a negative dividend by `2^k − 1` first (four or five instructions).

use super::ctx::Ctx;
use crate::ptx::emit::{Builder, Operand, PtxInst, Reg, RegClass};
use kir_ir::{OpData, Opcode};

/// `k` when the op's divisor (its second operand) is a constant `2^k` known while lowering.
pub(super) fn log2_divisor(c: &Ctx, op: &OpData) -> Option<u32> {
    let d = *c.values.statics.get(op.operands.get(1)?)?;
    (d > 0 && d <= i64::from(i32::MAX) && d.count_ones() == 1).then(|| d.trailing_zeros())
}

/// Lowers `r = x / 2^k` or `r = x % 2^k` (the op's opcode) for an op that `log2_divisor` accepts.
pub(super) fn lower(c: &mut Ctx, op: &OpData, r: Reg, x: Reg) {
    let k = log2_divisor(c, op).unwrap_or(0);
    let div = op.opcode == Opcode::Div;
    if op
        .operands
        .first()
        .is_some_and(|&v| super::sign::nonneg(c.k, v))
    {
        let m = if div { "div.u32" } else { "rem.u32" };
        let inst = PtxInst::new(m).op(r).op(x).op(1i64 << k);
        c.b.ins(inst.strength_reduced());
    } else {
        signed(&mut c.b, div, k, r, x);
    }
}

/// The signed form: `t = x + ((x >> 31) >>> (32 − k))` is `x` biased by `2^k − 1` when negative;
/// then `x / 2^k = t >> k` (arithmetic) and `x % 2^k = x − (t & −2^k)`.
fn signed(b: &mut Builder, div: bool, k: u32, r: Reg, x: Reg) {
    if k == 0 {
        let v = if div {
            Operand::Reg(x)
        } else {
            Operand::Imm(0)
        };
        b.ins(PtxInst::new("mov.b32").op(r).op(v));
        return;
    }
    let t = b.reg(RegClass::B32);
    b.ins(PtxInst::new("shr.s32").op(t).op(x).op(31));
    b.ins(PtxInst::new("shr.u32").op(t).op(t).op(i64::from(32 - k)));
    b.ins(PtxInst::new("add.s32").op(t).op(x).op(t));
    if div {
        b.ins(PtxInst::new("shr.s32").op(r).op(t).op(i64::from(k)));
    } else {
        let mask = Operand::Hex(!((1u32 << k) - 1));
        b.ins(PtxInst::new("and.b32").op(t).op(t).op(mask));
        b.ins(PtxInst::new("sub.s32").op(r).op(x).op(t));
    }
}

#[cfg(test)]
mod tests {
    //! The signed sequence runs on a small evaluator of the five instructions it uses, each with
    //! its PTX semantics, against Rust's `/` and `%` on i32 (which truncate, as `div.s32` does).

    use super::signed;
    use crate::ptx::emit::{Builder, Reg, RegClass};
    use std::collections::HashMap;

    /// Runs the instructions of `text` (other lines skipped) with `input` holding `x`; returns
    /// the register written last.
    fn run(text: &str, input: &str, x: i32) -> i32 {
        let mut regs: HashMap<String, u32> = HashMap::new();
        regs.insert(input.to_string(), x as u32);
        let val = |regs: &HashMap<String, u32>, s: &str| -> u32 {
            if let Some(h) = s.strip_prefix("0x") {
                u32::from_str_radix(h, 16).expect("hex")
            } else if s.starts_with('%') {
                regs[s]
            } else {
                s.parse::<i64>().expect("imm") as u32
            }
        };
        let mut last = String::new();
        let insts = text
            .lines()
            .map(str::trim)
            .filter(|l| l.ends_with(';') && !l.starts_with('.'));
        for line in insts {
            let line = line.trim_end_matches(';');
            let (op, rest) = line.split_once(' ').expect("operands");
            let a: Vec<&str> = rest.split(", ").collect();
            let (p, q) = (val(&regs, a[1]), a.get(2).map(|s| val(&regs, s)));
            let q = q.unwrap_or(0);
            let v = match op {
                "mov.b32" => p,
                "shr.s32" => ((p as i32) >> q) as u32,
                "shr.u32" => p >> q,
                "add.s32" => p.wrapping_add(q),
                "sub.s32" => p.wrapping_sub(q),
                "and.b32" => p & q,
                other => panic!("unexpected instruction {other}"),
            };
            regs.insert(a[0].to_string(), v);
            last = a[0].to_string();
        }
        regs[&last] as i32
    }

    #[test]
    fn signed_division_and_remainder_by_powers_of_two_truncate_like_div_s32() {
        let mut xs: Vec<i32> = vec![
            0,
            1,
            -1,
            7,
            -7,
            8,
            -8,
            9,
            -9,
            i32::MAX,
            i32::MIN,
            i32::MIN + 1,
        ];
        let mut s: u32 = 0x9e37_79b9;
        for _ in 0..2000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            xs.push(s as i32);
            xs.push((s as i32) >> (s % 31));
        }
        for k in 0..31 {
            let d = 1i32 << k;
            for div in [true, false] {
                let mut b = Builder::default();
                let x = b.reg(RegClass::B32);
                let r: Reg = b.reg(RegClass::B32);
                signed(&mut b, div, k, r, x);
                let (text, x_name) = (b.finish(crate::ptx::emit::Placed::default()), x.to_string());
                for &x in &xs {
                    let want = if div {
                        x.wrapping_div(d)
                    } else {
                        x.wrapping_rem(d)
                    };
                    assert_eq!(
                        run(&text, &x_name, x),
                        want,
                        "{x} {} 2^{k}:\n{text}",
                        if div { "/" } else { "%" }
                    );
                }
            }
        }
    }
}
