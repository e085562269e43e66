//! Global buffers shared by all program instances of a launch, and the addressing of tensor
//! accesses (`name[offsets]`) with their bounds checks.
//!
//! Elements live in relaxed atomics (`AtomicU32`, or `AtomicU64` for i64), so concurrent
//! instances may read and write one buffer without undefined behaviour. Encoding: floats as
//! f32 bits (the value is exact in the buffer's dtype), i32 as its two's complement bits, u8 as
//! 0..=255, i1 as 0/1, i64 as its bits.

use super::tile::{poison, round_f32, scalar_from_f64, scalar_from_int, wrap_int, Scalar};
use super::{HostData, HostTensor};
use kir_ir::Dtype;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Most elements one buffer may hold (a guard against absurd shapes, not a real limit).
const MAX_ELEMS: usize = 1 << 34;

/// Element storage.
#[derive(Debug)]
enum Storage {
    W32(Vec<AtomicU32>),
    W64(Vec<AtomicU64>),
}

/// A global tensor: dtype, logical shape, element strides and its storage. Element at index
/// `i` lives at address `Σ i_d · strides[d]`, always inside the storage.
#[derive(Debug)]
pub(crate) struct Buffer {
    /// The program-level name (entry param or temp), for messages.
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    storage: Storage,
}

/// C-contiguous strides for `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1].saturating_mul(shape[d + 1]);
    }
    st
}

/// The storage slots a buffer of `shape` with `strides` needs (one past its last address).
/// Fails on a rank mismatch or an absurdly large shape.
pub(crate) fn storage_len(name: &str, shape: &[usize], strides: &[usize]) -> Result<usize, String> {
    if strides.len() != shape.len() {
        return Err(format!(
            "`{name}` has {} dims but {} strides",
            shape.len(),
            strides.len()
        ));
    }
    let mut span: usize = 1;
    for (&n, &s) in shape.iter().zip(strides) {
        if n == 0 {
            span = 0;
            break;
        }
        span = (n - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(span))
            .unwrap_or(usize::MAX);
    }
    let count = shape
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .unwrap_or(usize::MAX);
    if span > MAX_ELEMS || count > MAX_ELEMS {
        return Err(format!(
            "`{name}` of shape {shape:?} is too large to allocate"
        ));
    }
    Ok(span)
}

/// Bytes of one element of `d` in GPU memory.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn native_width(d: Dtype) -> usize {
    match d {
        Dtype::U8 | Dtype::I1 => 1,
        Dtype::F16 | Dtype::Bf16 => 2,
        Dtype::F32 | Dtype::I32 => 4,
        Dtype::I64 => 8,
    }
}

/// The native bits of `s` (a value of dtype `d`) in its low [`native_width`] bytes.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn native_bits(d: Dtype, s: Scalar) -> u64 {
    match (d, s) {
        (Dtype::F16, Scalar::F(x)) => half::f16::from_f32(x).to_bits() as u64,
        (Dtype::Bf16, Scalar::F(x)) => half::bf16::from_f32(x).to_bits() as u64,
        _ => encode(d, s),
    }
}

/// Calls `f(linear, address)` for every element of `shape` in row-major order.
fn for_each_addr(
    shape: &[usize],
    strides: &[usize],
    mut f: impl FnMut(usize, usize) -> Result<(), String>,
) -> Result<(), String> {
    let n: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    for lin in 0..n {
        let addr: usize = idx.iter().zip(strides).map(|(i, s)| i * s).sum();
        f(lin, addr)?;
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

fn encode(d: Dtype, s: Scalar) -> u64 {
    match s {
        Scalar::F(x) => x.to_bits() as u64,
        Scalar::I(x) if d == Dtype::I64 => x as u64,
        Scalar::I(x) => x as u32 as u64,
        Scalar::B(b) => b as u64,
    }
}

fn decode(d: Dtype, bits: u64) -> Scalar {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => Scalar::F(f32::from_bits(bits as u32)),
        Dtype::I32 => Scalar::I(bits as u32 as i32 as i64),
        Dtype::I64 => Scalar::I(bits as i64),
        Dtype::U8 => Scalar::I((bits & 0xFF) as i64),
        Dtype::I1 => Scalar::B(bits != 0),
    }
}

impl Buffer {
    /// A buffer of `shape` with `strides` (C-contiguous when `None`) filled with the dtype's
    /// poison value. Fails if the storage would be absurdly large or cannot be allocated.
    pub(crate) fn poisoned(
        name: &str,
        dtype: Dtype,
        shape: Vec<usize>,
        strides: Option<Vec<usize>>,
    ) -> Result<Buffer, String> {
        let strides = strides.unwrap_or_else(|| contiguous_strides(&shape));
        let span = storage_len(name, &shape, &strides)?;
        let p = encode(dtype, poison(dtype));
        let storage = if dtype == Dtype::I64 {
            let mut v = Vec::new();
            v.try_reserve_exact(span)
                .map_err(|_| format!("cannot allocate `{name}` ({span} elements)"))?;
            v.extend((0..span).map(|_| AtomicU64::new(p)));
            Storage::W64(v)
        } else {
            let mut v = Vec::new();
            v.try_reserve_exact(span)
                .map_err(|_| format!("cannot allocate `{name}` ({span} elements)"))?;
            v.extend((0..span).map(|_| AtomicU32::new(p as u32)));
            Storage::W32(v)
        };
        Ok(Buffer {
            name: name.to_string(),
            dtype,
            shape,
            strides,
            storage,
        })
    }

    /// A buffer holding `data` (C order over `shape`), each value converted to `dtype` (floats
    /// round to nearest even; ints must be integral and in range). Fails on a length mismatch,
    /// a value that does not convert, or strides that map two different values to one address.
    pub(crate) fn from_host(
        name: &str,
        dtype: Dtype,
        shape: Vec<usize>,
        strides: Option<Vec<usize>>,
        data: &HostData,
    ) -> Result<Buffer, String> {
        let count: usize = shape
            .iter()
            .try_fold(1usize, |a, &n| a.checked_mul(n))
            .unwrap_or(usize::MAX);
        if data.len() != count {
            return Err(format!(
                "`{name}` has shape {shape:?} ({count} elements) but {} values",
                data.len()
            ));
        }
        let buf = Buffer::poisoned(name, dtype, shape, strides)?;
        let mut written = vec![false; buf.len()];
        let shape = buf.shape.clone();
        let strides = buf.strides.clone();
        for_each_addr(&shape, &strides, |lin, addr| {
            let s = match data {
                HostData::F64(v) => v.get(lin).map(|&x| scalar_from_f64(dtype, x)),
                HostData::I64(v) => v.get(lin).map(|&x| scalar_from_int(dtype, x)),
            }
            .ok_or_else(|| format!("element {lin} of `{name}` is missing"))?
            .map_err(|e| format!("element {lin} of `{name}`: {e}"))?;
            if written[addr]
                && buf.read(addr)? != s
                && !(s.to_f64().is_nan() && buf.read(addr)?.to_f64().is_nan())
            {
                return Err(format!(
                    "the strides of `{name}` map elements with different values to one address"
                ));
            }
            written[addr] = true;
            buf.write(addr, s)
        })?;
        Ok(buf)
    }

    /// The logical contents as a host tensor in C order: an i64 buffer as exact i64 values,
    /// every other dtype as f64 (which holds its values exactly).
    pub(crate) fn to_host(&self) -> Result<HostTensor, String> {
        let n = self.shape.iter().product();
        let data = if self.dtype == Dtype::I64 {
            let mut v = Vec::with_capacity(n);
            for_each_addr(&self.shape, &self.strides, |_, addr| {
                match self.read(addr)? {
                    Scalar::I(x) => v.push(x),
                    other => v.push(other.to_f64() as i64),
                }
                Ok(())
            })?;
            HostData::I64(v)
        } else {
            let mut v = Vec::with_capacity(n);
            for_each_addr(&self.shape, &self.strides, |_, addr| {
                v.push(self.read(addr)?.to_f64());
                Ok(())
            })?;
            HostData::F64(v)
        };
        Ok(HostTensor {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data,
        })
    }

    /// Number of storage slots.
    pub(crate) fn len(&self) -> usize {
        match &self.storage {
            Storage::W32(v) => v.len(),
            Storage::W64(v) => v.len(),
        }
    }

    /// Reads the element at storage address `addr`.
    pub(crate) fn read(&self, addr: usize) -> Result<Scalar, String> {
        let bits = match &self.storage {
            Storage::W32(v) => v.get(addr).map(|a| a.load(Relaxed) as u64),
            Storage::W64(v) => v.get(addr).map(|a| a.load(Relaxed)),
        };
        bits.map(|b| decode(self.dtype, b))
            .ok_or_else(|| self.bad_addr(addr))
    }

    /// Writes `s` (already valid for the dtype) at storage address `addr`.
    pub(crate) fn write(&self, addr: usize, s: Scalar) -> Result<(), String> {
        let bits = encode(self.dtype, s);
        let ok = match &self.storage {
            Storage::W32(v) => v.get(addr).map(|a| a.store(bits as u32, Relaxed)),
            Storage::W64(v) => v.get(addr).map(|a| a.store(bits, Relaxed)),
        };
        ok.ok_or_else(|| self.bad_addr(addr))
    }

    /// Atomically adds `s` at `addr`: floats add in f32 and round to the dtype, ints wrap.
    pub(crate) fn atomic_add(&self, addr: usize, s: Scalar) -> Result<(), String> {
        let d = self.dtype;
        let add = |old: u64| -> u64 {
            let new = match (decode(d, old), s) {
                (Scalar::F(a), Scalar::F(b)) => Scalar::F(round_f32(d, a + b)),
                (Scalar::I(a), Scalar::I(b)) => Scalar::I(wrap_int(d, a.wrapping_add(b))),
                (Scalar::B(a), Scalar::B(b)) => Scalar::B(a | b),
                (a, _) => a,
            };
            encode(d, new)
        };
        let ok = match &self.storage {
            Storage::W32(v) => v.get(addr).map(|a| {
                let _ = a.fetch_update(Relaxed, Relaxed, |old| Some(add(old as u64) as u32));
            }),
            Storage::W64(v) => v.get(addr).map(|a| {
                let _ = a.fetch_update(Relaxed, Relaxed, |old| Some(add(old)));
            }),
        };
        ok.ok_or_else(|| self.bad_addr(addr))
    }

    /// The storage in the GPU's layout: every slot as its dtype's native little-endian bytes
    /// (f16/bf16 as 16 bits, u8/i1 as one byte, i64 as eight), in storage order.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn to_native(&self) -> Result<Vec<u8>, String> {
        let w = native_width(self.dtype);
        let mut out = Vec::new();
        out.try_reserve_exact(self.len() * w)
            .map_err(|_| format!("cannot allocate a copy of `{}`", self.name))?;
        for addr in 0..self.len() {
            let bits = native_bits(self.dtype, self.read(addr)?);
            out.extend_from_slice(&bits.to_le_bytes()[..w]);
        }
        Ok(out)
    }

    /// A buffer of `shape`/`strides` whose storage is `bytes` in the GPU's layout (the inverse
    /// of [`Buffer::to_native`]). Fails if `bytes` does not have the storage's length.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn from_native(
        name: &str,
        dtype: Dtype,
        shape: Vec<usize>,
        strides: Option<Vec<usize>>,
        bytes: &[u8],
    ) -> Result<Buffer, String> {
        let buf = Buffer::poisoned(name, dtype, shape, strides)?;
        let w = native_width(dtype);
        if bytes.len() != buf.len() * w {
            return Err(format!(
                "`{name}`: {} bytes for {} elements of {dtype}",
                bytes.len(),
                buf.len()
            ));
        }
        for (addr, chunk) in bytes.chunks_exact(w).enumerate() {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(chunk);
            let bits = u64::from_le_bytes(b);
            let s = match dtype {
                Dtype::F16 => Scalar::F(half::f16::from_bits(bits as u16).to_f32()),
                Dtype::Bf16 => Scalar::F(half::bf16::from_bits(bits as u16).to_f32()),
                Dtype::I1 => Scalar::B(bits & 0xFF != 0),
                _ => decode(dtype, bits),
            };
            buf.write(addr, s)?;
        }
        Ok(buf)
    }

    fn bad_addr(&self, addr: usize) -> String {
        format!(
            "internal error: address {addr} outside the storage of `{}` ({} slots)",
            self.name,
            self.len()
        )
    }
}

/// Where each element of a tile access lands in a tensor: the tile's dims map to the trailing
/// dims of the tensor, the leading tensor dims are fixed at their offsets.
pub(crate) struct Access<'a> {
    pub shape: &'a [usize],
    pub strides: &'a [usize],
    pub offsets: &'a [i64],
    pub tile: &'a [usize],
}

impl Access<'_> {
    /// Calls `f(linear tile index, Some(address))` for every in-bounds element and
    /// `f(linear, None)` for every out-of-bounds one, in row-major tile order.
    /// The caller has checked `offsets.len() == shape.len() >= tile.len()`.
    pub(crate) fn visit<E>(
        &self,
        mut f: impl FnMut(usize, Option<usize>) -> Result<(), E>,
    ) -> Result<(), E> {
        let (rk, r) = (self.shape.len(), self.tile.len());
        let lead = rk - r;
        let mut base = 0usize;
        let mut lead_ok = true;
        for d in 0..lead {
            let (o, n) = (self.offsets[d], self.shape[d]);
            if o < 0 || o as u128 >= n as u128 {
                lead_ok = false;
            } else {
                base += o as usize * self.strides[d];
            }
        }
        if r == 0 {
            return f(0, lead_ok.then_some(base));
        }
        // Valid range [lo, hi) of each tile coordinate.
        let range = |j: usize| -> (usize, usize) {
            let (o, n, t) = (
                self.offsets[lead + j],
                self.shape[lead + j] as i64,
                self.tile[j] as i64,
            );
            let lo = o.saturating_neg().clamp(0, t);
            let hi = n.saturating_sub(o).clamp(lo, t);
            (lo as usize, hi as usize)
        };
        let ranges: Vec<(usize, usize)> = (0..r).map(range).collect();
        // Address of tensor element at tile coordinate c along tile dim j (c within range).
        let coord = |j: usize, c: usize| -> usize {
            ((self.offsets[lead + j] + c as i64) as usize) * self.strides[lead + j]
        };
        let last = self.tile[r - 1];
        let (llo, lhi) = ranges[r - 1];
        let rows: usize = self.tile[..r - 1].iter().product();
        let mut c = vec![0usize; r - 1];
        for row in 0..rows {
            let row_ok = lead_ok
                && c.iter()
                    .enumerate()
                    .all(|(j, &x)| x >= ranges[j].0 && x < ranges[j].1);
            let row_base = if row_ok {
                base + c
                    .iter()
                    .enumerate()
                    .map(|(j, &x)| coord(j, x))
                    .sum::<usize>()
            } else {
                0
            };
            for t in 0..last {
                let lin = row * last + t;
                if row_ok && t >= llo && t < lhi {
                    f(lin, Some(row_base + coord(r - 1, t)))?;
                } else {
                    f(lin, None)?;
                }
            }
            for j in (0..r - 1).rev() {
                c[j] += 1;
                if c[j] < self.tile[j] {
                    break;
                }
                c[j] = 0;
            }
        }
        Ok(())
    }

    /// The tensor index of the element at linear tile index `lin` (for messages; may be out of
    /// bounds).
    pub(crate) fn index_of(&self, lin: usize) -> Vec<i64> {
        let (rk, r) = (self.shape.len(), self.tile.len());
        let mut idx: Vec<i64> = self.offsets.to_vec();
        let mut rest = lin;
        for j in (0..r).rev() {
            let t = self.tile[j].max(1);
            idx[rk - r + j] = idx[rk - r + j].saturating_add((rest % t) as i64);
            rest /= t;
        }
        idx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(a: &Access) -> Vec<Option<usize>> {
        let mut v = vec![];
        a.visit::<()>(|lin, addr| {
            assert_eq!(lin, v.len());
            v.push(addr);
            Ok(())
        })
        .unwrap();
        v
    }

    #[test]
    fn access_maps_trailing_dims_and_checks_bounds() {
        // tensor [3, 4], tile [2, 2] at (2, 3): only (2, 3) is in bounds.
        let a = Access {
            shape: &[3, 4],
            strides: &[4, 1],
            offsets: &[2, 3],
            tile: &[2, 2],
        };
        assert_eq!(collect(&a), vec![Some(11), None, None, None]);
        assert_eq!(a.index_of(3), vec![3, 4]);
        // tensor [2, 3, 4], tile [4] at (1, 2, -1)
        let a = Access {
            shape: &[2, 3, 4],
            strides: &[12, 4, 1],
            offsets: &[1, 2, -1],
            tile: &[4],
        };
        assert_eq!(collect(&a), vec![None, Some(20), Some(21), Some(22)]);
        // leading dim out of bounds
        let a = Access {
            shape: &[2, 4],
            strides: &[4, 1],
            offsets: &[2, 0],
            tile: &[2],
        };
        assert_eq!(collect(&a), vec![None, None]);
        // scalar
        let a = Access {
            shape: &[2, 4],
            strides: &[1, 2],
            offsets: &[1, 3],
            tile: &[],
        };
        assert_eq!(collect(&a), vec![Some(7)]);
        // huge offsets do not overflow
        let a = Access {
            shape: &[4],
            strides: &[1],
            offsets: &[i64::MIN],
            tile: &[2],
        };
        assert_eq!(collect(&a), vec![None, None]);
        let a = Access {
            shape: &[4],
            strides: &[1],
            offsets: &[i64::MAX],
            tile: &[2],
        };
        assert_eq!(collect(&a), vec![None, None]);
    }

    #[test]
    fn strided_host_round_trip() {
        let b = Buffer::from_host(
            "x",
            Dtype::F32,
            vec![2, 3],
            Some(vec![1, 2]),
            &HostData::F64(vec![0., 1., 2., 3., 4., 5.]),
        )
        .unwrap();
        assert_eq!(b.read(2).unwrap(), Scalar::F(1.0));
        assert_eq!(
            b.to_host().unwrap().data,
            HostData::F64(vec![0., 1., 2., 3., 4., 5.])
        );
        assert!(Buffer::from_host(
            "x",
            Dtype::F32,
            vec![2],
            Some(vec![0]),
            &HostData::F64(vec![1., 2.])
        )
        .is_err());
        assert!(Buffer::from_host(
            "x",
            Dtype::F32,
            vec![2],
            Some(vec![0]),
            &HostData::F64(vec![1., 1.])
        )
        .is_ok());
    }
}
