//! The entries kept beside compilations: the cubin a GPU's driver produced from a PTX (so a
//! later process loads it with no JIT), and tuned configurations by shape bucket (written by a
//! tuner, read by compilations of shapes in the same bucket).
//!
//! Both are methods of [`Cache`]. A lookup that finds nothing valid returns `None` (with the
//! store's warning for a damaged or foreign file); a store that fails returns why, and the
//! caller goes on without the cache.

use super::key::{cubin_key, tuned_key, GpuId, Key, Kind, ShapeBucket};
use super::store::Cache;
use crate::plan::Flags;
use kir_backends::Target;

/// A configuration a tuner measured fastest for a shape bucket: `-D` tile constants and the
/// lowering flags. `None` leaves a choice to the per-target configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TunedConfig {
    /// `-D NAME=VALUE` tile constants.
    pub defines: Vec<(String, String)>,
    /// `--warps`.
    pub warps: Option<u32>,
    /// `--stages`.
    pub stages: Option<usize>,
    /// `--warp-specialize on|off`.
    pub warp_specialize: Option<bool>,
    /// `--persistent N` (0: off).
    pub persistent: Option<u32>,
    /// `--overlap on|off`.
    pub overlap: Option<bool>,
    /// `--swap-operands on|off`.
    pub swap_operands: Option<bool>,
    /// `--cluster on|off`.
    pub cluster: Option<bool>,
    /// `--stream-k on|off`.
    pub stream_k: Option<bool>,
}

impl TunedConfig {
    /// The compile plan's flags of this configuration (no interpreter plan).
    pub fn flags(&self) -> Flags {
        Flags {
            warps: self.warps,
            stages: self.stages,
            warp_specialize: self.warp_specialize,
            persistent: self.persistent,
            overlap: self.overlap,
            swap_operands: self.swap_operands,
            ws_plan: None,
            ws_ptx: None,
            fusion: Default::default(),
            cluster: self.cluster,
            stream_k: self.stream_k,
        }
    }

    /// The configuration as JSON (what the entry holds).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "defines": self.defines.iter().map(|(n, v)| [n, v]).collect::<Vec<_>>(),
            "warps": self.warps,
            "stages": self.stages,
            "warp_specialize": self.warp_specialize,
            "persistent": self.persistent,
            "overlap": self.overlap,
            "swap_operands": self.swap_operands,
            "cluster": self.cluster,
            "stream_k": self.stream_k,
        })
    }

    /// The configuration from [`TunedConfig::to_json`]'s JSON; `None` when it does not fit.
    pub fn from_json(v: &serde_json::Value) -> Option<TunedConfig> {
        let mut defines = Vec::new();
        for d in v.get("defines")?.as_array()? {
            let pair = d.as_array()?;
            match pair.as_slice() {
                [n, v] => defines.push((n.as_str()?.to_string(), v.as_str()?.to_string())),
                _ => return None,
            }
        }
        let opt_u64 = |k: &str| -> Option<Option<u64>> {
            match v.get(k)? {
                serde_json::Value::Null => Some(None),
                x => x.as_u64().map(Some),
            }
        };
        let opt_bool = |k: &str| -> Option<Option<bool>> {
            match v.get(k)? {
                serde_json::Value::Null => Some(None),
                x => x.as_bool().map(Some),
            }
        };
        Some(TunedConfig {
            defines,
            warps: opt_u64("warps")?.map(u32::try_from).transpose().ok()?,
            stages: opt_u64("stages")?.map(usize::try_from).transpose().ok()?,
            warp_specialize: opt_bool("warp_specialize")?,
            persistent: opt_u64("persistent")?.map(u32::try_from).transpose().ok()?,
            overlap: opt_bool("overlap")?,
            swap_operands: opt_bool("swap_operands")?,
            cluster: opt_bool("cluster")?,
            // Absent from entries written before the flag existed.
            stream_k: match v.get("stream_k") {
                None => None,
                Some(_) => opt_bool("stream_k")?,
            },
        })
    }
}

/// The header's description of a GPU (`NVIDIA H200 sm_90 driver 12080`).
fn describe(gpu: &GpuId) -> String {
    format!(
        "{} sm_{}{} driver {}",
        gpu.name, gpu.capability.0, gpu.capability.1, gpu.driver
    )
}

impl Cache {
    /// The cubin ptxas assembled from `ptx` for the architecture `arch` (`sm_90a`), if stored.
    pub fn lookup_cubin(&self, ptx: &str, arch: &str) -> Option<Vec<u8>> {
        let key = cubin_key(self.version(), ptx, arch);
        let e = self.load(Kind::Cubin, &key)?;
        match e.section("cubin") {
            Some(b) if !b.is_empty() => Some(b.to_vec()),
            _ => {
                let path = self.path(Kind::Cubin, &key);
                self.warn(&format!(
                    "warning: kir cache: ignoring {}: no cubin in it",
                    path.display()
                ));
                None
            }
        }
    }

    /// Stores the `cubin` that ptxas assembled from `ptx` (of the module `name`) for `arch`.
    pub fn store_cubin(
        &self,
        ptx: &str,
        arch: &str,
        name: &str,
        cubin: &[u8],
    ) -> Result<Key, String> {
        let key = cubin_key(self.version(), ptx, arch);
        let sections = vec![("cubin".to_string(), cubin.to_vec())];
        self.store(Kind::Cubin, &key, name, arch, sections)?;
        Ok(key)
    }

    /// The tuned configuration of `src` with the user's `defines` for `target` and the shapes
    /// of `bucket` (measured on `gpu` when given), if stored.
    pub fn lookup_tuned(
        &self,
        src: &str,
        defines: &[(String, String)],
        target: Target,
        bucket: &ShapeBucket,
        gpu: Option<&GpuId>,
    ) -> Option<TunedConfig> {
        let key = tuned_key(self.version(), src, defines, target, bucket, gpu);
        let e = self.load(Kind::Tuned, &key)?;
        let parsed = e
            .section("config")
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| TunedConfig::from_json(&v));
        if parsed.is_none() {
            let path = self.path(Kind::Tuned, &key);
            self.warn(&format!(
                "warning: kir cache: ignoring {}: its configuration does not parse",
                path.display()
            ));
        }
        parsed
    }

    /// Stores `config` as the tuned configuration of `src` (module `name`) with the user's
    /// `defines` for `target` and `bucket` (measured on `gpu` when given).
    #[allow(clippy::too_many_arguments)]
    pub fn store_tuned(
        &self,
        src: &str,
        name: &str,
        defines: &[(String, String)],
        target: Target,
        bucket: &ShapeBucket,
        gpu: Option<&GpuId>,
        config: &TunedConfig,
    ) -> Result<Key, String> {
        let key = tuned_key(self.version(), src, defines, target, bucket, gpu);
        let on = match gpu {
            Some(g) => format!("{} on {}", target.name(), describe(g)),
            None => target.name().to_string(),
        };
        let sections = vec![
            ("bucket".to_string(), bucket.as_str().as_bytes().to_vec()),
            (
                "config".to_string(),
                config.to_json().to_string().into_bytes(),
            ),
        ];
        self.store(Kind::Tuned, &key, name, &on, sections)?;
        Ok(key)
    }
}
