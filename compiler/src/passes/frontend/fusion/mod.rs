//! The `fusion` pass: kernel-graph fusion over a module's program.
//!
//! The program is a petgraph graph: one node per launch, one edge per buffer a launch writes and
//! a later launch reads. On that graph the pass applies, until nothing changes, the first of
//! these that applies (temp elimination first):
//! - **horizontal merge** of two adjacent launches with the same grid that share an input buffer
//!   and do not depend on each other (gemm(gate) + gemm(up) on the same `a`): the bodies are
//!   concatenated, equal ops merged (CSE), and loops with the same bounds merged, so the shared
//!   loads happen once and both accumulators live in one loop;
//! - **RMSNorm → GEMM fusion** when the byte estimate says it pays (`norm.rs`);
//! - **epilogue fusion** of an elementwise consumer (straight-line, every load and the store at
//!   the same offsets, only elementwise ops) into the kernel that stores the buffers it reads:
//!   its ops are re-instantiated on the producer's stored tiles right after the stores;
//! - **temp elimination**: a temp no launch reads any more loses its stores, params and
//!   bindings; a launch left without stores is dropped, and so is its kernel.
//!
//! Every decision, and every candidate not fused with the reason, goes into a [`FusionReport`].
//! A module without a program, or without fusible patterns, comes back unchanged.

mod epilogue;
mod norm;
mod norm_match;
mod program;
mod state;

pub use crate::traffic::bytes_moved;
pub use state::{FusionReport, NOMINAL_DIM};

use kir_ir::{renumber::renumber_kernel, verifier, Module};
use state::State;

/// Fuses the program of `m`; see the module doc.
pub fn fusion(m: &Module) -> Module {
    fusion_with_report(m).0
}

/// [`fusion`] with its report. If the fused module does not verify, `m` is returned unchanged
/// and the report says so.
pub fn fusion_with_report(m: &Module) -> (Module, FusionReport) {
    let mut rep = FusionReport::default();
    let Some(prog) = &m.program else {
        return (m.clone(), rep);
    };
    let nominal = |_: &str| Some(NOMINAL_DIM);
    rep.bytes.0 = bytes_moved(m, &nominal);
    rep.kernels.0 = prog.launches.len();
    let mut st = State {
        kernels: prog
            .launches
            .iter()
            .filter_map(|l| m.kernel(&l.kernel).map(|(_, k)| k.clone()))
            .collect(),
        prog: prog.clone(),
        rep: &mut rep,
    };
    if st.kernels.len() != st.prog.launches.len() {
        return (m.clone(), rep);
    }
    loop {
        let changed =
            st.eliminate_temps() || st.merge_horizontal() || st.fuse_norm() || st.fuse_epilogue();
        if !changed {
            break;
        }
    }
    let (kernels, prog) = (st.kernels, st.prog);
    if rep.fused.is_empty() {
        rep.kernels.1 = rep.kernels.0;
        rep.bytes.1 = rep.bytes.0;
        return (m.clone(), rep);
    }
    let mut out = m.clone();
    out.kernels = cranelift_entity::PrimaryMap::new();
    for mut k in kernels {
        if out.kernel(&k.name).is_none() {
            renumber_kernel(&mut k);
            out.kernels.push(k);
        }
    }
    out.program = Some(prog);
    if let Err(d) = verifier::verify(&out) {
        rep.not_fused.push(format!(
            "kept the unfused module: the fused one does not verify: {}",
            d.0[0].message
        ));
        rep.fused.clear();
        rep.buffers_eliminated.clear();
        rep.kernels.1 = rep.kernels.0;
        rep.bytes.1 = rep.bytes.0;
        return (m.clone(), rep);
    }
    rep.kernels.1 = out.program.as_ref().map_or(0, |p| p.launches.len());
    rep.bytes.1 = bytes_moved(&out, &nominal);
    (out, rep)
}
