//! Cache keys: what an entry of the on-disk cache is looked up by, and the versions every entry
//! is written with.
//!
//! A [`Key`] is the SHA-256 of named fields (each hashed with its length, so no two field lists
//! hash alike by concatenation). Every key starts with the entry's [`Kind`] and the kir
//! [`version`] string, so a kir of another version or built from other sources never finds an
//! entry of this one. What follows depends on the kind:
//!
//! - a compilation ([`compile_key`]): the SHA-256 of the module source and the
//!   [`CompilePlan`]'s identity (target, emit, kernel, stage, the resolved `-D` defines with the
//!   configuration's, the flags, the configuration row and the judging backend; not the
//!   problem dims the row was chosen from);
//! - a cubin ([`cubin_key`]): the SHA-256 of the PTX and the architecture ptxas assembled it
//!   for (`sm_90a`);
//! - a tuned configuration ([`tuned_key`]): the source, the user's defines, the target, the
//!   [`ShapeBucket`] and, when tuned on a GPU, the [`GpuId`].

use crate::plan::CompilePlan;
use kir_backends::Target;
use sha2::{Digest, Sha256};
use std::fmt;

/// The version of the entry container (magic, header, checksum, sections); an entry of another
/// format version is ignored with a warning.
pub const FORMAT_VERSION: u32 = 1;

/// kir's version (`CARGO_PKG_VERSION` of kir-compiler).
pub const KIR_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A fingerprint of the sources this kir was built from (set by compiler/build.rs).
pub const BUILD_ID: &str = env!("KIR_BUILD_ID");

/// The version string of this kir's entries: `KIR_VERSION+BUILD_ID/fFORMAT_VERSION`. It is
/// hashed into every key and written in every entry, and an entry whose version differs is
/// never used.
pub fn version() -> String {
    format!("{KIR_VERSION}+{BUILD_ID}/f{FORMAT_VERSION}")
}

/// What an entry holds; also the extension of its file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A compilation's output: code, META.json, the lowered module, the report.
    Compiled,
    /// The binary the CUDA driver compiled from a PTX for one GPU.
    Cubin,
    /// A tuned configuration for a shape bucket.
    Tuned,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Compiled, Kind::Cubin, Kind::Tuned];

    /// The name (and file extension) of the kind.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Compiled => "compiled",
            Kind::Cubin => "cubin",
            Kind::Tuned => "tuned",
        }
    }

    /// The kind of that name.
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A cache key: 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// The key as 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 16 hex digits (what `kirc cache list` shows).
    pub fn short(&self) -> &str {
        &self.0[..16]
    }

    /// A key from its text: exactly 64 lowercase hex digits.
    pub fn parse(s: &str) -> Option<Key> {
        (s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Key(s.to_string()))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Hashes named fields into a [`Key`].
pub struct KeyBuilder(Sha256);

impl KeyBuilder {
    /// A key of `kind` for entries of `version`.
    pub fn new(kind: Kind, version: &str) -> KeyBuilder {
        KeyBuilder(Sha256::new())
            .field("kind", kind.name().as_bytes())
            .field("version", version.as_bytes())
    }

    /// Adds the field `name` with `value`.
    pub fn field(mut self, name: &str, value: &[u8]) -> KeyBuilder {
        for part in [name.as_bytes(), value] {
            self.0.update((part.len() as u64).to_le_bytes());
            self.0.update(part);
        }
        self
    }

    /// The key.
    pub fn finish(self) -> Key {
        Key(hex(&self.0.finalize()))
    }
}

/// Lowercase hex digits of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The GPU a cubin was compiled for (and a tuned configuration measured on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuId {
    /// The device's name (`NVIDIA H200`).
    pub name: String,
    /// The compute capability (major, minor).
    pub capability: (i32, i32),
    /// The driver's version, as `cuDriverGetVersion` gives it (12080 for 12.8).
    pub driver: i32,
}

impl GpuId {
    fn add_to(&self, k: KeyBuilder) -> KeyBuilder {
        k.field("gpu", self.name.as_bytes())
            .field(
                "capability",
                format!("{}.{}", self.capability.0, self.capability.1).as_bytes(),
            )
            .field("driver", self.driver.to_string().as_bytes())
    }
}

/// The key of compiling `src` as `plan` says. Every field the code depends on is in it
/// ([`CompilePlan::identity`], the plan's `Debug` form less its problem dims and reports), so
/// two plans that would compile differently never share an entry, and problems of other sizes
/// that take the same configuration do.
pub fn compile_key(version: &str, src: &str, plan: &CompilePlan) -> Key {
    KeyBuilder::new(Kind::Compiled, version)
        .field("source", &sha256(src.as_bytes()))
        .field("target", plan.target.name().as_bytes())
        .field("plan", plan.identity().as_bytes())
        .finish()
}

/// The key of the cubin ptxas assembled from `ptx` for the architecture `arch` (`sm_90a`). A
/// cubin depends on those alone, not on the GPU's name or its driver (a driver too old for it
/// refuses it at load, and the PTX is loaded instead), so one assembled on a machine without a
/// GPU (`kirc cache prebuild`) serves every GPU of its architecture.
pub fn cubin_key(version: &str, ptx: &str, arch: &str) -> Key {
    KeyBuilder::new(Kind::Cubin, version)
        .field("ptx", &sha256(ptx.as_bytes()))
        .field("arch", arch.as_bytes())
        .finish()
}

/// A bucket of problem shapes that share a tuned configuration: each dim rounded up to a power
/// of two (`M=1000` and `M=1024` share `M=1024`), in name order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapeBucket(String);

impl ShapeBucket {
    /// The bucket of the dims `(name, value)`.
    pub fn from_dims(dims: &[(String, u64)]) -> ShapeBucket {
        let mut dims: Vec<(&str, u64)> = dims
            .iter()
            .map(|(n, v)| (n.as_str(), v.checked_next_power_of_two().unwrap_or(*v)))
            .collect();
        dims.sort();
        dims.dedup_by(|a, b| a.0 == b.0);
        let parts: Vec<String> = dims.iter().map(|(n, v)| format!("{n}={v}")).collect();
        ShapeBucket(parts.join(","))
    }

    /// The bucket as text (`K=4096,M=1024,N=1024`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The key of a tuned configuration of `src` with the user's `defines` for `target` and the
/// shapes of `bucket`, measured on `gpu` when given.
pub fn tuned_key(
    version: &str,
    src: &str,
    defines: &[(String, String)],
    target: Target,
    bucket: &ShapeBucket,
    gpu: Option<&GpuId>,
) -> Key {
    let defines: Vec<String> = defines.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let k = KeyBuilder::new(Kind::Tuned, version)
        .field("source", &sha256(src.as_bytes()))
        .field("defines", defines.join("\n").as_bytes())
        .field("target", target.name().as_bytes())
        .field("bucket", bucket.as_str().as_bytes());
    match gpu {
        Some(g) => g.add_to(k.field("on", b"gpu")).finish(),
        None => k.field("on", b"any").finish(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_length_prefixed() {
        let a = KeyBuilder::new(Kind::Compiled, "v")
            .field("a", b"bc")
            .finish();
        let b = KeyBuilder::new(Kind::Compiled, "v")
            .field("ab", b"c")
            .finish();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 64);
        assert_eq!(Key::parse(a.as_str()), Some(a.clone()));
        assert_eq!(Key::parse("xyz"), None);
        let c = KeyBuilder::new(Kind::Cubin, "v").field("a", b"bc").finish();
        assert_ne!(a, c, "the kind is in the key");
        let d = KeyBuilder::new(Kind::Compiled, "w")
            .field("a", b"bc")
            .finish();
        assert_ne!(a, d, "the version is in the key");
    }

    #[test]
    fn buckets_round_up_to_powers_of_two() {
        let dims = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|(n, x)| (n.to_string(), *x)).collect()
        };
        let a = ShapeBucket::from_dims(&dims(&[("N", 1000), ("M", 3)]));
        assert_eq!(a.as_str(), "M=4,N=1024");
        assert_eq!(a, ShapeBucket::from_dims(&dims(&[("M", 4), ("N", 1024)])));
        assert_ne!(a, ShapeBucket::from_dims(&dims(&[("M", 4), ("N", 1025)])));
    }

    #[test]
    fn the_version_names_kir_and_the_format() {
        let v = version();
        assert!(v.starts_with(KIR_VERSION), "{v}");
        assert!(v.ends_with(&format!("/f{FORMAT_VERSION}")), "{v}");
        assert_eq!(BUILD_ID.len(), 16);
    }
}
