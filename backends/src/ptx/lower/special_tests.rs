//! Tests of the `erf` and `pow` sequences without a GPU: the emitted PTX text runs on a small
//! evaluator of the instructions they use, each with its PTX semantics (`selp d, a, b, p` is
//! p ? a : b; `copysign d, a, b` gives b with a's sign; `min.NaN` propagates NaN). The
//! approximate instructions (`ex2.approx`, `lg2.approx`, `rcp.approx`, `div.full`) are taken
//! either correctly rounded or off by their documented worst error in the direction that hurts;
//! the results are compared with f64 references (`erf.rs`'s erf, the C library's pow).

use super::{erf, pow};
use crate::ptx::emit::{Builder, Reg, RegClass};
use std::collections::HashMap;

/// A register's value: f32 and b32 registers hold 32 bits, predicates a bool.
#[derive(Clone, Copy, Debug)]
enum V {
    B(u32),
    P(bool),
}

/// How the approximate instructions err: not at all, or by their worst case (relative 2⁻²²
/// for ex2/lg2, 2 ulp for div.full) with the given sign.
#[derive(Clone, Copy)]
struct Approx(f64);

/// An operand: a register (by name, numbered on first sight) or an immediate's bits.
#[derive(Clone, Copy)]
enum Arg {
    R(usize),
    I(u32),
}

/// The instructions of a sequence, parsed once.
struct Prog {
    insts: Vec<(String, Vec<Arg>)>,
    names: HashMap<String, usize>,
}

impl Prog {
    fn parse(text: &str) -> Prog {
        let mut p = Prog {
            insts: vec![],
            names: HashMap::new(),
        };
        for l in text.lines() {
            let l = l.trim().trim_end_matches(';');
            if l.is_empty() || l.starts_with('.') || l.starts_with("//") {
                continue;
            }
            let (op, rest) = l.split_once(' ').expect("operands");
            let args = rest.split(", ").map(|a| p.arg(a)).collect();
            p.insts.push((op.to_string(), args));
        }
        p
    }

    fn arg(&mut self, s: &str) -> Arg {
        if let Some(h) = s.strip_prefix("0f") {
            return Arg::I(u32::from_str_radix(h, 16).expect("f32 literal"));
        }
        if s.starts_with('%') {
            let n = self.names.len();
            return Arg::R(*self.names.entry(s.to_string()).or_insert(n));
        }
        Arg::I(s.parse::<i64>().expect("integer literal") as u32)
    }
}

struct Sim<'a> {
    regs: Vec<Option<V>>,
    approx: Approx,
    prog: &'a Prog,
}

fn fv(b: u32) -> f32 {
    f32::from_bits(b)
}

impl Sim<'_> {
    fn get(&self, a: Arg) -> V {
        match a {
            Arg::I(b) => V::B(b),
            Arg::R(i) => self.regs[i].expect("a register read before it is set"),
        }
    }

    fn f(&self, a: Arg) -> f32 {
        match self.get(a) {
            V::B(b) => fv(b),
            V::P(_) => panic!("a predicate read as f32"),
        }
    }

    fn u(&self, a: Arg) -> u32 {
        match self.get(a) {
            V::B(b) => b,
            V::P(_) => panic!("a predicate read as b32"),
        }
    }

    fn p(&self, a: Arg) -> bool {
        match self.get(a) {
            V::P(p) => p,
            V::B(_) => panic!("a b32 read as a predicate"),
        }
    }

    /// Perturbs an approximate result by `rel` (relative) in the configured direction.
    fn off(&self, x: f64, rel: f64) -> f32 {
        (x * (1.0 + self.approx.0 * rel)) as f32
    }

    fn run(&mut self) {
        for (op, a) in &self.prog.insts {
            let a = &a[..];
            let f1 = |s: &Sim| s.f(a[1]) as f64;
            let r = match op.as_str() {
                "abs.f32" => V::B(self.f(a[1]).abs().to_bits()),
                "neg.f32" => V::B((-self.f(a[1])).to_bits()),
                "mul.f32" => V::B((self.f(a[1]) * self.f(a[2])).to_bits()),
                "add.f32" => V::B((self.f(a[1]) + self.f(a[2])).to_bits()),
                "sub.f32" => V::B((self.f(a[1]) - self.f(a[2])).to_bits()),
                "fma.rn.f32" => V::B(self.f(a[1]).mul_add(self.f(a[2]), self.f(a[3])).to_bits()),
                "div.full.f32" => {
                    let q = self.f(a[1]) as f64 / self.f(a[2]) as f64;
                    V::B(self.off(q as f32 as f64, 2.0 * 2f64.powi(-24)).to_bits())
                }
                "rcp.approx.f32" => V::B(self.off(1.0 / f1(self), 2f64.powi(-23)).to_bits()),
                "ex2.approx.f32" => V::B(self.off(f1(self).exp2(), 2f64.powi(-22)).to_bits()),
                "lg2.approx.f32" => V::B(self.off(f1(self).log2(), 2f64.powi(-22)).to_bits()),
                "min.NaN.f32" => {
                    let (x, y) = (self.f(a[1]), self.f(a[2]));
                    V::B(
                        if x.is_nan() || y.is_nan() {
                            f32::NAN
                        } else {
                            x.min(y)
                        }
                        .to_bits(),
                    )
                }
                "copysign.f32" => V::B(self.f(a[2]).copysign(self.f(a[1])).to_bits()),
                "selp.f32" => {
                    let pick = if self.p(a[3]) { a[1] } else { a[2] };
                    V::B(self.u(pick))
                }
                "setp.lt.f32" => V::P(self.f(a[1]) < self.f(a[2])),
                "setp.gt.f32" => V::P(self.f(a[1]) > self.f(a[2])),
                "setp.eq.f32" => V::P(self.f(a[1]) == self.f(a[2])),
                "setp.eq.b32" => V::P(self.u(a[1]) == self.u(a[2])),
                "setp.lt.s32" => V::P((self.u(a[1]) as i32) < (self.u(a[2]) as i32)),
                "cvt.rzi.f32.f32" => V::B(self.f(a[1]).trunc().to_bits()),
                // Saturating, NaN → 0 (PTX cvt to an integer).
                "cvt.rzi.s32.f32" => V::B(self.f(a[1]) as i32 as u32),
                "and.b32" => V::B(self.u(a[1]) & self.u(a[2])),
                "mov.b32" => V::B(self.u(a[1])),
                "and.pred" => V::P(self.p(a[1]) && self.p(a[2])),
                "or.pred" => V::P(self.p(a[1]) || self.p(a[2])),
                "not.pred" => V::P(!self.p(a[1])),
                other => panic!("the evaluator has no `{other}`"),
            };
            let Arg::R(d) = a[0] else {
                panic!("`{op}` writes an immediate")
            };
            self.regs[d] = Some(r);
        }
    }
}

/// The program `emit` writes on fresh registers, and the indices of its inputs and result.
fn program(n: usize, emit: impl Fn(&mut Builder, Reg, &[Reg])) -> (Prog, Vec<usize>, usize) {
    let mut b = Builder::default();
    let ins: Vec<Reg> = (0..n).map(|_| b.reg(RegClass::F32)).collect();
    let r = b.reg(RegClass::F32);
    emit(&mut b, r, &ins);
    let mut p = Prog::parse(&b.finish(crate::ptx::emit::Placed::default()));
    let mut index = |r: Reg| match p.arg(&r.to_string()) {
        Arg::R(i) => i,
        Arg::I(_) => unreachable!("a register"),
    };
    let ins: Vec<usize> = ins.into_iter().map(&mut index).collect();
    let r = index(r);
    (p, ins, r)
}

fn eval(p: &(Prog, Vec<usize>, usize), args: &[f32], approx: f64) -> f32 {
    let mut s = Sim {
        regs: vec![None; p.0.names.len()],
        approx: Approx(approx),
        prog: &p.0,
    };
    for (&r, a) in p.1.iter().zip(args) {
        s.regs[r] = Some(V::B(a.to_bits()));
    }
    s.run();
    s.f(Arg::R(p.2))
}

/// |got − want| in f32 ulps of want (0 when both are the same special value).
fn ulps(got: f32, want: f64) -> f64 {
    if (got.is_nan() && want.is_nan()) || got as f64 == want {
        return 0.0;
    }
    let w = (want as f32).abs();
    let ulp = if w == 0.0 {
        f32::from_bits(1) as f64
    } else {
        (f32::from_bits(w.to_bits() + 1) - w) as f64
    };
    (got as f64 - want).abs() / ulp
}

#[test]
fn erf_is_within_1_2_ulp() {
    let p = program(1, |b, r, x| erf(b, r, x[0]));
    let mut worst = (0.0, 0.0f32, 0.0);
    // Every 1999th f32 in [0, 6.5], both signs, under exact and worst-case approximations.
    let hi = 6.5f32.to_bits();
    for bits in (0..hi)
        .step_by(1999)
        .chain([0x3F58_0000, 0x3FA0_0000, 0x4036_DB6E])
    {
        let x = f32::from_bits(bits);
        let want = crate::interp::erf::erf(x as f64);
        for (sign, approx) in [(1.0, 0.0), (-1.0, 1.0), (1.0, -1.0)] {
            let xs = x * sign as f32;
            let got = eval(&p, &[xs], approx);
            let u = ulps(got, want * sign);
            if u > worst.0 {
                worst = (u, xs, approx);
            }
        }
    }
    assert!(
        worst.0 <= 1.2,
        "erf off by {} ulp at {:e} (approx {})",
        worst.0,
        worst.1,
        worst.2
    );
    for (x, want) in [
        (0.0f32, 0.0f32),
        (-0.0, -0.0),
        (f32::INFINITY, 1.0),
        (f32::NEG_INFINITY, -1.0),
        (100.0, 1.0),
        (f32::from_bits(1), f32::from_bits(1)),
    ] {
        let got = eval(&p, &[x], 0.0);
        assert_eq!(got.to_bits(), want.to_bits(), "erf({x:e}) = {got:e}");
    }
    assert!(eval(&p, &[f32::NAN], 0.0).is_nan());
}

#[test]
fn pow_keeps_the_c_special_cases() {
    let p = program(2, |b, r, a| pow(b, r, a[0], a[1]));
    let xs = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -8.0,
        1e-40,
        -1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let ys = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        2.5,
        1e10,
        -1e10,
        16777217.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    for &x in &xs {
        for &y in &ys {
            let want = ((x as f64).powf(y as f64)) as f32;
            let got = eval(&p, &[x, y], 0.0);
            let t = (y as f64 * (x as f64).abs().log2()).abs();
            let same = (got.is_nan() && want.is_nan())
                || got.to_bits() == want.to_bits()
                || (want.is_finite() && want != 0.0 && ulps(got, want as f64) <= 5.0 + 4.0 * t);
            assert!(same, "pow({x:e}, {y:e}) = {got:e}, want {want:e}");
        }
    }
}

#[test]
fn pow_error_grows_with_the_exponent_of_the_result() {
    let p = program(2, |b, r, a| pow(b, r, a[0], a[1]));
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut worst = 0.0f64;
    for _ in 0..100_000 {
        let x = (2f64.powf(next() * 40.0 - 20.0) * if next() < 0.2 { -1.0 } else { 1.0 }) as f32;
        let y = if next() < 0.5 {
            ((next() * 21.0).floor() - 10.0) as f32
        } else {
            (next() * 8.0 - 4.0) as f32
        };
        let want = (x as f64).powf(y as f64);
        if !want.is_finite() || want.abs() > 3e38 || want.abs() < 1.2e-38 {
            continue;
        }
        let t = (y as f64 * (x as f64).abs().log2()).abs();
        for approx in [0.0, 1.0, -1.0] {
            let got = eval(&p, &[x, y], approx);
            let u = ulps(got, want);
            // f32 rounding of y·log2|x| and lg2's 2⁻²² move the exponent by up to about
            // |t|·2⁻²¹, the result by that times ln 2: 3|t| ulp; ex2's 2⁻²² is 4 ulp below 1.
            worst = worst.max(u / (5.0 + 4.0 * t));
            assert!(
                u <= 5.0 + 4.0 * t,
                "pow({x:e}, {y:e}) = {got:e}, want {want:e}: {u} ulp (|y log2 x| = {t})"
            );
        }
    }
    eprintln!("pow: at most {worst:.2}·(5 + 4·|y log2 x|) ulp");
}
