//! `kirc randn SHAPE -o FILE.npy`: a deterministic pseudo-random array, so examples and
//! scripts need no NumPy. Normal values come from Box–Muller over splitmix64; `--low/--high`
//! give uniform values instead (always for integer dtypes).

use crate::common::{self, CliError};
use kir_backends::interp::HostData;
use kir_compiler::internal::npy::{self, NpyDtype};
use kir_compiler::internal::outfile::{self, Staged};
use std::path::PathBuf;
use std::process::ExitCode;

/// Largest element count `randn` writes (keeps a typo from filling the disk).
const MAX_ELEMENTS: usize = 1 << 28;

/// Arguments of `kirc randn`.
#[derive(clap::Args)]
pub struct Args {
    /// Shape, dims separated by `x` or `,`: `1x2x300x64` or `1,2,300,64`.
    shape: String,
    /// The .npy file to write (parent directories are created).
    #[arg(short = 'o', long = "output", value_name = "FILE.npy")]
    output: PathBuf,
    /// Seed of the generator; the same seed gives the same array.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Standard deviation of the normal values.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Element type: f32, f64, f16, i32 or u8.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Uniform values from LOW (inclusive); default 0.
    #[arg(long, allow_hyphen_values = true)]
    low: Option<f64>,
    /// Uniform values up to HIGH (exclusive); default 1 for floats, 10 for integers.
    #[arg(long, allow_hyphen_values = true)]
    high: Option<f64>,
}

/// splitmix64: a small, fast generator with a 64-bit state (Steele, Lea, Flood 2014).
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller, one value per two uniforms).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Parses `1x2x300x64` / `1,2,300,64`.
fn parse_shape(s: &str) -> Result<Vec<usize>, String> {
    let dims: Result<Vec<usize>, _> = s
        .split(['x', ','])
        .map(|d| d.trim().parse::<usize>())
        .collect();
    let dims =
        dims.map_err(|_| format!("bad shape `{s}`: expected dims like 1x2x300x64 or 1,2,300,64"))?;
    let count = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match count {
        Some(c) if c <= MAX_ELEMENTS => Ok(dims),
        _ => Err(format!("shape `{s}` has more than {MAX_ELEMENTS} elements")),
    }
}

/// Runs `kirc randn`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    outfile::check_paths(&[("-o", &a.output)]).map_err(|e| CliError::Plain(e.to_string()))?;
    let shape = parse_shape(&a.shape).map_err(CliError::Plain)?;
    let dtype = match a.dtype.as_str() {
        "f32" => NpyDtype::F32,
        "f64" => NpyDtype::F64,
        "f16" => NpyDtype::F16,
        "i32" => NpyDtype::I32,
        "u8" => NpyDtype::U8,
        d => {
            return Err(CliError::Plain(format!(
                "--dtype {d}: expected f32, f64, f16, i32 or u8"
            )))
        }
    };
    let int = matches!(dtype, NpyDtype::I32 | NpyDtype::U8);
    let uniform = int || a.low.is_some() || a.high.is_some();
    let low = a.low.unwrap_or(0.0);
    let high = a.high.unwrap_or(if int { 10.0 } else { 1.0 });
    if uniform && !(low < high && low.is_finite() && high.is_finite()) {
        return Err(CliError::Plain(format!(
            "--low {low} --high {high}: need finite LOW < HIGH"
        )));
    }
    if int && (low.fract() != 0.0 || high.fract() != 0.0) {
        return Err(CliError::Plain(format!(
            "--low {low} --high {high}: integer dtypes need integer bounds"
        )));
    }
    let (lo_ok, hi_ok) = match dtype {
        NpyDtype::U8 => (0.0, 256.0),
        _ => (i32::MIN as f64, i32::MAX as f64 + 1.0),
    };
    if int && (low < lo_ok || high > hi_ok) {
        return Err(CliError::Plain(format!(
            "--low {low} --high {high}: out of range for {}",
            a.dtype
        )));
    }
    let count = shape.iter().product::<usize>();
    let mut rng = SplitMix64(a.seed);
    let data: Vec<f64> = (0..count)
        .map(|_| {
            if int {
                let range = (high - low) as u64;
                let k = ((rng.next_u64() as u128 * range as u128) >> 64) as u64;
                low + k as f64
            } else if uniform {
                low + (high - low) * rng.next_f64()
            } else {
                a.scale * rng.next_normal()
            }
        })
        .collect();
    // All or nothing: the file staged, the report written, then the file put in place.
    let bytes = npy::to_bytes(dtype, &shape, &HostData::F64(data));
    let staged = Staged::write(vec![(a.output.clone(), bytes)])
        .map_err(|e| CliError::Plain(e.to_string()))?;
    common::out(&format!(
        "wrote {} ({dtype} {shape:?}, seed {})\n",
        a.output.display(),
        a.seed
    ))?;
    staged
        .commit()
        .map_err(|e| CliError::Plain(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(parse_shape("1x2x300x64"), Ok(vec![1, 2, 300, 64]));
        assert_eq!(parse_shape("1,2, 3"), Ok(vec![1, 2, 3]));
        assert!(parse_shape("1xx2").is_err());
        assert!(parse_shape("").is_err());
        assert!(parse_shape("99999999999x99999999999").is_err());
    }

    #[test]
    fn normal_moments_are_plausible() {
        let mut r = SplitMix64(1);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| r.next_normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }

    #[test]
    fn splitmix_matches_reference() {
        // First outputs for seed 0 from the reference implementation.
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }
}
