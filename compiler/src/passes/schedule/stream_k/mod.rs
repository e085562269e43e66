//! Stream-K: a persistent grid whose last tiles are shared out by K iterations, so that the
//! last wave keeps every program busy (Osama et al., "Stream-K", PPoPP 2023: the
//! "data-parallel + one-tile stream-K" hybrid).
//!
//! On a persistent grid of P programs, T tiles leave a last wave of R = T mod P tiles: for
//! about one tile's time, P − R programs idle (GEMM 16384×14336×4096 in 128×256 tiles: 7,168
//! tiles, 40 in the last wave of 132). Here, when T ≥ 2P and R > 0, the last R + P tiles are
//! cut along their K loop: their I·(R + P) iterations (I per tile) are split into P contiguous
//! ranges, one per program, of equal length to within one; the other T − R − P tiles (a
//! multiple of P) run whole, as the `persistent` pass runs them. So every program ends within
//! one iteration of the others.
//!
//! Input: a kernel that `persistent` takes ([`super::persistent::qualifies`]) whose body is a
//! prologue with no memory writes, one top-level `for` (the K loop) and an epilogue, where
//! - the loop's bounds do not depend on the tile (built from constants, dims and params) and
//!   its step is a positive constant;
//! - each carried value whose result the epilogue reads starts as a zero f32 tile and is
//!   only the accumulator of one `dot` of the body (so the result is a sum over iterations,
//!   and partial sums over disjoint iteration ranges add up to it); a carried value that the
//!   body passes through unchanged must be unused after the loop;
//! - the loop body writes no memory.
//!
//! Other kernels are left as they are, for the `persistent` pass that runs next (it does not
//! take a kernel this pass rewrote: that kernel holds semaphores).
//!
//! Output, for program p (`program_id 0`):
//! - the kernel walks units `for %u = 0 to n_units`: first its whole tiles p, p + P, … below
//!   T − S (S = R + P stream-K tiles, or 0 when T < 2P, R = 0 or the loop has no iteration),
//!   then, backwards, the tiles its iteration range [⌊p·S·I/P⌋, ⌊(p+1)·S·I/P⌋) touches,
//!   each for the part of its K loop inside the range;
//! - each unit runs the prologue (tile coordinates in grid order, as `persistent` computes
//!   them) and the K loop over its iterations. A range is at least I iterations long (S > P),
//!   so it never lies inside one tile: a tile is either whole in one program or split between
//!   programs p − 1 (its first iterations, computed in p − 1's first stream-K unit) and p (its
//!   last ones, in p's last unit). p − 1 stores its partial accumulators into its slot of an
//!   f32 temp (`stream_k_partials`, [P, tile] per accumulator) and signals
//!   `stream_k_flags[p − 1]` (`sem_signal`); p waits for that signal (`sem_wait …, 1`) and
//!   starts its K loop from the slot instead of zero, then runs the epilogue.
//!
//! So no program adds two tiles in registers (which would hold twice the accumulators), the
//! waits are short (p − 1 computed the partial first, p needs it last), the IR's rule (a
//! program waits only for programs before it in grid order) holds, and each tile's sum is in a
//! fixed order, so results are the same from run to run (not bit-identical to the plain K
//! loop's, whose order of additions differs).
//!
//! The counters must be zero when the kernel starts: the pass adds a kernel
//! (`<kernel>_stream_k_zero`) that zeroes them, launched right before each launch of the
//! kernel, and the temps to the module's program (made if the module had none: its params are
//! the kernel's, launched as they are).
//!
//! Measured on an H100 (docs/history/benchmarks-log.md, "stream-K", calls I1–I5): correct and
//! the same bits run to run, but not yet faster than the persistent grid it replaces (8192 ×
//! 14336 × 4096 −0.7 %, 16384 × 14336 × 4096 +0.3 %, 4096³ +14 % in kernel time), so no
//! configuration row turns it on; `--stream-k on` does.
mod program;
mod rewrite;
mod shape;

use super::persistent;
use kir_ir::{Diagnostic, Diagnostics, Module, Span};
use program::{add_launches, fresh_names};
use shape::Shape;

/// Rewrites every kernel of `m` that qualifies (see the module doc) onto a persistent grid of
/// `programs` programs with a stream-K tail, and adds the temps and the zeroing launches to
/// the module's program. `programs` must be at least 1. With `strict` (`--stream-k on`), a
/// module none of whose kernels qualifies is an error that says why each does not.
pub fn stream_k(m: &Module, programs: u32, strict: bool) -> Result<Module, Diagnostics> {
    if programs == 0 {
        return Err(Diagnostics(vec![Diagnostic::new(
            Span::default(),
            "a persistent grid needs at least one program".to_string(),
        )]));
    }
    let mut out = m.clone();
    let mut split = vec![];
    let mut why = vec![];
    let ids: Vec<_> = out.kernels.keys().collect();
    for id in ids {
        let k = &out.kernels[id];
        if !persistent::qualifies(k) {
            why.push(Diagnostic::new(
                k.span,
                format!(
                    "`@{}` cannot share out its last tiles by K iterations: a persistent grid \
                     does not take it (no top-level loop, a one-program grid, scheduled IR or \
                     semaphores)",
                    k.name
                ),
            ));
            continue;
        }
        match Shape::of(k) {
            Ok(s) => {
                let original = k.params.clone();
                let names = fresh_names(&out, &k.name, s.accs.len());
                let k = &mut out.kernels[id];
                rewrite::rewrite(k, programs, &s, &names);
                kir_ir::renumber::renumber_kernel(k);
                split.push((k.name.clone(), original, names));
            }
            Err(e) => why.push(Diagnostic::new(
                k.span,
                format!(
                    "`@{}` cannot share out its last tiles by K iterations: {e}",
                    k.name
                ),
            )),
        }
    }
    if strict && split.is_empty() {
        return Err(Diagnostics(why));
    }
    for (kernel, original, names) in split {
        add_launches(&mut out, &kernel, original, &names, programs)?;
    }
    Ok(out)
}
