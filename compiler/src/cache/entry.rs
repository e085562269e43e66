//! The container of one cache entry: how an [`Entry`] is laid out in its file, and the checks a
//! file must pass before anything in it is used.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "KIRCACHE"
//!      8     4  format version (u32, little-endian): key::FORMAT_VERSION
//!     12     4  header length H (u32)
//!     16     8  payload length P (u64)
//!     24    32  SHA-256 of the header and the payload
//!     56     H  header: JSON {"version","kind","key","name","target","created"}
//!   56+H     P  payload: sections, each a u32 name length, the name, a u64 length, the bytes
//! ```
//!
//! [`decode`] refuses, with an [`EntryError`] that says why, a file that is not an entry (bad
//! magic), of another format version, shorter or longer than its lengths say, whose checksum
//! does not match, or whose header or sections do not parse. Whether the entry is the one asked
//! for (its version, kind and key) is checked by the store.

use super::key::{sha256, Kind, FORMAT_VERSION};

/// The first bytes of every entry.
pub const MAGIC: &[u8; 8] = b"KIRCACHE";

/// The bytes before the header.
const PREAMBLE: usize = 56;

/// The header of an entry: what it is, for whom, and what `kirc cache list` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The kir version string that wrote it ([`super::key::version`]).
    pub version: String,
    /// What it holds.
    pub kind: Kind,
    /// Its key (also its file name).
    pub key: String,
    /// The module (and kernel) it is for.
    pub name: String,
    /// The target and what was emitted (`sm_90a ptx`), or the GPU of a cubin.
    pub target: String,
    /// When it was written, in seconds since the Unix epoch.
    pub created: u64,
}

/// A decoded entry: its header and its named sections, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The header.
    pub header: Header,
    /// The payload's sections.
    pub sections: Vec<(String, Vec<u8>)>,
}

impl Entry {
    /// The bytes of the section `name`.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    }

    /// The section `name` as UTF-8 text.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.section(name).and_then(|b| std::str::from_utf8(b).ok())
    }
}

/// Why a file is not a usable entry. The message is one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// It does not start with [`MAGIC`].
    #[error("not a kir cache entry (bad magic)")]
    BadMagic,
    /// It was written in another container format.
    #[error("format version {0}, this kir reads {FORMAT_VERSION}")]
    FormatVersion(u32),
    /// It is shorter or longer than its lengths say.
    #[error("truncated or padded: {found} bytes, the header says {expected}")]
    Length {
        /// The size its lengths give.
        expected: u64,
        /// Its size.
        found: u64,
    },
    /// The checksum does not match the header and payload.
    #[error("checksum mismatch (the payload was changed or damaged)")]
    Checksum,
    /// The header or the sections do not parse.
    #[error("unparsable: {0}")]
    Unparsable(String),
    /// It was written by another kir (version or build).
    #[error("written by kir {found}, this is kir {expected}")]
    Version {
        /// This kir's version string.
        expected: String,
        /// The entry's.
        found: String,
    },
    /// It is a valid entry, but not the one its file name says.
    #[error("foreign entry: {0}")]
    Foreign(String),
}

/// The bytes of `e` (see the module doc for the layout).
pub fn encode(e: &Entry) -> Vec<u8> {
    let header = serde_json::json!({
        "version": e.header.version,
        "kind": e.header.kind.name(),
        "key": e.header.key,
        "name": e.header.name,
        "target": e.header.target,
        "created": e.header.created,
    })
    .to_string()
    .into_bytes();
    let mut payload = Vec::new();
    for (name, bytes) in &e.sections {
        payload.extend_from_slice(&(name.len() as u32).to_le_bytes());
        payload.extend_from_slice(name.as_bytes());
        payload.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        payload.extend_from_slice(bytes);
    }
    let mut out = Vec::with_capacity(PREAMBLE + header.len() + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(&header, &payload));
    out.extend_from_slice(&header);
    out.extend_from_slice(&payload);
    out
}

/// The SHA-256 of the header followed by the payload.
fn checksum(header: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut both = Vec::with_capacity(header.len() + payload.len());
    both.extend_from_slice(header);
    both.extend_from_slice(payload);
    sha256(&both)
}

/// Reads an entry from `bytes`, checking the magic, format version, lengths, checksum and that
/// the header and sections parse. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Entry, EntryError> {
    let found = bytes.len() as u64;
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(EntryError::BadMagic);
    }
    if bytes.len() < PREAMBLE {
        return Err(EntryError::Length {
            expected: PREAMBLE as u64,
            found,
        });
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let format = u32_at(8);
    if format != FORMAT_VERSION {
        return Err(EntryError::FormatVersion(format));
    }
    let header_len = u64::from(u32_at(12));
    let mut p = [0u8; 8];
    p.copy_from_slice(&bytes[16..24]);
    let payload_len = u64::from_le_bytes(p);
    let expected = (PREAMBLE as u64)
        .saturating_add(header_len)
        .saturating_add(payload_len);
    if expected != found {
        return Err(EntryError::Length { expected, found });
    }
    let h_end = PREAMBLE + header_len as usize;
    let (header, payload) = (&bytes[PREAMBLE..h_end], &bytes[h_end..]);
    if checksum(header, payload)[..] != bytes[24..56] {
        return Err(EntryError::Checksum);
    }
    Ok(Entry {
        header: parse_header(header)?,
        sections: parse_sections(payload)?,
    })
}

/// The header's JSON.
fn parse_header(bytes: &[u8]) -> Result<Header, EntryError> {
    let bad = |m: &str| EntryError::Unparsable(format!("header: {m}"));
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| bad(&e.to_string()))?;
    let text = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("no text field `{k}`")))
    };
    let kind = text("kind")?;
    Ok(Header {
        version: text("version")?,
        kind: Kind::from_name(&kind).ok_or_else(|| bad(&format!("unknown kind `{kind}`")))?,
        key: text("key")?,
        name: text("name")?,
        target: text("target")?,
        created: v
            .get("created")
            .and_then(|x| x.as_u64())
            .ok_or_else(|| bad("no number field `created`"))?,
    })
}

/// The payload's sections.
fn parse_sections(mut rest: &[u8]) -> Result<Vec<(String, Vec<u8>)>, EntryError> {
    let bad = || EntryError::Unparsable("sections overrun the payload".into());
    let take = |rest: &mut &[u8], n: u64| -> Result<Vec<u8>, EntryError> {
        let n = usize::try_from(n).map_err(|_| bad())?;
        if rest.len() < n {
            return Err(bad());
        }
        let (a, b) = rest.split_at(n);
        *rest = b;
        Ok(a.to_vec())
    };
    let mut out = Vec::new();
    while !rest.is_empty() {
        let n = take(&mut rest, 4)?;
        let name_len = u32::from_le_bytes([n[0], n[1], n[2], n[3]]);
        let name = String::from_utf8(take(&mut rest, u64::from(name_len))?)
            .map_err(|_| EntryError::Unparsable("a section name is not UTF-8".into()))?;
        let l = take(&mut rest, 8)?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&l);
        let body = take(&mut rest, u64::from_le_bytes(len))?;
        out.push((name, body));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            header: Header {
                version: "v".into(),
                kind: Kind::Compiled,
                key: "k".into(),
                name: "m".into(),
                target: "sm_90a ptx".into(),
                created: 7,
            },
            sections: vec![("text".into(), b"abc".to_vec()), ("e".into(), vec![])],
        }
    }

    #[test]
    fn round_trip() {
        let e = entry();
        assert_eq!(decode(&encode(&e)), Ok(e));
    }

    #[test]
    fn every_damage_is_an_error() {
        let bytes = encode(&entry());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode(&b).is_err(), "byte {i} flipped");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(decode(&long), Err(EntryError::Length { .. })));
        let mut other = bytes.clone();
        other[8] = 9;
        assert_eq!(decode(&other), Err(EntryError::FormatVersion(9)));
        assert_eq!(decode(b"hello"), Err(EntryError::BadMagic));
    }
}
