//! Loading a compiled program on a GPU through the cache (feature `cuda`): the cubin of its
//! PTX for the GPU's architecture from the cache or its prebuilt directory (no JIT), else one
//! ptxas assembles now (and the cache keeps), else the PTX through the driver's JIT. What `kirc
//! run --device cuda`, `kirc bench` and the Python package's `load` share.

use super::store::Cache;
use crate::compile::Compiled;
use kir_backends::runtime::{self, Gpu, Image, Program, RuntimeError};
use kir_backends::Target;

/// Where a loaded program's code came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// A cubin stored in the cache or shipped in its prebuilt directory.
    CachedCubin,
    /// A cubin ptxas assembled for this load, now stored in the cache.
    AssembledCubin,
    /// The PTX, JIT-compiled by the driver.
    Jit,
}

impl Loaded {
    /// How `kirc bench` names it.
    pub fn describe(self) -> &'static str {
        match self {
            Loaded::CachedCubin => "the cubin of the kir cache",
            Loaded::AssembledCubin => "a cubin ptxas assembled, now cached",
            Loaded::Jit => "the PTX, through the driver's JIT",
        }
    }
}

/// Loads `c` (PTX compiled for `target`, with its META) on `gpu`. With a `cache`: its cubin for
/// the GPU's architecture ([`runtime::cubin_arch`]) if stored, else one ptxas assembles (stored
/// for next time; without a ptxas, or when it fails, the PTX is loaded instead). A stored cubin
/// the driver refuses (a driver too old for it) is passed over with a warning through the
/// cache, and the PTX loaded. Without a cache, the PTX.
pub fn load_program<'g>(
    gpu: &'g Gpu,
    c: &Compiled,
    target: Target,
    cache: Option<&Cache>,
) -> Result<(Program<'g>, Loaded), RuntimeError> {
    let meta = c
        .meta
        .as_ref()
        .ok_or_else(|| RuntimeError::Cuda("a compilation without META.json".into()))?;
    if let Some(cache) = cache {
        let arch = runtime::cubin_arch(gpu.capability, target);
        let (bin, how) = match cache.lookup_cubin(&c.text, &arch) {
            Some(bin) => (Some(bin), Loaded::CachedCubin),
            None => {
                let bin = runtime::cubin(gpu, &c.text, target).ok();
                if let Some(b) = &bin {
                    if let Err(why) = cache.store_cubin(&c.text, &arch, &c.module.name, b) {
                        cache.warn(&format!("warning: kir cache: cubin not stored: {why}"));
                    }
                }
                (bin, Loaded::AssembledCubin)
            }
        };
        if let Some(bin) = bin {
            match Program::load_image(gpu, Image::Cubin(&bin), meta, &c.module) {
                Ok(p) => return Ok((p, how)),
                Err(RuntimeError::Cuda(m)) if how == Loaded::CachedCubin => {
                    let first = m.lines().next().unwrap_or("");
                    cache.warn(&format!(
                        "warning: kir cache: the stored cubin did not load ({first}); loading the PTX"
                    ));
                }
                Err(e) => return Err(e),
            }
        }
    }
    Program::load(gpu, &c.text, meta, &c.module).map(|p| (p, Loaded::Jit))
}
