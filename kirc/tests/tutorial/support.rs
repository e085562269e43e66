//! Support of the tutorial test (kirc/tests/tutorial.rs): the float64 oracle of softmax
//! cross-entropy, written from the definition (not from the kernel's online form), its
//! comparison with the kernel's f32 outputs, the rounding of inputs to the kernel's dtype (the
//! `half` crate), a small seeded generator, and the few `.npy` files the test reads and writes
//! (C-order little-endian `<f4` and `<i4`, format 1.0), parsed here rather than with kir's
//! reader so that kirc's files are checked from the outside.

use std::path::Path;

/// lse and loss of each row of `x` ([r, v], row-major) in f64: lse = m + ln Σ exp(x − m) with m
/// the row's maximum (−∞ for a row that is −∞ everywhere); loss = lse − x[label], 0 where the
/// label is `ignore`, NaN where it is any other value outside [0, v). Returns (loss, lse).
pub fn xent(x: &[f64], labels: &[i32], r: usize, v: usize, ignore: i32) -> (Vec<f64>, Vec<f64>) {
    let mut loss = vec![0.0; r];
    let mut lse = vec![0.0; r];
    for i in 0..r {
        let row = &x[i * v..(i + 1) * v];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        lse[i] = if m == f64::NEG_INFINITY {
            f64::NEG_INFINITY
        } else {
            m + row.iter().map(|&a| (a - m).exp()).sum::<f64>().ln()
        };
        let y = labels[i];
        loss[i] = if y == ignore {
            0.0
        } else if y >= 0 && (y as usize) < v {
            lse[i] - row[y as usize]
        } else {
            f64::NAN
        };
    }
    (loss, lse)
}

/// `a` rounded to `dtype` (f32, f16 or bf16; round to nearest even), as f64.
pub fn round_to(a: f32, dtype: &str) -> f64 {
    match dtype {
        "f32" => f64::from(a),
        "f16" => half::f16::from_f32(a).to_f64(),
        "bf16" => half::bf16::from_f32(a).to_f64(),
        other => panic!("no dtype {other}"),
    }
}

/// The kernel's f32 `loss` and `lse` against the oracle's: the same NaNs and infinities, an
/// exact 0 where the oracle's loss is 0 (ignored rows), and every finite element within 2e-5
/// (the project's f32 tolerance, docs/testing.md) of its scale 1 + |ref|, as is the L2 norm of
/// the errors against that of the scales. The floor 1 is f32's: a loss near 0 (the label holds
/// nearly all the mass) is log s with s ≈ 1, which f32 knows only to about 1e-7 absolutely,
/// so a relative error of such a loss measures nothing. Relative to the loss itself, not to
/// lse, because the kernel computes it as (m − x[label]) + log s (lse − x[label] would cancel
/// for rows far from 0).
pub fn check_outputs(what: &str, loss: &[f32], lse: &[f32], ref_loss: &[f64], ref_lse: &[f64]) {
    for (name, got, want) in [("loss", loss, ref_loss), ("lse", lse, ref_lse)] {
        assert_eq!(got.len(), want.len(), "{what}: {name} length");
        let (mut d2, mut s2) = (0.0f64, 0.0f64);
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let g = f64::from(g);
            if w.is_nan() {
                assert!(g.is_nan(), "{what}: {name}[{i}] = {g}, expected NaN");
                continue;
            }
            if w.is_infinite() || w == 0.0 {
                assert_eq!(g, w, "{what}: {name}[{i}]");
                continue;
            }
            assert!(g.is_finite(), "{what}: {name}[{i}] = {g}, expected {w}");
            let scale = 1.0 + w.abs();
            let d = (g - w).abs();
            assert!(
                d <= 2e-5 * scale,
                "{what}: {name}[{i}] = {g}, expected {w} (error {d:.3e} over {:.3e})",
                2e-5 * scale
            );
            d2 += d * d;
            s2 += scale * scale;
        }
        if s2 > 0.0 {
            let l2 = (d2 / s2).sqrt();
            assert!(
                l2 <= 2e-5,
                "{what}: {name} L2 error {l2:.3e} of the scales'"
            );
        }
    }
}

/// A time-based seed (a fresh case per run).
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// SplitMix64: small, seeded, good enough for test inputs.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A standard normal value (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }
}

// ---- .npy files ----

/// Writes `data` of `shape` as an `.npy` of `descr` (`<f4` or `<i4`), from its bytes.
fn write(path: &Path, descr: &str, shape: &[usize], bytes: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(bytes);
    std::fs::write(path, out).expect("write .npy");
}

/// Writes an f32 array.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) {
    assert_eq!(shape.iter().product::<usize>(), data.len());
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    write(path, "<f4", shape, &bytes);
}

/// Writes an i32 array.
pub fn write_i32(path: &Path, shape: &[usize], data: &[i32]) {
    assert_eq!(shape.iter().product::<usize>(), data.len());
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    write(path, "<i4", shape, &bytes);
}

/// Reads an `.npy` of `descr`: its shape and its data bytes (checked to be complete).
fn read(path: &Path, descr: &str) -> (Vec<usize>, Vec<u8>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not an .npy", path.display());
    assert_eq!(b[6], 1, "{}: format 1.0 expected", path.display());
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).expect("ASCII header");
    assert!(
        header.contains(&format!("'descr': '{descr}'"))
            && header.contains("'fortran_order': False"),
        "{}: header {header}",
        path.display()
    );
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .expect("a shape");
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().expect("a dim"))
        .collect();
    let data = b[10 + hlen..].to_vec();
    assert_eq!(
        data.len(),
        4 * shape.iter().product::<usize>(),
        "{}",
        path.display()
    );
    (shape, data)
}

/// Reads an f32 array: its shape and values.
pub fn read_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let (shape, data) = read(path, "<f4");
    let v = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (shape, v)
}

/// Reads an i32 array: its shape and values.
pub fn read_i32(path: &Path) -> (Vec<usize>, Vec<i32>) {
    let (shape, data) = read(path, "<i4");
    let v = data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (shape, v)
}
