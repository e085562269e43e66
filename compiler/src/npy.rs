//! `.npy` files (NumPy's array format), read and written by hand: versions 1, 2 and 3,
//! little-endian, C order. Values travel as [`HostData`]: `<i8` as exact i64 values (never
//! through f64), every other dtype as f64, which holds each of their values exactly.
//!
//! Reading accepts `<f8 <f4 <f2 <i8 <i4 <i2 <u4 |u1 |i1 |b1`; writing supports `<f8 <f4 <i4 <i8 |u1`.
//! Every malformed input (truncated, garbage, Fortran order, big-endian) is an [`NpyError`]
//! naming the file and the problem; nothing here panics on input.

use crate::limits;
use kir_backends::interp::HostData;
use kir_ir::Dtype;
use std::fmt;
use std::io::Read;
use std::path::Path;

/// An element type of an `.npy` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpyDtype {
    /// `<f8`
    F64,
    /// `<f4`
    F32,
    /// `<f2`
    F16,
    /// `<i8`
    I64,
    /// `<i4`
    I32,
    /// `<i2`
    I16,
    /// `<u4`
    U32,
    /// `|u1`
    U8,
    /// `|i1`
    I8,
    /// `|b1` (bool, one byte, 0 or 1)
    Bool,
}

impl NpyDtype {
    /// Every dtype, for lookups.
    const ALL: [NpyDtype; 10] = [
        NpyDtype::F64,
        NpyDtype::F32,
        NpyDtype::F16,
        NpyDtype::I64,
        NpyDtype::I32,
        NpyDtype::I16,
        NpyDtype::U32,
        NpyDtype::U8,
        NpyDtype::I8,
        NpyDtype::Bool,
    ];

    /// The element type an `out` or `inout` tensor of `dtype` is written as (the `kirc run`
    /// contract): `<f4` for every float dtype (holding exactly the kernel dtype's values),
    /// `<i4` and `<i8` for i32 and i64, `|u1` for u8 and i1.
    pub fn for_output(dtype: Dtype) -> NpyDtype {
        match dtype {
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 => NpyDtype::F32,
            Dtype::I32 => NpyDtype::I32,
            Dtype::I64 => NpyDtype::I64,
            Dtype::U8 | Dtype::I1 => NpyDtype::U8,
        }
    }

    /// The canonical descriptor NumPy writes (`<f4`, `|u1`).
    pub fn descr(self) -> &'static str {
        match self {
            NpyDtype::F64 => "<f8",
            NpyDtype::F32 => "<f4",
            NpyDtype::F16 => "<f2",
            NpyDtype::I64 => "<i8",
            NpyDtype::I32 => "<i4",
            NpyDtype::I16 => "<i2",
            NpyDtype::U32 => "<u4",
            NpyDtype::U8 => "|u1",
            NpyDtype::I8 => "|i1",
            NpyDtype::Bool => "|b1",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            NpyDtype::F64 | NpyDtype::I64 => 8,
            NpyDtype::F32 | NpyDtype::I32 | NpyDtype::U32 => 4,
            NpyDtype::F16 | NpyDtype::I16 => 2,
            NpyDtype::U8 | NpyDtype::I8 | NpyDtype::Bool => 1,
        }
    }

    /// Parses a descriptor; one-byte types accept any byte-order mark. `Err` says why not.
    fn from_descr(d: &str) -> Result<NpyDtype, String> {
        let (order, code) = d.split_at(d.len().min(1));
        let found = NpyDtype::ALL.into_iter().find(|t| &t.descr()[1..] == code);
        match (order, found) {
            (_, Some(t)) if t.size() == 1 && matches!(order, "|" | "<" | ">" | "=") => Ok(t),
            ("<" | "=", Some(t)) => Ok(t),
            (">", Some(_)) => Err(format!(
                "big-endian dtype `{d}` is not supported (convert to little-endian)"
            )),
            _ => Err(format!(
                "unsupported dtype `{d}` (supported: {})",
                NpyDtype::ALL.map(|t| t.descr()).join(" ")
            )),
        }
    }

    /// Decodes one little-endian element (`b` holds exactly `size()` bytes) as f64; `<i8` is
    /// decoded by [`NpyDtype::decode_i64`] instead.
    fn decode(self, b: &[u8]) -> f64 {
        let a8 = |b: &[u8]| -> [u8; 8] { std::array::from_fn(|i| b.get(i).copied().unwrap_or(0)) };
        let a4 = |b: &[u8]| -> [u8; 4] { std::array::from_fn(|i| b.get(i).copied().unwrap_or(0)) };
        let a2 = |b: &[u8]| -> [u8; 2] { std::array::from_fn(|i| b.get(i).copied().unwrap_or(0)) };
        let b0 = b.first().copied().unwrap_or(0);
        match self {
            NpyDtype::F64 => f64::from_le_bytes(a8(b)),
            NpyDtype::F32 => f32::from_le_bytes(a4(b)) as f64,
            NpyDtype::F16 => half::f16::from_bits(u16::from_le_bytes(a2(b))).to_f64(),
            NpyDtype::I64 => i64::from_le_bytes(a8(b)) as f64,
            NpyDtype::I32 => i32::from_le_bytes(a4(b)) as f64,
            NpyDtype::I16 => i16::from_le_bytes(a2(b)) as f64,
            NpyDtype::U32 => u32::from_le_bytes(a4(b)) as f64,
            NpyDtype::U8 => b0 as f64,
            NpyDtype::I8 => b0 as i8 as f64,
            NpyDtype::Bool => (b0 != 0) as u8 as f64,
        }
    }

    /// Decodes one little-endian `<i8` element exactly.
    fn decode_i64(b: &[u8]) -> i64 {
        i64::from_le_bytes(std::array::from_fn(|i| b.get(i).copied().unwrap_or(0)))
    }
}

impl fmt::Display for NpyDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.descr())
    }
}

/// An array read from (or to be written to) an `.npy` file, in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    /// The file's element type.
    pub dtype: NpyDtype,
    /// The dims, outermost first (empty for a 0-d array).
    pub shape: Vec<usize>,
    /// Every element: [`HostData::I64`] for `<i8`, [`HostData::F64`] (exact) for the others.
    pub data: HostData,
}

/// A problem with an `.npy` file: the file and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct NpyError {
    /// The file, as given.
    pub file: String,
    /// What is wrong with it.
    pub message: String,
}

pub(crate) const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads an `.npy` file, never more than its header declares nor over the limits of
/// [`crate::limits`].
pub fn read(path: &Path) -> Result<NpyArray, NpyError> {
    let file = path.display().to_string();
    let bytes = read_npy_bytes(path).map_err(|message| NpyError {
        file: file.clone(),
        message,
    })?;
    parse(&bytes, &file)
}

/// The data bytes the header at the start of `bytes` declares (shape × element size), or
/// `None` when the header is malformed or the count overflows (parse says why).
pub(crate) fn declared_data_bytes(bytes: &[u8]) -> Option<u64> {
    let (_, h, dtype) = parse_head(bytes, "").ok()?;
    let count = h
        .shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
    count.checked_mul(dtype.size() as u64)
}

/// Parses the bytes of an `.npy` file; `file` names it in errors.
pub fn parse(bytes: &[u8], file: &str) -> Result<NpyArray, NpyError> {
    let (end, h, dtype) = parse_head(bytes, file)?;
    parse_data(bytes, file, end, h, dtype)
}

/// The magic, version, header dict and dtype of an `.npy` file: where its data starts, the
/// header and the element type.
fn parse_head(bytes: &[u8], file: &str) -> Result<(usize, Header, NpyDtype), NpyError> {
    let err = |m: String| NpyError {
        file: file.to_string(),
        message: m,
    };
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(err("not an .npy file (missing the \\x93NUMPY magic)".into()));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (hlen, start): (usize, usize) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            let b = bytes
                .get(8..12)
                .ok_or_else(|| err("truncated header".into()))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        _ => {
            return Err(err(format!(
                "unsupported .npy version {major}.{minor} (supported: 1, 2, 3)"
            )))
        }
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            err(format!(
                "truncated header: it claims {hlen} bytes, the file has {}",
                bytes.len() - start
            ))
        })?;
    let header =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| err("header is not text".into()))?;
    let h = parse_header(header)
        .map_err(|m| err(format!("bad header {:?}: {m}", header.trim_end())))?;
    if h.fortran_order {
        return Err(err(
            "Fortran-order arrays are not supported (save with C order, e.g. np.ascontiguousarray)"
                .into(),
        ));
    }
    let dtype = NpyDtype::from_descr(&h.descr).map_err(err)?;
    Ok((end, h, dtype))
}

/// The data of a parsed head: element count, size checks and values.
fn parse_data(
    bytes: &[u8],
    file: &str,
    end: usize,
    h: Header,
    dtype: NpyDtype,
) -> Result<NpyArray, NpyError> {
    let err = |m: String| NpyError {
        file: file.to_string(),
        message: m,
    };
    let count = h.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let nbytes = count.and_then(|c| c.checked_mul(dtype.size()));
    let (Some(count), Some(nbytes)) = (count, nbytes) else {
        return Err(err(format!("shape {:?} is too large", h.shape)));
    };
    let data = &bytes[end..];
    if data.len() < nbytes {
        return Err(err(format!(
            "truncated: shape {:?} of {dtype} needs {nbytes} data bytes, the file has {}",
            h.shape,
            data.len()
        )));
    }
    if data.len() > nbytes {
        // [`read`] stops one byte past the declared data, so the length is not known.
        return Err(err(format!(
            "too long: shape {:?} of {dtype} needs {nbytes} data bytes, the file has more",
            h.shape
        )));
    }
    let chunks = data.chunks_exact(dtype.size());
    let values = match dtype {
        NpyDtype::I64 => HostData::I64(chunks.map(NpyDtype::decode_i64).collect()),
        _ => HostData::F64(chunks.map(|c| dtype.decode(c)).collect()),
    };
    debug_assert_eq!(values.len(), count);
    Ok(NpyArray {
        dtype,
        shape: h.shape,
        data: values,
    })
}

/// The three fields of an `.npy` header.
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses the Python dict literal of a header: `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
fn parse_header(h: &str) -> Result<Header, String> {
    let mut p = Lit {
        s: h.trim().as_bytes(),
        i: 0,
    };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => descr = Some(p.string()?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            _ => return Err(format!("unknown key '{key}'")),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    Ok(Header {
        descr: descr.ok_or("no 'descr'")?,
        fortran_order: fortran.ok_or("no 'fortran_order'")?,
        shape: shape.ok_or("no 'shape'")?,
    })
}

/// A cursor over a Python literal.
struct Lit<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lit<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.i) == Some(&c);
        self.i += hit as usize;
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a string at byte {}", self.i)),
        };
        let start = self.i + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == q)
            .ok_or("unterminated string")?;
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn boolean(&mut self) -> Result<bool, String> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(format!("expected True or False at byte {}", self.i))
    }

    fn tuple(&mut self) -> Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
            let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            let d = text
                .parse::<usize>()
                .map_err(|_| format!("expected a dimension at byte {start}"))?;
            dims.push(d);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

/// The bytes of an `.npy` file (version 1.0; 2.0 if the header needs it) holding `data` (C
/// order) as `dtype`. i64 data written as `<i8` is copied exactly; other values are converted
/// with `as` (floats round to nearest even; integers are expected to be integral and in range,
/// and saturate otherwise).
pub fn to_bytes(dtype: NpyDtype, shape: &[usize], data: &HostData) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}",
        dtype.descr()
    );
    // Pad with spaces so the data starts at a multiple of 64 bytes; end with a newline.
    // Version 1 stores the header length in 2 bytes, version 2 in 4.
    let v1 = MAGIC.len() + 4 + header.len() + 1 + 64 <= u16::MAX as usize;
    let prefix = MAGIC.len() + if v1 { 4 } else { 6 };
    let unpadded = prefix + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(prefix + header.len() + data.len() * dtype.size());
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    if let (NpyDtype::I64, HostData::I64(v)) = (dtype, data) {
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
        return out;
    }
    let floats: Vec<f64>;
    let values: &[f64] = match data {
        HostData::F64(v) => v,
        HostData::I64(v) => {
            floats = v.iter().map(|&x| x as f64).collect();
            &floats
        }
    };
    for &x in values {
        match dtype {
            NpyDtype::F64 => out.extend_from_slice(&x.to_le_bytes()),
            NpyDtype::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            NpyDtype::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_bits().to_le_bytes()),
            NpyDtype::I64 => out.extend_from_slice(&(x as i64).to_le_bytes()),
            NpyDtype::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
            NpyDtype::I16 => out.extend_from_slice(&(x as i16).to_le_bytes()),
            NpyDtype::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
            NpyDtype::U8 => out.push(x as u8),
            NpyDtype::I8 => out.push(x as i8 as u8),
            NpyDtype::Bool => out.push((x != 0.0) as u8),
        }
    }
    out
}

/// Writes `data` (C order, `shape`) to `path` as `dtype` (see [`to_bytes`]), atomically
/// ([`crate::outfile::atomic_write`]): a failed write leaves no new file.
pub fn write(
    path: &Path,
    dtype: NpyDtype,
    shape: &[usize],
    data: &HostData,
) -> Result<(), NpyError> {
    crate::outfile::atomic_write(path, to_bytes(dtype, shape, data)).map_err(|e| NpyError {
        file: e.path,
        message: e.message,
    })
}

/// The bytes of an `.npy` file, read without going past what its header declares (the steps of
/// `crate::limits`' module doc). The error is the message to show after the path; a file that
/// is not an `.npy` (a wrong magic, an unknown version) is returned as read so far, for
/// [`parse`] to say what is wrong with it.
pub fn read_npy_bytes(path: &Path) -> Result<Vec<u8>, String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    (&mut f)
        .take(12)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    let hlen = match (bytes.get(..6), bytes.get(6)) {
        (Some(m), Some(1)) if m == MAGIC => bytes
            .get(8..10)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as u64),
        (Some(m), Some(2 | 3)) if m == MAGIC => bytes
            .get(8..12)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64),
        _ => return Ok(bytes),
    };
    let Some(hlen) = hlen else { return Ok(bytes) };
    if hlen > limits::MAX_NPY_HEADER_BYTES {
        return Err(format!(
            "its header claims {hlen} bytes, over the limit of {} for an .npy header",
            limits::bytes_text(limits::MAX_NPY_HEADER_BYTES)
        ));
    }
    let start = if bytes[6] == 1 { 10 } else { 12 };
    // Version 1's header starts at byte 10: two bytes of it were read already.
    let have = (bytes.len() - start) as u64;
    (&mut f)
        .take(hlen - have.min(hlen))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    let Some(nbytes) = declared_data_bytes(&bytes) else {
        // A truncated or malformed header: parse says which.
        return Ok(bytes);
    };
    if nbytes > limits::MAX_NPY_DATA_BYTES {
        return Err(format!(
            "its header declares {nbytes} data bytes, over the limit of {} for an .npy input",
            limits::bytes_text(limits::MAX_NPY_DATA_BYTES)
        ));
    }
    // One byte more than declared: enough for parse to report a file that is too long.
    f.take(nbytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn an_endless_file_is_not_an_npy_after_12_bytes() {
        // Not an .npy: the first 12 bytes are enough to say so.
        let b = read_npy_bytes(Path::new("/dev/zero")).unwrap();
        assert_eq!(b.len(), 12);
        assert!(parse(&b, "zero.npy").is_err());
    }
}
