//! The persistent on-disk cache (docs/cache.md): compilations, the cubins ptxas assembled from
//! their PTX for a GPU architecture, and tuned configurations, kept between processes so that a second `kirc
//! compile`, `kirc run --device cuda` or `kirc bench` of the same thing skips compilation (and
//! the driver's JIT).
//!
//! - [`compile`] is the library's cached front door over [`crate::pipeline::compile`]: a hit
//!   returns the stored output, byte for byte what a fresh compilation produces; a miss
//!   compiles and stores. [`crate::pipeline::compile`] itself never touches the disk.
//! - [`Cache`] is one cache directory ([`location`] finds it from `KIR_CACHE_DIR`,
//!   `XDG_CACHE_HOME` and `HOME`); its entries are written atomically and checked on every read
//!   (store.rs), in a container with a checksum (entry.rs), under keys that hold everything
//!   the output depends on, the kir version included (key.rs). A second, read-only directory
//!   of prebuilt entries ([`prebuilt_location`]) is searched on a miss.
//! - Cubins and tuned configurations: [`Cache::lookup_cubin`], [`Cache::store_cubin`],
//!   [`Cache::lookup_tuned`], [`Cache::store_tuned`] (artifacts.rs); with the feature `cuda`,
//!   `load_program` loads a compiled program on a GPU from its cubin where it can (load.rs).
//!
//! The cache never makes a compilation fail: an entry that cannot be used is a miss with a
//! warning, and an entry that cannot be stored is reported in the [`Outcome`].

mod artifacts;
mod entry;
mod key;
#[cfg(feature = "cuda")]
mod load;
mod store;

pub use artifacts::TunedConfig;
pub use entry::{decode, encode, Entry, EntryError, Header, MAGIC};
pub use key::{
    compile_key, cubin_key, tuned_key, version, GpuId, Key, KeyBuilder, Kind, ShapeBucket,
    BUILD_ID, FORMAT_VERSION, KIR_VERSION,
};
#[cfg(feature = "cuda")]
pub use load::{load_program, Loaded};
pub use store::{
    location, location_from_env, prebuilt_location, Cache, Listed, Location, Warn, MAX_ENTRY_BYTES,
};

use crate::compile::{CompileError, Compiled, Emit};
use crate::plan::CompilePlan;

/// What the cache did for one compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No cache was used.
    Off,
    /// The output came from the entry of this key.
    Hit(Key),
    /// The output was compiled and stored under this key.
    Stored(Key),
    /// The output was compiled, but storing it under this key failed (why).
    NotStored(Key, String),
}

impl Outcome {
    /// The line `kirc compile --report` ends with: `cache: hit KEY`, `cache: stored KEY`,
    /// `cache: off`, or `cache: not stored KEY (WHY)`.
    pub fn line(&self) -> String {
        match self {
            Outcome::Off => "cache: off".into(),
            Outcome::Hit(k) => format!("cache: hit {k}"),
            Outcome::Stored(k) => format!("cache: stored {k}"),
            Outcome::NotStored(k, why) => format!("cache: not stored {k} ({why})"),
        }
    }
}

/// A compilation through the cache.
#[derive(Clone, Debug)]
pub struct Cached {
    /// The output. On a hit its `text`, `meta`, `tried` and `fusion` are the stored ones (equal to a fresh
    /// compilation's), its `module` is parsed back from the stored canonical text (equal to the
    /// fresh module; its spans point into that text, not the source), and its `reports` are
    /// empty: [`Cached::report`] holds them rendered.
    pub compiled: Compiled,
    /// The PTX backend's reports of every kernel, rendered with the source
    /// (`PtxReport::render(Some(src))`, concatenated), on a hit as on a miss.
    pub report: String,
    /// What the cache did.
    pub outcome: Outcome,
}

/// The sections of a compilation's entry.
const TEXT: &str = "text";
const META: &str = "meta";
const MODULE: &str = "module";
const REPORT: &str = "report";
const TRIED: &str = "tried";
const FUSION: &str = "fusion";

/// Compiles `src` as `plan` says through `cache`: the stored output on a hit, else
/// [`crate::pipeline::compile`], stored for next time. With `None` it compiles (outcome
/// [`Outcome::Off`]). Compile errors are never stored.
pub fn compile(
    src: &str,
    plan: &CompilePlan,
    cache: Option<&Cache>,
) -> Result<Cached, CompileError> {
    let Some(cache) = cache else {
        let compiled = crate::pipeline::compile(src, plan)?;
        let report = render(&compiled, src);
        return Ok(Cached {
            compiled,
            report,
            outcome: Outcome::Off,
        });
    };
    let key = compile_key(cache.version(), src, plan);
    if let Some(hit) = cache
        .load(Kind::Compiled, &key)
        .and_then(|e| read(cache, &e))
    {
        let (compiled, report) = hit;
        return Ok(Cached {
            compiled,
            report,
            outcome: Outcome::Hit(key),
        });
    }
    let compiled = crate::pipeline::compile(src, plan)?;
    let report = render(&compiled, src);
    let mut sections = vec![
        (TEXT.to_string(), compiled.text.clone().into_bytes()),
        (
            MODULE.to_string(),
            kir_ir::text::print(&compiled.module).into_bytes(),
        ),
        (REPORT.to_string(), report.clone().into_bytes()),
        (
            TRIED.to_string(),
            serde_json::Value::from(compiled.tried.clone())
                .to_string()
                .into_bytes(),
        ),
    ];
    if let Some(meta) = &compiled.meta {
        sections.push((META.to_string(), meta.to_string().into_bytes()));
    }
    if let Some(f) = &compiled.fusion {
        sections.push((FUSION.to_string(), f.clone().into_bytes()));
    }
    let name = match &plan.kernel {
        Some(k) => format!("{}/@{k}", compiled.module.name),
        None => compiled.module.name.clone(),
    };
    let emit = match plan.emit {
        Emit::Ir => "ir",
        Emit::Ptx => "ptx",
        Emit::Cuda => "cuda",
    };
    let target = format!("{} {emit}", plan.target.name());
    let outcome = match cache.store(Kind::Compiled, &key, &name, &target, sections) {
        Ok(_) => Outcome::Stored(key),
        Err(why) => {
            cache.warn(&format!("warning: kir cache: not stored: {why}"));
            Outcome::NotStored(key, why)
        }
    };
    Ok(Cached {
        compiled,
        report,
        outcome,
    })
}

/// The reports of `c`, rendered with `src`.
fn render(c: &Compiled, src: &str) -> String {
    c.reports.iter().map(|r| r.render(Some(src))).collect()
}

/// The compilation held by a valid entry; `None`, with a warning, when a section is missing or
/// does not parse (the entry is then recompiled and overwritten).
fn read(cache: &Cache, e: &Entry) -> Option<(Compiled, String)> {
    let parsed = (|| -> Result<(Compiled, String), String> {
        let text = |name: &str| {
            e.text(name)
                .ok_or_else(|| format!("no UTF-8 section `{name}`"))
        };
        let module = kir_ir::text::parse(text(MODULE)?)
            .map_err(|_| "its module does not parse".to_string())?;
        let meta = match e.section(META) {
            None => None,
            Some(b) => Some(
                serde_json::from_slice(b)
                    .map_err(|err| format!("its META does not parse: {err}"))?,
            ),
        };
        let tried = match serde_json::from_str::<serde_json::Value>(text(TRIED)?) {
            Ok(serde_json::Value::Array(items)) => items
                .into_iter()
                .map(|t| t.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>(),
            _ => None,
        }
        .ok_or("its list of tried schedules does not parse")?;
        let compiled = Compiled {
            text: text(TEXT)?.to_string(),
            meta,
            module,
            reports: Vec::new(),
            tried,
            fusion: match e.section(FUSION) {
                None => None,
                Some(_) => Some(text(FUSION)?.to_string()),
            },
        };
        Ok((compiled, text(REPORT)?.to_string()))
    })();
    match parsed {
        Ok(p) => Some(p),
        Err(why) => {
            cache.warn(&format!(
                "warning: kir cache: ignoring {}: {why}",
                cache
                    .path(Kind::Compiled, &Key::parse(&e.header.key)?)
                    .display()
            ));
            None
        }
    }
}
