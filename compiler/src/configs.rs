//! Per-target default configurations: the tile constants, warps, ring depth, warp specialization
//! and persistence that `kirc compile/run/bench` use when the user gives none, chosen per
//! (kernel structure, specialization, target, backend) from H200 measurements
//! (docs/benchmarks.md; the calls behind each row in docs/history/benchmarks-log.md). A kernel's
//! `.kir` file keeps the defaults that fit every target; a row here replaces them on the targets
//! it names; the rows are in compiler/src/configs/table.rs and (attention, forward and backward)
//! compiler/src/configs/attention_rows.rs. docs/configs.md describes the model
//! and how to add a row.
//!
//! Rows are keyed by what a kernel IS, as compiler/src/structure/ reads it from the IR: a class
//! ([`Class`](crate::structure::Class): dot loop, attention, attention backward), a condition on
//! its structural [`Features`](crate::structure::Features) (operand dtype, head dim, causal,
//! additive mask, transposed A, dots in the loop) and values for ROLES
//! ([`Role`](crate::structure::Role): M/N/K tile, query/key block, group), which the analysis
//! maps to the kernel's own constants. Built-in ops and users' kernels of the same structure get
//! the same row; names of modules, kernels and constants are never read.
//!
//! Rule: the first row whose class, target, backend and condition match is the candidate. It
//! applies unless the user set, with `-D`, a constant playing one of its roles, or gave `--warps`
//! or `--stages` (a row never mixes with a partial user choice), or a role's constant is a
//! literal tile rather than a constant, or a role's constant's `where` clause rejects the row's
//! value. A role the kernel lacks (no group constant) is skipped. [`Config::report`] says which
//! row applied and why, or why none did (`kirc compile --report`).
//! This is the seam where measured (autotuned) configurations will be looked up first.

mod attention_rows;
mod table;

use crate::passes::const_values;
use crate::structure::{NoRole, Role, Structure};
use attention_rows::ATTENTION_ROWS;
use kir_backends::Target;
use kir_ir::Module;
use table::ROWS;

/// What a row sets: tile constants (as `-D` values) and the warps per block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Constants to define, in the row's order.
    pub defines: Vec<(String, String)>,
    /// Warps per block (`None`: the backend's policy).
    pub warps: Option<u32>,
    /// The ring depth to try first (`None`: the compile driver's default); a ring that does
    /// not fit the target's shared memory gets fewer stages, as the default does.
    pub stages: Option<usize>,
    /// Warp-specialize (a producer warpgroup on tensor copies and `setmaxnreg` budgets) where
    /// the kernel qualifies; the compile driver keeps the unspecialized kernel where it does not.
    pub warp_specialize: bool,
    /// With warp specialization: a persistent grid of the target's SM count (`persistent`).
    pub persistent: bool,
    /// Pair the TMA rings' q·kᵀ of block j with the p·v of block j − 1 (`dot_overlap`).
    pub overlap: bool,
    /// Compute each dot loop's accumulator transposed (`swap_operands`: few rows as wgmma's N).
    pub swap_operands: bool,
    /// With warp specialization on a persistent grid: clusters of two programs that share their
    /// copies (`cluster`), where the kernel qualifies.
    pub cluster: bool,
    /// With a persistent grid: its last tiles shared out by K iterations (`stream_k`), where
    /// the kernel qualifies.
    pub stream_k: bool,
    /// Blocks per SM that ptxas must fit (`.minnctapersm`), where ptxas's own register cap
    /// spills (`PtxOptions::min_blocks`).
    pub min_blocks: Option<u32>,
    /// With warp specialization: at most this many registers a consumer thread (`None`: what
    /// the block leaves it, up to `setmaxnreg`'s 256).
    pub consumer_regs: Option<u32>,
    /// With warp specialization: a kernel whose grid has the constant extent 2 along axis 2
    /// (two programs of a tile with different roles) runs them as two consumers of one block.
    pub roles: bool,
    /// With a persistent grid, for a kernel with no group constant of its own: its tiles
    /// walked in groups of this many rows (the row's group value; `persistent` pass).
    pub tile_group: Option<u32>,
    /// Which row applied and why, or why none did: the `configuration:` line of
    /// `kirc compile --report` (empty where no configuration was looked up).
    pub report: String,
}

impl Config {
    /// No row, and why.
    pub fn none(why: impl std::fmt::Display) -> Config {
        Config {
            report: format!("configuration: none ({why})"),
            ..Config::default()
        }
    }
}

/// The configuration for a module of structure `s` (the generic module `generic`, whose `where`
/// clauses the row's values must pass) on `target` (for the CUDA-C backend when `cuda`), given
/// the constants the user defined and whether the user chose the warps or the stages. Without a
/// row, only [`Config::report`] is set.
pub fn target_config(
    s: &Structure,
    generic: &Module,
    target: Target,
    cuda: bool,
    user_defines: &[(String, String)],
    user_tiles: bool,
) -> Config {
    let Some(class) = s.class else {
        let kernels: Vec<String> = s
            .kernels
            .iter()
            .map(|k| format!("kernel `{}`: {}", k.name, k.kind))
            .collect();
        return Config::none(kernels.join("; "));
    };
    let backend = if cuda { "CUDA-C " } else { "" };
    let what = format!("{} {backend}{} row", target.name(), class.name());
    let Some(row) = ROWS.iter().chain(ATTENTION_ROWS).find(|r| {
        r.class == class && r.targets.contains(&target) && r.cuda == cuda && (r.when)(&s.features)
    }) else {
        return Config::none(format!(
            "no {} {backend}{} row matches: {}",
            target.name(),
            class.name(),
            s.describe()
        ));
    };
    // A kernel that orders its tiles in no groups of its own walks a persistent grid in the
    // row's groups of rows (bit for bit the same tiles, in another order), whoever asked for the
    // grid (the row, `--persistent`, a tuned candidate): the order is no tile choice.
    let tile_group = row
        .set
        .iter()
        .find(|(r, _)| *r == Role::Group)
        .filter(|_| matches!(s.role(Role::Group), Err(NoRole::Absent)))
        .and_then(|(_, v)| u32::try_from(*v).ok());
    let none = |why: String| Config {
        tile_group,
        ..Config::none(match tile_group {
            Some(g) => format!(
                "{why}; a persistent grid walks the tiles in groups of {g} rows, the row's \
                 group, as the kernel orders them in none"
            ),
            None => why,
        })
    };
    if user_tiles {
        return none(format!(
            "--warps or --stages given, so the {what} is not applied: a row never mixes with a \
             partial user choice"
        ));
    }
    let mut defines: Vec<(String, String)> = vec![];
    let mut parts: Vec<String> = vec![];
    for (role, value) in row.set {
        let c = match s.role(*role) {
            Ok(c) => c,
            Err(NoRole::Absent) if *role == Role::Group && row.persistent => {
                parts.push(format!(
                    "{} {value} (none in the kernel: the persistent grid walks its tiles in \
                     groups of {value} rows)",
                    role.name()
                ));
                continue;
            }
            Err(NoRole::Absent) => {
                parts.push(format!("{} skipped (none in the kernel)", role.name()));
                continue;
            }
            Err(NoRole::NotConstant) => {
                return none(format!(
                    "the {what} sets the {}, which is not a constant in the kernel",
                    role.name()
                ))
            }
        };
        if interface_dim(generic, c) {
            return none(format!(
                "the {what} sets the {}, which is `{c}`, a dim of the kernel's tensors (part of \
                 its interface, not a tile)",
                role.name()
            ));
        }
        if user_defines.iter().any(|(u, _)| u == c) {
            return none(format!(
                "-D {c} given, the {} of the {what}: a row never mixes with a partial user choice",
                role.name()
            ));
        }
        match defines.iter().find(|(n, _)| n == c) {
            Some((_, v)) if *v != value.to_string() => {
                return none(format!(
                    "the {what} sets {c} to both {v} and {value} (it plays two roles)"
                ))
            }
            Some(_) => parts.push(format!("{c}={value} ({})", role.name())),
            None => {
                defines.push((c.to_string(), value.to_string()));
                parts.push(format!("{c}={value} ({})", role.name()));
            }
        }
    }
    let mut all = user_defines.to_vec();
    all.extend(defines.iter().cloned());
    if let Err(d) = const_values(generic, &all) {
        let msg = d.0.first().map(|d| d.message.clone()).unwrap_or_default();
        return none(format!("the {what} does not fit the constants: {msg}"));
    }
    if let Some(w) = row.warps {
        parts.push(format!("warps {w}"));
    }
    if let Some(st) = row.stages {
        parts.push(format!("stages {st}"));
    }
    if row.warp_specialize {
        parts.push("warp-specialized".into());
    }
    if row.persistent {
        parts.push("persistent".into());
    }
    if row.overlap {
        parts.push("overlap".into());
    }
    if row.swap_operands {
        parts.push("operands swapped".into());
    }
    if row.cluster {
        parts.push("clusters of 2".into());
    }
    if row.stream_k {
        parts.push("stream-K tail".into());
    }
    if let Some(n) = row.min_blocks {
        parts.push(format!("at least {n} blocks per SM"));
    }
    if let Some(n) = row.consumer_regs {
        parts.push(format!("consumer at {n} registers"));
    }
    if row.roles {
        parts.push("the two programs of grid axis 2 as two consumers".into());
    }
    Config {
        report: format!(
            "configuration: {what}: {} — matched: {}",
            parts.join(", "),
            s.describe()
        ),
        defines,
        warps: row.warps,
        stages: row.stages,
        warp_specialize: row.warp_specialize,
        persistent: row.persistent,
        overlap: row.overlap,
        swap_operands: row.swap_operands,
        cluster: row.cluster,
        stream_k: row.stream_k,
        min_blocks: row.min_blocks,
        consumer_regs: row.consumer_regs,
        roles: row.roles,
        tile_group,
    }
}

/// The configurations of a module whose kernels make no class together (a program of a norm
/// and a GEMM), kernel by kernel: each kernel's row by its own structure
/// ([`crate::structure::of_kernel`]), applied under the same rules as a module's. The rows'
/// tile constants are merged into the module's one set of defines: a constant that an earlier
/// kernel's row set to another value (kernels sharing a tile constant) keeps that value, and
/// the later kernel gets no row, as does one whose values break a `where` clause together with
/// the earlier rows'. Empty unless the module has two or more kernels and no class. For the
/// CUDA-C backend (which lowers a module as one) only the merged tiles matter: it has no warps,
/// rings or roles, and only its own rows (`cuda_row`) apply.
pub fn kernel_configs(
    s: &Structure,
    generic: &Module,
    target: Target,
    cuda: bool,
    user_defines: &[(String, String)],
    user_tiles: bool,
) -> Vec<(String, Config)> {
    if s.class.is_some() || s.kernels.len() < 2 {
        return vec![];
    }
    let each: Vec<Structure> = s.kernels.iter().map(crate::structure::of_kernel).collect();
    merged_configs(&each, generic, target, cuda, user_defines, user_tiles)
}

/// The configurations of the kernels of `fused`, the module the `fusion` pass made of a module
/// configured kernel by kernel (`source`, the generic module's structure; [`kernel_configs`]):
/// a kernel that fusion left as it was takes its own row as before; a kernel that fusion made
/// (two projections over shared loads of A, a GEMM with its consumer's elementwise work) is
/// classified by what it is now and takes the row of that structure. Its tiles are literals
/// in the specialized module, so each role it plays is mapped back to the one constant that
/// plays that role in every source kernel of its kind (a role whose source kernels name
/// different constants, or none, has no constant, and no row applies). Merged as
/// [`kernel_configs`] merges. Each report names the kernel.
pub fn fused_configs(
    fused: &Structure,
    source: &Structure,
    generic: &Module,
    target: Target,
    cuda: bool,
    user_defines: &[(String, String)],
    user_tiles: bool,
) -> Vec<(String, Config)> {
    let each: Vec<Structure> = fused
        .kernels
        .iter()
        .map(|k| match source.kernels.iter().find(|s| s.name == k.name) {
            Some(kept) => crate::structure::of_kernel(kept),
            None => {
                let mut k = k.clone();
                for (role, name) in &mut k.roles {
                    let mut names: Vec<&str> = source
                        .kernels
                        .iter()
                        .filter(|s| s.kind == k.kind)
                        .flat_map(|s| s.roles.iter())
                        .filter(|(r, _)| r == role)
                        .filter_map(|(_, n)| n.as_deref())
                        .collect();
                    names.sort_unstable();
                    names.dedup();
                    if let [one] = names[..] {
                        *name = Some(one.to_string());
                    }
                }
                crate::structure::of_kernel(&k)
            }
        })
        .collect();
    merged_configs(&each, generic, target, cuda, user_defines, user_tiles)
}

/// Each kernel's configuration (`each`: one single-kernel structure per kernel, in launch
/// order) by [`target_config`], the rows' tile constants merged into the module's one set of
/// defines: a constant that an earlier kernel's row set to another value keeps that value, and
/// the later kernel gets no row, as does one whose values break a `where` clause together with
/// the earlier rows'.
fn merged_configs(
    each: &[Structure],
    generic: &Module,
    target: Target,
    cuda: bool,
    user_defines: &[(String, String)],
    user_tiles: bool,
) -> Vec<(String, Config)> {
    // (constant, value, the kernel whose row set it)
    let mut merged: Vec<(String, String, String)> = vec![];
    let mut out = vec![];
    for ks in each {
        let Some(k) = ks.kernels.first() else {
            continue;
        };
        let mut c = if ks.class.is_none() {
            Config::none(&k.kind)
        } else {
            target_config(ks, generic, target, cuda, user_defines, user_tiles)
        };
        let clash = c.defines.iter().find_map(|(n, v)| {
            merged
                .iter()
                .find(|(m, w, _)| m == n && w != v)
                .map(|(_, w, other)| {
                    format!("its row sets {n}={v}, but kernel `{other}`'s row set {n}={w}")
                })
        });
        let mut all = user_defines.to_vec();
        all.extend(merged.iter().map(|(n, v, _)| (n.clone(), v.clone())));
        all.extend(c.defines.iter().cloned());
        let why = clash.or_else(|| {
            const_values(generic, &all).err().map(|d| {
                let msg = d.0.first().map(|d| d.message.clone()).unwrap_or_default();
                format!("its row and the earlier kernels' rows do not fit the constants: {msg}")
            })
        });
        if let Some(why) = why {
            c = Config::none(why);
        }
        for (n, v) in &c.defines {
            if !merged.iter().any(|(m, _, _)| m == n) {
                merged.push((n.clone(), v.clone(), k.name.clone()));
            }
        }
        c.report = c.report.replacen(
            "configuration: ",
            &format!("configuration: kernel `{}`: ", k.name),
            1,
        );
        out.push((k.name.clone(), c));
    }
    out
}

/// Whether constant `c` appears in a declared dim of some kernel's or the program's tensor
/// params (`q: in tensor<T>[B, H, S, HEAD_DIM]`): such a constant is part of the interface, and
/// a row never sets it.
fn interface_dim(generic: &Module, c: &str) -> bool {
    let names = |p: &kir_ir::Param| match &p.kind {
        kir_ir::ParamKind::Tensor(_, tt) => tt.dims.iter().any(|d| mentions(d, c)),
        kir_ir::ParamKind::Scalar(_) => false,
    };
    generic.kernels.values().any(|k| k.params.iter().any(names))
        || generic
            .entry_params()
            .is_some_and(|ps| ps.iter().any(names))
}

/// Whether expression `e` names `c`.
fn mentions(e: &kir_ir::Expr, c: &str) -> bool {
    let mut found = false;
    e.for_each_ident(&mut |n, _| found |= n == c);
    found
}
