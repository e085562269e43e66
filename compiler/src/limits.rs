//! Input size limits: every command that reads a module's source or an `.npy` input reads it
//! through here, so a file that never ends (`/dev/zero`, a pipe, a FIFO) or a huge one is an
//! error naming the limit instead of a read that grows without bound.
//!
//! - A source (`.kir`) may have at most [`MAX_SOURCE_BYTES`] bytes; it is read with one byte
//!   to spare, so a longer input is noticed after that many bytes, never read to its end.
//! - An `.npy` input is read in three bounded steps (`crate::npy::read_npy_bytes`): its first
//!   bytes (the magic and the header length), its header (at most [`MAX_NPY_HEADER_BYTES`]),
//!   and then exactly the data bytes its header declares (at most [`MAX_NPY_DATA_BYTES`]) plus
//!   one, so a file longer than its header says is still reported as such by `crate::npy::parse`.

use std::io::Read;
use std::path::Path;

/// The most bytes a module's source may have (8 MiB; the largest built-in op has under 30 KB).
pub const MAX_SOURCE_BYTES: u64 = 8 << 20;

/// The most bytes an `.npy` header may declare (NumPy writes under 1 KB).
pub const MAX_NPY_HEADER_BYTES: u64 = 1 << 20;

/// The most data bytes one `.npy` input may hold (4 GiB: 2^30 f32 elements, far more than the
/// interpreter runs in reasonable time).
pub const MAX_NPY_DATA_BYTES: u64 = 4 << 30;

/// `n` bytes in words: `8 MiB`, `4 GiB`, or `1234 bytes`.
pub fn bytes_text(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n => format!("{n} bytes"),
    }
}

/// Reads at most `limit` bytes of `r` and one more: `Err(None)` when there was more than
/// `limit`, `Err(Some(e))` on a read error.
fn read_at_most(r: &mut impl Read, limit: u64) -> Result<Vec<u8>, Option<std::io::Error>> {
    let mut buf = Vec::new();
    r.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(Some)?;
    if buf.len() as u64 > limit {
        return Err(None);
    }
    Ok(buf)
}

/// Reads a module's source: UTF-8 text of at most [`MAX_SOURCE_BYTES`]. The error is the
/// message to show after the path.
pub fn read_source(path: &Path) -> Result<String, String> {
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let bytes = read_at_most(&mut f, MAX_SOURCE_BYTES).map_err(|e| match e {
        Some(e) => e.to_string(),
        None => format!(
            "the source is larger than the limit of {} for a module (docs/ir.md, \"Limits\")",
            bytes_text(MAX_SOURCE_BYTES)
        ),
    })?;
    String::from_utf8(bytes).map_err(|_| "stream did not contain valid UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_words() {
        assert_eq!(bytes_text(MAX_SOURCE_BYTES), "8 MiB");
        assert_eq!(bytes_text(MAX_NPY_DATA_BYTES), "4 GiB");
        assert_eq!(bytes_text(1000), "1000 bytes");
    }

    #[cfg(unix)]
    #[test]
    fn an_endless_source_stops_at_the_limit() {
        let e = read_source(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("limit of 8 MiB"), "{e}");
    }
}
