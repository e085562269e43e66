//! The cache directory: where it is ([`location`]), and reading, writing, listing and clearing
//! its entries ([`Cache`]).
//!
//! - **Location.** `$KIR_CACHE_DIR` if set and not empty (`off` turns the cache off), else
//!   `$XDG_CACHE_HOME/kir` (an absolute `XDG_CACHE_HOME` only, as the XDG spec says), else
//!   `$HOME/.cache/kir`; with none of them the cache is off.
//! - **Files.** One file per entry, `<key>.<kind>` (`….compiled`, `….cubin`, `….tuned`), directly
//!   in the directory.
//! - **Atomic writes.** An entry is written to a temporary file in the same directory
//!   (`.tmp-<pid>-<n>-<kind>`), flushed to disk (`fsync`), then renamed over `<key>.<kind>`.
//!   A rename replaces the name atomically, so a reader sees the old file or the new one, never a
//!   mix; two processes storing one key at once both write whole files and the last rename wins.
//! - **Reading.** A file that is missing is a miss. A file that cannot be read or is not a valid
//!   entry of this kir (see [`super::entry::decode`], plus the version, kind and key it names) is
//!   a miss too, with one warning line naming the file and why; the next store overwrites it.
//!   Nothing read from the cache panics.
//! - **Prebuilt entries.** A second, read-only directory ([`prebuilt_location`]:
//!   `$KIR_CACHE_PREBUILT`, else `kir-prebuilt` beside the running executable when it exists)
//!   is searched for an entry the cache directory does not have: entries that shipped with kir
//!   (`kirc cache prebuild`: the built-in ops' cubins), so that a first launch needs no JIT.
//!   Nothing is ever written, listed or cleared there.

use super::entry::{decode, encode, Entry, EntryError, Header};
use super::key::{version, Key, Kind};
use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// The largest entry file read (512 MiB); a larger one is ignored with a warning.
pub const MAX_ENTRY_BYTES: u64 = 512 << 20;

/// Where the cache is, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// The cache directory (it may not exist yet).
    Dir(PathBuf),
    /// The cache is off, and why (`KIR_CACHE_DIR=off`, or no directory could be chosen).
    Off(String),
}

/// The cache's location from the environment variables `var` reads (see the module doc).
pub fn location(var: impl Fn(&str) -> Option<OsString>) -> Location {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("KIR_CACHE_DIR") {
        if dir == "off" {
            return Location::Off("KIR_CACHE_DIR=off".into());
        }
        return Location::Dir(PathBuf::from(dir));
    }
    if let Some(xdg) = set("XDG_CACHE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Location::Dir(xdg.join("kir"));
        }
    }
    match set("HOME") {
        Some(home) => Location::Dir(PathBuf::from(home).join(".cache").join("kir")),
        None => Location::Off(
            "no cache directory: KIR_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset".into(),
        ),
    }
}

/// The cache's location from this process's environment.
pub fn location_from_env() -> Location {
    location(|name| std::env::var_os(name))
}

/// The read-only directory of prebuilt entries: `$KIR_CACHE_PREBUILT` when set and not empty
/// (`off` for none), else `kir-prebuilt` in `exe_dir` (the running executable's directory) when
/// that is a directory.
pub fn prebuilt_location(
    var: impl Fn(&str) -> Option<OsString>,
    exe_dir: Option<&Path>,
) -> Option<PathBuf> {
    match var("KIR_CACHE_PREBUILT").filter(|v| !v.is_empty()) {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => exe_dir
            .map(|d| d.join("kir-prebuilt"))
            .filter(|d| d.is_dir()),
    }
}

/// Where warnings go: one line each, without a newline.
pub type Warn = Arc<dyn Fn(&str) + Send + Sync>;

/// An on-disk cache in one directory. Cloning is cheap; clones share the warning sink.
#[derive(Clone)]
pub struct Cache {
    dir: PathBuf,
    prebuilt: Option<PathBuf>,
    version: String,
    warn: Warn,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("dir", &self.dir)
            .field("prebuilt", &self.prebuilt)
            .field("version", &self.version)
            .finish()
    }
}

/// One file of the cache directory, as `kirc cache list` shows it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// When it was last written.
    pub modified: Option<SystemTime>,
    /// Its header, or why it is not a valid entry of this kir.
    pub header: Result<Header, EntryError>,
}

impl Cache {
    /// The cache in `dir` (created on the first store), for entries of this kir's
    /// [`version`], warning on standard error.
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache {
            dir: dir.into(),
            prebuilt: None,
            version: version(),
            warn: Arc::new(|line: &str| {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }),
        }
    }

    /// The cache of [`location_from_env`], with the prebuilt entries of [`prebuilt_location`],
    /// or `None` when it is off.
    pub fn from_env() -> Option<Cache> {
        let exe = std::env::current_exe().ok();
        let exe_dir = exe.as_deref().and_then(Path::parent);
        match location_from_env() {
            Location::Dir(d) => Some(
                Cache::new(d)
                    .with_prebuilt(prebuilt_location(|name| std::env::var_os(name), exe_dir)),
            ),
            Location::Off(_) => None,
        }
    }

    /// The same cache, searching `dir` (read-only) for entries it does not hold itself.
    pub fn with_prebuilt(mut self, dir: Option<PathBuf>) -> Cache {
        self.prebuilt = dir;
        self
    }

    /// The read-only directory of prebuilt entries, if any.
    pub fn prebuilt(&self) -> Option<&Path> {
        self.prebuilt.as_deref()
    }

    /// The same cache as a kir of `version` would see it (for tests of a version bump).
    pub fn with_version(mut self, version: impl Into<String>) -> Cache {
        self.version = version.into();
        self
    }

    /// The same cache, sending its warnings to `warn` instead of standard error.
    pub fn with_warnings(mut self, warn: Warn) -> Cache {
        self.warn = warn;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The version string of the entries it reads and writes.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Sends one warning line.
    pub fn warn(&self, line: &str) {
        (self.warn)(line);
    }

    /// The file of the entry `key` of `kind`.
    pub fn path(&self, kind: Kind, key: &Key) -> PathBuf {
        self.dir.join(format!("{key}.{}", kind.name()))
    }

    /// The entry `key` of `kind`, if a valid one of this kir's version is stored in the cache
    /// directory, else in the prebuilt one. Anything else in its place is a miss with a warning
    /// (`warning: kir cache: ignoring FILE: WHY`).
    pub fn load(&self, kind: Kind, key: &Key) -> Option<Entry> {
        let path = self.path(kind, key);
        match (path.exists(), &self.prebuilt) {
            (false, Some(pre)) => {
                let file = path.file_name().map(|n| pre.join(n))?;
                self.load_file(&file, kind, key)
            }
            _ => self.load_file(&path, kind, key),
        }
    }

    /// The entry `key` of `kind` in `path`, as [`Cache::load`] reads it.
    fn load_file(&self, path: &Path, kind: Kind, key: &Key) -> Option<Entry> {
        let ignore = |why: String| {
            self.warn(&format!(
                "warning: kir cache: ignoring {}: {why}",
                path.display()
            ));
            None
        };
        let size = match fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return ignore(e.to_string()),
        };
        if size > MAX_ENTRY_BYTES {
            return ignore(format!("{size} bytes, over the limit of {MAX_ENTRY_BYTES}"));
        }
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return ignore(e.to_string()),
        };
        match self.check(decode(&bytes), kind, key) {
            Ok(e) => Some(e),
            Err(why) => ignore(why.to_string()),
        }
    }

    /// A decoded entry, if it is of this kir's version and the `kind` and `key` asked for.
    fn check(
        &self,
        e: Result<Entry, EntryError>,
        kind: Kind,
        key: &Key,
    ) -> Result<Entry, EntryError> {
        let e = e?;
        if e.header.version != self.version {
            return Err(EntryError::Version {
                expected: self.version.clone(),
                found: e.header.version,
            });
        }
        if e.header.kind != kind || e.header.key != key.as_str() {
            return Err(EntryError::Foreign(format!(
                "it holds the {} entry {}",
                e.header.kind.name(),
                e.header.key
            )));
        }
        Ok(e)
    }

    /// Stores `sections` as the entry `key` of `kind`, atomically (see the module doc), and
    /// returns its file. `name` and `target` are for `kirc cache list`.
    pub fn store(
        &self,
        kind: Kind,
        key: &Key,
        name: &str,
        target: &str,
        sections: Vec<(String, Vec<u8>)>,
    ) -> Result<PathBuf, String> {
        let created = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let entry = Entry {
            header: Header {
                version: self.version.clone(),
                kind,
                key: key.to_string(),
                name: name.to_string(),
                target: target.to_string(),
                created,
            },
            sections,
        };
        let path = self.path(kind, key);
        write_atomic(&self.dir, &path, &encode(&entry), kind)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    /// Every entry file of the directory (also invalid ones, with why), sorted by file name;
    /// an empty list when the directory does not exist.
    pub fn list(&self) -> Result<Vec<Listed>, String> {
        let mut out = Vec::new();
        for path in self.entry_files()? {
            let Ok(meta) = fs::metadata(&path) else {
                continue; // removed meanwhile
            };
            let kind = path
                .extension()
                .and_then(|x| x.to_str())
                .and_then(Kind::from_name);
            let key = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(Key::parse);
            let header = match (kind, key) {
                _ if meta.len() > MAX_ENTRY_BYTES => Err(EntryError::Unparsable(format!(
                    "{} bytes, over the limit of {MAX_ENTRY_BYTES}",
                    meta.len()
                ))),
                (Some(kind), Some(key)) => match fs::read(&path) {
                    Ok(bytes) => self.check(decode(&bytes), kind, &key).map(|e| e.header),
                    Err(e) => Err(EntryError::Unparsable(e.to_string())),
                },
                _ => Err(EntryError::Foreign("not named <key>.<kind>".into())),
            };
            out.push(Listed {
                path,
                bytes: meta.len(),
                modified: meta.modified().ok(),
                header,
            });
        }
        Ok(out)
    }

    /// Removes every entry file and every leftover temporary file of the directory; returns how
    /// many files were removed. Other files are left alone.
    pub fn clear(&self) -> Result<usize, String> {
        let mut n = 0;
        for path in self.entry_files()? {
            match fs::remove_file(&path) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Ok(n)
    }

    /// The directory's files that are entries (by extension) or temporary files of a store,
    /// sorted by name.
    fn entry_files(&self) -> Result<Vec<PathBuf>, String> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", self.dir.display())),
        };
        let mut out: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
                name.starts_with(".tmp-") || Kind::from_name(ext).is_some()
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Writes `bytes` to `path` in `dir` atomically: a temporary file in `dir`, flushed to disk,
/// renamed over `path`; the directory is flushed too where the system allows it.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8], kind: Kind) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    fs::create_dir_all(dir)?;
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".tmp-{}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        kind.name()
    ));
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
