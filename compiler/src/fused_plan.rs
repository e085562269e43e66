//! The plan of a program's fused form: the `fusion` pass can turn a module configured kernel by
//! kernel (two projections over the same activations and a SwiGLU, a norm and a GEMM) into a
//! kernel that no source kernel is, and that kernel's schedule should come from what it is, as
//! every kernel's does (docs/configs.md, "Fused kernels"). Without this the fused kernel kept the
//! tiles its first source kernel's row chose (a 128×256 tile, now carrying two accumulators) and
//! none of the row's warps, ring or warp roles, and the fusion cost model (`crate::cost`)
//! weighed that schedule against the unfused kernels' rows.
//!
//! [`CompilePlan::for_fused`] classifies the fused module's kernels (compiler/src/structure/)
//! and looks up their rows ([`configs::fused_configs`]); the pipeline lowers the fused candidate
//! with that plan and the unfused one with the plan it was given.

use crate::compiled::Emit;
use crate::configs;
use crate::passes::const_values;
use crate::plan::CompilePlan;
use kir_ir::Module;

impl CompilePlan {
    /// The user's own `-D` values: the plan's defines that no configuration set.
    pub fn user_defines(&self) -> Vec<(String, String)> {
        self.defines
            .iter()
            .filter(|(n, _)| !self.configured(n))
            .cloned()
            .collect()
    }

    /// The plan for `fused`, the specialized module the front end's `fusion` pass made of
    /// `src`: each kernel that fusion made takes the row of its own structure, each kernel it
    /// left takes the row it had, and the rows' tile constants replace the ones the plan's
    /// configurations chose (the user's `-D`s stand). `None` where the plan was not configured
    /// kernel by kernel (a module with a class keeps its one configuration; a named
    /// warp-specialization plan has none), where a kernel that fusion made matches no row (it
    /// keeps the tiles the source kernels' rows chose, as the plan has them), or where `src`
    /// does not parse or specialize. A fused module of one kernel gets that kernel's
    /// configuration as the module's.
    pub fn for_fused(&self, src: &str, fused: &Module) -> Option<CompilePlan> {
        if self.kernel_configs.is_empty() {
            return None;
        }
        let generic = kir_ir::text::parse(src).ok()?;
        let user = self.user_defines();
        let values = const_values(&generic, &user).ok()?;
        let source = crate::structure::analyze(&generic, &values).with_dims(&self.dims);
        let now = crate::structure::analyze(fused, &[]).with_dims(&self.dims);
        let user_tiles = self.flags.warps.is_some() || self.flags.stages.is_some();
        let mut each = configs::fused_configs(
            &now,
            &source,
            &generic,
            self.target,
            self.emit == Emit::Cuda,
            &user,
            user_tiles,
        );
        // A kernel that fusion made and no row fits (the RMSNorm folded into a GEMM's A
        // operand is no class) keeps what it had: the source kernels' tiles.
        let made_without_row = each.iter().any(|(name, c)| {
            !source.kernels.iter().any(|k| &k.name == name)
                && c.defines.is_empty()
                && c.warps.is_none()
        });
        if made_without_row {
            return None;
        }
        let mut plan = self.clone();
        plan.defines = user;
        for (_, c) in &each {
            for d in &c.defines {
                if !plan.defines.iter().any(|(n, _)| *n == d.0) {
                    plan.defines.push(d.clone());
                }
            }
        }
        if let [(_, one)] = &mut each[..] {
            plan.config = std::mem::take(one);
            plan.kernel_configs = vec![];
        } else {
            plan.config = configs::Config::default();
            plan.kernel_configs = each;
        }
        Some(plan)
    }
}
