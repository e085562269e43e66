//! `erf` and `pow` on one f32 register: PTX has neither instruction, so both are sequences of
//! FMA-class and special-function instructions, without branches (every lane runs the same
//! code and selects its interval's coefficients with `selp`).
//!
//! `erf` follows the f32 version of fdlibm's `erf` (Sun Microsystems, 1993; FreeBSD's msun
//! `s_erff.c`), with its coefficients rounded to f32: for a = |x|, erf(a) = a + a·P(a²)/Q(a²)
//! below 0.84375 and erx + P(a−1)/Q(a−1) below 1.25 (one Horner evaluation whose coefficients
//! are picked per lane), and 1 − exp(−a² − 0.5625 + R(1/a²)/S(1/a²))/a above, with a second
//! coefficient set from 1/0.35 on; −a² enters exactly as −p − e with p = a·a and
//! e = fma(a, a, −p). Divisions are `div.full.f32` (≤ 2 ulp) and the exponential is
//! `ex2.approx.f32` (≤ 2⁻²² relative); a model of this exact sequence with those errors at
//! their worst stays within 1.2 ulp of erf over f32 (docs/ir.md). a is clamped to 6 (erf rounds
//! to 1 from 3.92 on), so ±∞ give ±1, and `min.NaN` keeps a NaN a NaN.
//!
//! `pow` is 2^(y·log₂|x|) with `lg2.approx.f32` and `ex2.approx.f32` (subnormals kept), then
//! C's special cases: the sign of an odd integer power of a negative x, NaN for a finite
//! x < 0 and a non-integer y, and 1 for y = ±0, x = 1, and x = −1 with y = ±∞. Zeros and
//! infinities of x and y need no case of their own: the logarithm and exponential of ±0 and ±∞
//! give them.

use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{f32_lit, Builder, Operand, PtxInst, Reg, RegClass};

/// fdlibm's erf coefficients, constant term first (f32 bit patterns of the f64 values).
const PP: [u32; 7] = [
    0x3E03_75D4,
    0xBEA6_6BEB,
    0xBCE9_528F,
    0xBBBD_1489,
    0xB7C7_56B1,
    0,
    0,
];
const QQ: [u32; 6] = [
    0x3ECB_BBCE,
    0x3D85_2A63,
    0x3BA6_8116,
    0x390A_EE49,
    0xB684_E21A,
    0,
];
const PA: [u32; 7] = [
    0xBB1A_CDC6,
    0x3ED4_6805,
    0xBEBE_9208,
    0x3EA2_FE54,
    0xBDE3_1CC2,
    0x3D11_51B3,
    0xBB0D_F9C0,
];
const QA: [u32; 6] = [
    0x3DD9_F331,
    0x3F0A_5785,
    0x3D93_1AE7,
    0x3E01_3307,
    0x3C5F_6E13,
    0x3C44_5AA3,
];
const RA: [u32; 8] = [
    0xBC21_A093,
    0xBF31_A0B7,
    0xC128_F022,
    0xC279_8057,
    0xC322_658C,
    0xC338_9AE7,
    0xC2A2_932B,
    0xC11D_077E,
];
const SA: [u32; 8] = [
    0x419D_35CE,
    0x4309_A863,
    0x43D9_486F,
    0x4421_58C9,
    0x43D6_810B,
    0x42D9_451F,
    0x40D2_3F7C,
    0xBD77_7F97,
];
const RB: [u32; 8] = [
    0xBC21_A092,
    0xBF4C_9DD4,
    0xC18E_104B,
    0xC320_A2EA,
    0xC41F_6441,
    0xC480_230B,
    0xC3F1_C275,
    0,
];
const SB: [u32; 8] = [
    0x41F2_B459,
    0x43A2_E571,
    0x44C0_1759,
    0x4547_FDBB,
    0x451F_90CE,
    0x43ED_43A7,
    0xC1B3_8712,
    0,
];
/// erf(1) rounded to 24 bits.
const ERX: u32 = 0x3F58_560B;
const ONE: u32 = 0x3F80_0000;

fn f(c: &mut Builder) -> Reg {
    c.reg(RegClass::F32)
}

fn ins3(c: &mut Builder, m: &str, d: Reg, a: impl Into<Operand>, b: impl Into<Operand>) {
    c.ins(PtxInst::new(m).op(d).op(a).op(b));
}

/// Σ cᵢuⁱ by Horner's rule with FMAs, where each coefficient is `lo[i]` in the lanes where `p`
/// holds and `hi[i]` elsewhere; with `monic`, 1 + u·Σ cᵢuⁱ (the denominators).
fn horner(c: &mut Builder, u: Reg, p: Reg, lo: &[u32], hi: &[u32], monic: bool) -> Reg {
    let coef = |c: &mut Builder, i: usize| {
        let k = f(c);
        c.ins(
            PtxInst::new("selp.f32")
                .op(k)
                .op(Operand::F32(lo[i]))
                .op(Operand::F32(hi[i]))
                .op(p),
        );
        k
    };
    let n = lo.len();
    let acc = coef(c, n - 1);
    for i in (0..n - 1).rev() {
        let k = coef(c, i);
        c.ins(PtxInst::new("fma.rn.f32").op(acc).op(acc).op(u).op(k));
    }
    if monic {
        let one = Operand::F32(ONE);
        c.ins(PtxInst::new("fma.rn.f32").op(acc).op(acc).op(u).op(one));
    }
    acc
}

/// r = erf(x) (see the module doc).
pub(super) fn erf(c: &mut Builder, r: Reg, x: Reg) {
    let a = f(c);
    c.ins(PtxInst::new("abs.f32").op(a).op(x));
    // Below 1.25: a + a·P(a²)/Q(a²) below 0.84375, erx + P(a−1)/Q(a−1) above.
    let small = c.reg(RegClass::Pred);
    let (sq, am1, u) = (f(c), f(c), f(c));
    c.ins(
        PtxInst::new("setp.lt.f32")
            .op(small)
            .op(a)
            .op(Operand::F32(0x3F58_0000)),
    );
    ins3(c, "mul.f32", sq, a, a);
    ins3(c, "sub.f32", am1, a, Operand::F32(ONE));
    c.ins(PtxInst::new("selp.f32").op(u).op(sq).op(am1).op(small));
    let p = horner(c, u, small, &PP, &PA, false);
    let q = horner(c, u, small, &QQ, &QA, true);
    ins3(c, "div.full.f32", p, p, q);
    let (ya, yab) = (f(c), f(c));
    c.ins(PtxInst::new("fma.rn.f32").op(ya).op(a).op(p).op(a));
    ins3(c, "add.f32", yab, p, Operand::F32(ERX));
    c.ins(PtxInst::new("selp.f32").op(yab).op(ya).op(yab).op(small));
    // From 1.25 on: 1 − exp(−a² − 0.5625 + R(1/a²)/S(1/a²))/a, a clamped to 6.
    let (ac, sq2, s) = (f(c), f(c), f(c));
    c.need(Isa::MINMAX_NAN)
        .ins(PtxInst::new("min.NaN.f32").op(ac).op(a).op(f32_lit(6.0)));
    ins3(c, "mul.f32", sq2, ac, ac);
    c.ins(PtxInst::new("rcp.approx.f32").op(s).op(sq2));
    let mid = c.reg(RegClass::Pred);
    c.ins(
        PtxInst::new("setp.lt.f32")
            .op(mid)
            .op(ac)
            .op(Operand::F32(0x4036_DB6E)),
    );
    let rr = horner(c, s, mid, &RA, &RB, false);
    let ss = horner(c, s, mid, &SA, &SB, true);
    ins3(c, "div.full.f32", rr, rr, ss);
    // t = R/S − e − 0.5625 − p, where a² = p + e exactly.
    let (np, e, t) = (f(c), f(c), f(c));
    c.ins(PtxInst::new("neg.f32").op(np).op(sq2));
    c.ins(PtxInst::new("fma.rn.f32").op(e).op(ac).op(ac).op(np));
    ins3(c, "sub.f32", t, rr, e);
    ins3(c, "add.f32", t, t, f32_lit(-0.5625));
    ins3(c, "sub.f32", t, t, sq2);
    ins3(c, "mul.f32", t, t, f32_lit(std::f32::consts::LOG2_E));
    c.ins(PtxInst::new("ex2.approx.f32").op(t).op(t));
    ins3(c, "div.full.f32", t, t, ac);
    ins3(c, "sub.f32", t, Operand::F32(ONE), t);
    let below = c.reg(RegClass::Pred);
    c.ins(
        PtxInst::new("setp.lt.f32")
            .op(below)
            .op(a)
            .op(f32_lit(1.25)),
    );
    c.ins(PtxInst::new("selp.f32").op(t).op(yab).op(t).op(below));
    // copysign d, a, b: b with the sign of a.
    c.ins(PtxInst::new("copysign.f32").op(r).op(x).op(t));
}

/// r = pow(x, y) (see the module doc).
pub(super) fn pow(c: &mut Builder, r: Reg, x: Reg, y: Reg) {
    let pred = |c: &mut Builder| c.reg(RegClass::Pred);
    let (ax, m) = (f(c), f(c));
    c.ins(PtxInst::new("abs.f32").op(ax).op(x));
    c.ins(PtxInst::new("lg2.approx.f32").op(m).op(ax));
    ins3(c, "mul.f32", m, y, m);
    c.ins(PtxInst::new("ex2.approx.f32").op(m).op(m));
    // y an integer (±∞ counts: the C cases treat them so), odd when below 2²⁴.
    let (yi, ay) = (f(c), f(c));
    let (int, odd, big) = (pred(c), pred(c), pred(c));
    c.ins(PtxInst::new("cvt.rzi.f32.f32").op(yi).op(y));
    c.ins(PtxInst::new("setp.eq.f32").op(int).op(yi).op(y));
    c.ins(PtxInst::new("abs.f32").op(ay).op(y));
    c.ins(
        PtxInst::new("setp.lt.f32")
            .op(big)
            .op(ay)
            .op(f32_lit(16_777_216.0)),
    );
    let k = c.reg(RegClass::B32);
    c.ins(PtxInst::new("cvt.rzi.s32.f32").op(k).op(y));
    ins3(c, "and.b32", k, k, 1);
    c.ins(PtxInst::new("setp.eq.b32").op(odd).op(k).op(1));
    ins3(c, "and.pred", odd, odd, int);
    ins3(c, "and.pred", odd, odd, big);
    // A negative sign bit of x (−0 and −∞ included) with an odd y negates.
    let (xb, neg) = (c.reg(RegClass::B32), pred(c));
    c.ins(PtxInst::new("mov.b32").op(xb).op(x));
    c.ins(PtxInst::new("setp.lt.s32").op(neg).op(xb).op(0));
    ins3(c, "and.pred", neg, neg, odd);
    let mn = f(c);
    c.ins(PtxInst::new("neg.f32").op(mn).op(m));
    c.ins(PtxInst::new("selp.f32").op(m).op(mn).op(m).op(neg));
    // A finite x < 0 with a non-integer y is NaN.
    let (lt0, fin) = (pred(c), pred(c));
    c.ins(PtxInst::new("setp.lt.f32").op(lt0).op(x).op(f32_lit(0.0)));
    c.ins(
        PtxInst::new("setp.gt.f32")
            .op(fin)
            .op(x)
            .op(f32_lit(f32::NEG_INFINITY)),
    );
    ins3(c, "and.pred", lt0, lt0, fin);
    c.ins(PtxInst::new("not.pred").op(int).op(int));
    ins3(c, "and.pred", lt0, lt0, int);
    c.ins(
        PtxInst::new("selp.f32")
            .op(m)
            .op(Operand::F32(0x7FFF_FFFF))
            .op(m)
            .op(lt0),
    );
    // 1 for y = ±0, x = 1, and x = −1 with y = ±∞ (whatever the other operand, NaN included).
    let (one, p, q) = (pred(c), pred(c), pred(c));
    c.ins(PtxInst::new("setp.eq.f32").op(one).op(y).op(f32_lit(0.0)));
    c.ins(PtxInst::new("setp.eq.f32").op(p).op(x).op(f32_lit(1.0)));
    ins3(c, "or.pred", one, one, p);
    c.ins(PtxInst::new("setp.eq.f32").op(p).op(x).op(f32_lit(-1.0)));
    c.ins(
        PtxInst::new("setp.eq.f32")
            .op(q)
            .op(ay)
            .op(f32_lit(f32::INFINITY)),
    );
    ins3(c, "and.pred", p, p, q);
    ins3(c, "or.pred", one, one, p);
    c.ins(
        PtxInst::new("selp.f32")
            .op(r)
            .op(f32_lit(1.0))
            .op(m)
            .op(one),
    );
}

#[cfg(test)]
#[path = "special_tests.rs"]
mod tests;
