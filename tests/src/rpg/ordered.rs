//! Ordered sections: now and then a kernel gets a semaphore counter (an `inout` i32 tensor named
//! `sem…`, [1] or [2], whose input is all zeros: `inputs::is_counter`) that nothing but
//! `sem_wait` and `sem_signal` touches, and orders one `atomic_add` across its programs with it,
//! the pattern of attention_bwd's `ORDERED = 1` (docs/ir.md):
//!
//! ```text
//! %rank = program_id 0 + num_programs 0 · (program_id 1 + num_programs 1 · program_id 2)
//! sem_wait sem[OFF], %rank            (i32; the grid's axes only, now and then all three)
//! atomic_add acc[…], %v … guard        (at the block, or every program at the origin)
//! sem_signal sem[OFF] [guard]
//! ```
//!
//! The section sits at the top level of the body (never inside an `if`, a `for` or a
//! `static_if`), so every program runs it exactly once and signals once: program p finds the count
//! p exactly when every program before it in grid order has signalled, so no wait is for a later
//! program and none lasts forever, on the interpreter (which runs such kernels one program at a
//! time in grid order) and on a GPU. Each kernel that has a section has a counter of its own (a
//! counter is not reset between launches), which ends holding the number of programs. The
//! accumulator is the kernel's own (`acc`) or one the section brings (`oacc…`, never loaded or
//! stored either); the bound analysis treats the ordered add like any atomic.
//!
//! The section is written after the body and then moved to a random top-level position after
//! every value it reads; its draws, and whether a kernel has one (one in [`ONE_IN`]), come from
//! streams of their own: a seed none of whose kernels gets a section generates the program it
//! generated before sections existed, and one that gets a section differs from that program only
//! by the section's lines and the params (and launch arguments) it adds.

use super::gen::{mix, Kb, Tensor};
use super::gen_ctl::Origin;
use super::ty::{Facts, Ty};
use crate::Rng;
use kir_ir::Dtype;
use std::collections::HashSet;

/// One kernel in this many gets an ordered section.
pub const ONE_IN: usize = 12;

/// A kernel's ordered section, decided before its body is built.
#[derive(Clone, Debug)]
pub struct Ordered {
    /// The seed of the section's own random stream.
    pub seed: u64,
    /// The counter: `sem…`, i32, `inout`, [1] or [2].
    pub counter: Tensor,
    /// The accumulator the section adds into.
    pub acc: Tensor,
    /// Whether `acc` is the section's own (a param the kernel gains with the counter).
    pub new_acc: bool,
}

/// Whether kernel number `kernel` of `seed` (with `tensors`) gets an ordered section; its
/// counter is `sem{suffix}`, its accumulator the kernel's `acc` or a new `oacc{suffix}`.
pub fn plan(seed: u64, kernel: usize, suffix: &str, tensors: &[Tensor]) -> Option<Ordered> {
    let mut r = Rng::seeded(mix(seed, 0x5E3A_0000 + kernel as u64));
    if r.range(0, ONE_IN) != 0 {
        return None;
    }
    let counter = Tensor {
        name: format!("sem{suffix}"),
        access: "inout",
        dt: Dtype::I32,
        dims: vec![["1", "2"][r.range(0, 2)]],
        atomic: true,
    };
    let own = tensors.iter().find(|t| t.atomic).cloned();
    let new_acc = own.is_none();
    let acc = own.unwrap_or_else(|| Tensor {
        name: format!("oacc{suffix}"),
        access: "inout",
        dt: [Dtype::F32, Dtype::I32][r.range(0, 2)],
        dims: [vec!["M"], vec!["M", "N"]][r.range(0, 2)].clone(),
        atomic: true,
    });
    Some(Ordered {
        seed: r.next_u64(),
        counter,
        acc,
        new_acc,
    })
}

/// The `%` names on a line.
fn refs(line: &str) -> Vec<String> {
    let mut out = vec![];
    let mut rest = line;
    while let Some(i) = rest.find('%') {
        let tail = &rest[i + 1..];
        let n = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if n > 0 {
            out.push(tail[..n].to_string());
        }
        rest = &tail[n..];
    }
    out
}

/// The names a line defines (left of ` = ` on a line starting with `%`).
fn defs(line: &str) -> Vec<String> {
    let t = line.trim_start();
    match t.split_once(" = ") {
        Some((lhs, _)) if t.starts_with('%') => refs(lhs),
        _ => vec![],
    }
}

/// A random top-level position in `body` (a line index before which every op is complete) after
/// the definition of every value `sec` reads but does not define.
fn place(rng: &mut Rng, body: &[String], sec: &[String]) -> usize {
    let own: HashSet<String> = sec.iter().flat_map(|l| defs(l)).collect();
    let needs: HashSet<String> = sec
        .iter()
        .flat_map(|l| refs(l))
        .filter(|n| !own.contains(n))
        .collect();
    let mut have: HashSet<String> = HashSet::new();
    let mut ok = vec![];
    let mut level = 0i32;
    for (i, l) in body.iter().enumerate() {
        if level == 0 {
            if needs.is_subset(&have) {
                ok.push(i);
            }
            have.extend(defs(l));
        }
        let t = l.trim();
        if t.starts_with('}') {
            level -= 1;
        }
        if t.ends_with('{') {
            level += 1;
        }
    }
    ok.push(body.len());
    ok[rng.range(0, ok.len())]
}

/// Writes the ordered section `o` into the body of `kb` (see the module doc) at a random
/// top-level position; `at` is the top-level block origin, `axes` how many grid axes the kernel
/// spans (1 or 2). Returns the tensor params the section adds (the counter, maybe `oacc…`).
pub fn section(kb: &mut Kb, o: &Ordered, at: &Origin, axes: usize) -> Vec<Tensor> {
    let mut side = Rng::seeded(o.seed);
    std::mem::swap(kb.rng, &mut side);
    let start = kb.lines.len();
    let i32t = Ty::Scalar(Dtype::I32);
    let index = Facts {
        index: true,
        constant: false,
    };
    // The program's rank in grid order (axis 0 fastest), Horner's form.
    let n = if kb.chance(0.2) { 3 } else { axes };
    let pids: Vec<_> = (0..n)
        .map(|a| {
            kb.op(
                "program_id",
                &format!("program_id {a}"),
                i32t.clone(),
                index,
            )
        })
        .collect();
    let mut rank = pids[n - 1].clone();
    for a in (0..n - 1).rev() {
        let g = kb.op(
            "num_programs",
            &format!("num_programs {a}"),
            i32t.clone(),
            Facts::default(),
        );
        let (x, y) = if kb.chance(0.5) {
            (&rank, &g)
        } else {
            (&g, &rank)
        };
        let m = kb.op(
            "mul",
            &format!("mul {}, {}", x.r(), y.r()),
            i32t.clone(),
            Facts::default(),
        );
        let (x, y) = if kb.chance(0.5) {
            (&m, &pids[a])
        } else {
            (&pids[a], &m)
        };
        rank = kb.op(
            "add",
            &format!("add {}, {}", x.r(), y.r()),
            i32t.clone(),
            Facts::default(),
        );
    }
    // The counter's element: a literal offset or a constant value.
    let which = if o.counter.dims == ["2"] {
        kb.rng.range(0, 2)
    } else {
        0
    };
    let off = if kb.chance(0.5) {
        which.to_string()
    } else {
        kb.konst(i32t.clone(), which as f64).r()
    };
    let c = &o.counter.name;
    let wait = format!("sem_wait {c}[{off}], {}", rank.r());
    let signal = if kb.chance(0.5) {
        format!("sem_signal {c}[{off}] guard")
    } else {
        format!("sem_signal {c}[{off}]")
    };
    // Now and then the added value is computed after the wait (the add then does not follow it).
    let late = kb.chance(0.25);
    if late {
        kb.line(&wait);
    }
    // The add: at the block's origin, or every program at the accumulator's origin.
    let (r0, c0) = if kb.chance(0.3) {
        let z = kb.konst(i32t.clone(), 0.0);
        (z.r(), z.r())
    } else {
        (at.m0.r(), at.n0.r())
    };
    let t = &o.acc;
    let [bm, bn] = kb.tile;
    let v = kb.value_as(&Ty::tile(&[bm, bn], t.dt));
    let add = if t.dims.len() == 2 {
        let mut s = format!("atomic_add {}[{r0}, {c0}], {}", t.name, v.r());
        if kb.chance(0.2) {
            let m = kb.value_of(&Ty::tile(&[bm, bn], Dtype::I1));
            s.push_str(&format!(" mask {}", m.r()));
        }
        s + " guard"
    } else {
        let r = kb.op(
            "reduce",
            &format!("reduce sum {} axis 1", v.r()),
            Ty::tile(&[bm, 1], t.dt),
            Facts::default(),
        );
        let r1 = kb.op(
            "reshape",
            &format!("reshape {}", r.r()),
            Ty::tile(&[bm], t.dt),
            Facts::default(),
        );
        let mut s = format!("atomic_add {}[{r0}], {}", t.name, r1.r());
        if kb.chance(0.2) {
            let m = kb.value_of(&Ty::tile(&[bm], Dtype::I1));
            s.push_str(&format!(" mask {}", m.r()));
        }
        s + " guard"
    };
    if !late {
        kb.line(&wait);
    }
    kb.line(add);
    kb.line(signal);
    kb.feats.add("sem_wait");
    kb.feats.add("atomic_add");
    kb.feats.add("sem_signal");
    let sec: Vec<String> = kb.lines.drain(start..).collect();
    let pos = place(kb.rng, &kb.lines, &sec);
    kb.lines.splice(pos..pos, sec);
    std::mem::swap(kb.rng, &mut side);
    let mut extra = vec![o.counter.clone()];
    if o.new_acc {
        extra.push(o.acc.clone());
    }
    extra
}
