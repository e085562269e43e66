//! The error function in f64, for the interpreter's `erf` (Rust's standard library has none).
//!
//! The algorithm is the one of FreeBSD's msun `s_erf.c` (Sun Microsystems' fdlibm, 1993, which
//! musl also uses), rewritten here: erf is odd, and for a = |x|
//! - a < 0.84375: erf(a) = a + a·P(a²)/Q(a²) (degree-4 and -5 polynomials);
//! - 0.84375 ≤ a < 1.25: erf(a) = erx + P(s)/Q(s) with s = a − 1 and erx = erf(1) rounded to 24
//!   bits (degree 6 each);
//! - 1.25 ≤ a < 6: erf(a) = 1 − erfc(a), erfc(a) = exp(−a² − 0.5625 + R(1/a²)/S(1/a²)) / a,
//!   with one pair of rational functions below 1/0.35 and another above; −a² is split as
//!   −z² + (z − a)(z + a) with z = a rounded to 32 significant bits, so it is exact;
//! - a ≥ 6: erf(a) rounds to 1 in f64.
//!
//! fdlibm states the error below one ulp of f64; the interpreter rounds the f64 result to the
//! op's dtype, so `erf` on f32 is correctly rounded except within 2⁻²⁹ ulp of a rounding
//! boundary. The coefficients are fdlibm's (their f64 values, given as decimal literals that
//! round to them).

// Coefficients of the four intervals, constant term first.
const PP: [f64; 5] = [
    1.283_791_670_955_125_585_61e-01,
    -3.250_421_072_470_014_993_70e-01,
    -2.848_174_957_559_851_047_66e-02,
    -5.770_270_296_489_441_591_57e-03,
    -2.376_301_665_665_016_260_84e-05,
];
const QQ: [f64; 5] = [
    3.979_172_239_591_553_528_19e-01,
    6.502_224_998_876_729_444_85e-02,
    5.081_306_281_875_765_627_76e-03,
    1.324_947_380_043_216_445_26e-04,
    -3.960_228_278_775_368_123_20e-06,
];
const ERX: f64 = 8.450_629_115_104_675_292_97e-01;
const PA: [f64; 7] = [
    -2.362_118_560_752_659_440_77e-03,
    4.148_561_186_837_483_316_66e-01,
    -3.722_078_760_357_013_238_47e-01,
    3.183_466_199_011_617_536_74e-01,
    -1.108_946_942_823_966_774_76e-01,
    3.547_830_432_561_823_593_71e-02,
    -2.166_375_594_868_790_843_00e-03,
];
const QA: [f64; 6] = [
    1.064_208_804_008_442_282_86e-01,
    5.403_979_177_021_710_489_37e-01,
    7.182_865_441_419_626_628_68e-02,
    1.261_712_198_087_616_421_12e-01,
    1.363_708_391_202_905_073_62e-02,
    1.198_449_984_679_910_741_70e-02,
];
const RA: [f64; 8] = [
    -9.864_944_034_847_148_227_05e-03,
    -6.938_585_727_071_817_643_72e-01,
    -1.055_862_622_532_329_098_14e+01,
    -6.237_533_245_032_600_603_96e+01,
    -1.623_966_694_625_734_703_55e+02,
    -1.846_050_929_067_110_359_94e+02,
    -8.128_743_550_630_659_342_46e+01,
    -9.814_329_344_169_145_485_92e+00,
];
const SA: [f64; 8] = [
    1.965_127_166_743_925_712_92e+01,
    1.376_577_541_435_190_426_00e+02,
    4.345_658_774_752_292_288_21e+02,
    6.453_872_717_332_678_803_36e+02,
    4.290_081_400_275_678_333_86e+02,
    1.086_350_055_417_794_351_34e+02,
    6.570_249_770_319_281_701_35e+00,
    -6.042_441_521_485_809_874_38e-02,
];
const RB: [f64; 7] = [
    -9.864_942_924_700_099_285_97e-03,
    -7.992_832_376_805_230_065_74e-01,
    -1.775_795_491_775_475_198_89e+01,
    -1.606_363_848_558_219_160_62e+02,
    -6.375_664_433_683_896_277_22e+02,
    -1.025_095_131_611_077_249_54e+03,
    -4.835_191_916_086_513_970_19e+02,
];
const SB: [f64; 7] = [
    3.033_806_074_348_245_829_24e+01,
    3.257_925_129_965_739_188_26e+02,
    1.536_729_586_084_436_959_94e+03,
    3.199_858_219_508_595_539_08e+03,
    2.553_050_406_433_164_425_83e+03,
    4.745_285_412_069_553_672_15e+02,
    -2.244_095_244_658_581_833_62e+01,
];
/// 2/√π − 1, for the linear term below 2⁻²⁸.
const EFX: f64 = 1.283_791_670_955_125_863_16e-01;

/// c₀ + c₁t + … by Horner's rule.
fn poly(c: &[f64], t: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &k| acc * t + k)
}

/// 1 + c₀t + c₁t² + … (the denominators, whose constant term is 1).
fn poly1(c: &[f64], t: f64) -> f64 {
    1.0 + t * poly(c, t)
}

/// erf(x) in f64 (odd; erf(±∞) = ±1; NaN for NaN).
pub(crate) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let y = if a < 0.843_75 {
        if a < f64::from_bits(0x3E30_0000_0000_0000) {
            // |x| < 2⁻²⁸: erf(x) = 2x/√π to within an ulp.
            return x + EFX * x;
        }
        let z = x * x;
        return x + x * (poly(&PP, z) / poly1(&QQ, z));
    } else if a < 1.25 {
        let s = a - 1.0;
        ERX + poly(&PA, s) / poly1(&QA, s)
    } else if a < 6.0 {
        let s = 1.0 / (a * a);
        let (r, q) = if a < 1.0 / 0.35 {
            (poly(&RA, s), poly1(&SA, s))
        } else {
            (poly(&RB, s), poly1(&SB, s))
        };
        // z: a with its low 32 bits cleared, so z·z is exact.
        let z = f64::from_bits(a.to_bits() & 0xFFFF_FFFF_0000_0000);
        let e = (-z * z - 0.5625).exp() * ((z - a) * (z + a) + r / q).exp();
        1.0 - e / a
    } else {
        1.0
    };
    y.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::erf;

    /// erf at f32 inputs, to 25 significant digits, computed independently of this file with
    /// 50-digit arbitrary-precision arithmetic (mpmath's `erf`).
    const TABLE: &[(f32, &str)] = &[
        (1.0e-30, "1.128379170673689629790735e-30"),
        (1.0e-8, "1.128379160237820904067229e-8"),
        (0.0009765625, "0.001101932430071814704171253"),
        (0.1, "0.1124629176829705090280039"),
        (0.25, "0.2763263901682369329850683"),
        (0.5, "0.5204998778130465376827467"),
        (0.6174, "0.6174107411345214746689505"),
        (0.84374994, "0.7672256282292339606995067"),
        (0.84375, "0.7672256612323416334589782"),
        (0.9, "0.796908200454968449313788"),
        (1.0, "0.8427007929497148693412206"),
        (1.2, "0.9103139909776065194773968"),
        (1.2499999, "0.9229001000609390579822303"),
        (1.25, "0.9229001282564582301365235"),
        (1.5, "0.9661051464753107270669763"),
        (2.0, "0.9953222650189527341620693"),
        (2.5, "0.9995930479825550410604358"),
        (2.8571427, "0.9999466876338588872528133"),
        (2.857143, "0.9999466877105127782393932"),
        (3.0, "0.9999779095030014145586272"),
        (3.5, "0.9999992569016276585872545"),
        (4.0, "0.9999999845827420997199811"),
        (5.0, "0.999999999998462540205572"),
        (5.9, "0.9999999999999999280959842"),
    ];

    #[test]
    fn matches_the_high_precision_table() {
        for &(x, want) in TABLE {
            let want: f64 = want.parse().expect("a table value");
            for (x, want) in [(x as f64, want), (-(x as f64), -want)] {
                let got = erf(x);
                let ulp = f64::EPSILON * want.abs();
                assert!(
                    (got - want).abs() <= 1.5 * ulp,
                    "erf({x}) = {got:e}, want {want:e} (off by {:.2} ulp)",
                    (got - want).abs() / ulp
                );
            }
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(erf(0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(erf(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert_eq!(erf(6.0), 1.0);
        assert_eq!(erf(-30.0), -1.0);
        assert!(erf(f64::NAN).is_nan());
        // Subnormal inputs stay proportional.
        let tiny = f64::from_bits(1);
        assert!(erf(tiny) >= tiny);
    }

    /// Monotone across every interval boundary (a wrong coefficient shows as a step).
    #[test]
    fn monotone_across_the_intervals() {
        let mut prev = erf(0.0);
        let mut x = 0.0f64;
        while x < 6.5 {
            x += 1.0 / 1024.0;
            let y = erf(x);
            assert!(y >= prev, "erf is not monotone at {x}: {y} < {prev}");
            prev = y;
        }
    }
}
