//! Kernel shapes the generator fills with random ops:
//! - **tile**: one program per [BM, BN] block of an [M, N] problem (`grid [cdiv(M, BM),
//!   cdiv(N, BN), 1]`), loads at the block, a random body, stores back into the block;
//! - **row loop**: one program per BM rows (`grid [cdiv(M, BM), 1, 1]`) walking the columns in a
//!   `for` over N by BN with carried values, stores inside the loop and row results after it;
//! - **gemm**: a K loop of `dot`s over tiles of A [M, K] and B [K, N] (or Bᵀ [N, K] through
//!   `transpose`) with a carried accumulator, optional masks and extra carried values, then a
//!   random epilogue; this is the loop shape the `pipelining` pass rings and `warp_specialize`
//!   partitions (with 16-bit operands and BM, BK multiples of 64, the held ring of sm_90a).
//!
//! Any of them may end with an ordered section (`ordered`): an `atomic_add` in grid order under
//! a semaphore counter, moved to a random top-level position.

use super::gen::{Features, Kb, Tensor};
use super::gen_ctl::Origin;
use super::ordered::{section, Ordered};
use super::ty::{lit, Facts, Ty, Val};
use crate::Rng;
use kir_ir::Dtype;

/// A generated kernel: its text and what it contains.
pub struct Built {
    /// `kernel @name(...) grid [...] { ... }`.
    pub text: String,
    /// What the body contains.
    pub feats: Features,
    /// Tensor params an ordered section added (after the spec's tensors, before its scalars).
    pub extra: Vec<Tensor>,
}

/// What every kernel shape takes.
pub struct Spec<'a> {
    /// Kernel name (without `@`).
    pub name: &'a str,
    /// Tensor params.
    pub tensors: Vec<Tensor>,
    /// Scalar params (name, dtype).
    pub scalars: Vec<(String, Dtype)>,
    /// Integer module constants for `static_if`.
    pub consts: Vec<(String, i64)>,
    /// The block shape [BM, BN].
    pub tile: [usize; 2],
    /// Names of module constants holding BM and BN, if the grid and tiles should use them.
    pub tile_consts: Option<(String, String)>,
    /// Roughly how many ops the body gets.
    pub ops: usize,
    /// The ordered section the kernel gets, if any (`ordered::plan`).
    pub ordered: Option<Ordered>,
}

fn params_text(s: &Spec, extra: &[Tensor]) -> String {
    let mut ps: Vec<String> = s
        .tensors
        .iter()
        .chain(extra)
        .map(|t| {
            format!(
                "  {}: {} tensor<{}>[{}],",
                t.name,
                t.access,
                t.dt.name(),
                t.dims.join(", ")
            )
        })
        .collect();
    for (n, d) in &s.scalars {
        ps.push(format!("  {n}: {},", d.name()));
    }
    ps.join("\n")
}

fn dims_text(s: &Spec) -> (String, String) {
    match &s.tile_consts {
        Some((a, b)) => (a.clone(), b.clone()),
        None => (s.tile[0].to_string(), s.tile[1].to_string()),
    }
}

fn header(s: &Spec, grid: &str, extra: &[Tensor]) -> String {
    format!(
        "kernel @{}(\n{}\n) grid [{grid}] {{",
        s.name,
        params_text(s, extra)
    )
}

fn new_kb<'r>(rng: &'r mut Rng, s: &Spec) -> Kb<'r> {
    let mut kb = Kb::new(rng, s.tile, s.tensors.clone());
    kb.scalars = s.scalars.clone();
    kb.consts = s.consts.clone();
    kb
}

fn i32v(kb: &mut Kb, mnemonic: &'static str, rhs: &str, index: bool) -> Val {
    kb.op(
        mnemonic,
        rhs,
        Ty::Scalar(Dtype::I32),
        Facts {
            index,
            constant: false,
        },
    )
}

/// Loads every 2-D input once at the origin (so the body has data to work on).
fn seed_loads(kb: &mut Kb, o: &Origin) {
    let ins: Vec<Tensor> = kb
        .tensors
        .iter()
        .filter(|t| t.access != "out" && !t.atomic && t.dims.len() == 2)
        .cloned()
        .collect();
    for t in ins {
        let ty = kb.main(t.dt);
        let other = kb.other_lit(t.dt);
        let v = kb.op(
            "load",
            &format!("load {}[{}, {}] other {other}", t.name, o.m0.r(), o.n0.r()),
            ty,
            Facts::default(),
        );
        kb.set_mag(&v, 1e3);
    }
}

/// Stores a block tile into every 2-D output so each one is written at least once.
fn final_stores(kb: &mut Kb, o: &Origin) {
    let outs: Vec<Tensor> = kb
        .tensors
        .iter()
        .filter(|t| t.access != "in" && !t.atomic && t.dims.len() == 2)
        .cloned()
        .collect();
    for t in outs {
        let ty = kb.main(t.dt);
        let v = kb.value_as(&ty);
        kb.line(format!(
            "store {}[{}, {}], {} guard",
            t.name,
            o.m0.r(),
            o.n0.r(),
            v.r()
        ));
        kb.feats.add("store");
    }
}

/// The kernel's text; first its ordered section, if it has one, at the top level (`o`: the
/// top-level block origin, `axes`: the grid axes the kernel spans).
fn finish(s: &Spec, grid: &str, mut kb: Kb, o: &Origin, axes: usize) -> Built {
    let extra = match &s.ordered {
        Some(od) => section(&mut kb, od, o, axes),
        None => vec![],
    };
    let mut text = header(s, grid, &extra);
    text.push('\n');
    for l in &kb.lines {
        text.push_str(l);
        text.push('\n');
    }
    text.push('}');
    Built {
        text,
        feats: kb.feats,
        extra,
    }
}

/// The tile shape (see the module doc).
pub fn tile_kernel(rng: &mut Rng, s: &Spec) -> Built {
    let (bm, bn) = dims_text(s);
    let grid = format!("cdiv(M, {bm}), cdiv(N, {bn}), 1");
    let mut kb = new_kb(rng, s);
    let pm = i32v(&mut kb, "program_id", "program_id 0", true);
    let pn = i32v(&mut kb, "program_id", "program_id 1", true);
    let cm = i32v(&mut kb, "const", &format!("const {bm}"), true);
    let cn = i32v(&mut kb, "const", &format!("const {bn}"), true);
    let m0 = i32v(&mut kb, "mul", &format!("mul {}, {}", pm.r(), cm.r()), true);
    let n0 = i32v(&mut kb, "mul", &format!("mul {}, {}", pn.r(), cn.r()), true);
    let o = Origin {
        m0,
        n0,
        inside: true,
    };
    seed_loads(&mut kb, &o);
    kb.block(s.ops, &o);
    final_stores(&mut kb, &o);
    finish(s, &grid, kb, &o, 2)
}

/// The row-loop shape (see the module doc).
pub fn row_loop_kernel(rng: &mut Rng, s: &Spec) -> Built {
    let (bm, bn) = dims_text(s);
    let grid = format!("cdiv(M, {bm}), 1, 1");
    let mut kb = new_kb(rng, s);
    let pm = i32v(&mut kb, "program_id", "program_id 0", true);
    let cm = i32v(&mut kb, "const", &format!("const {bm}"), true);
    let cn = i32v(&mut kb, "const", &format!("const {bn}"), true);
    let zero = i32v(&mut kb, "const", "const 0", true);
    let m0 = i32v(&mut kb, "mul", &format!("mul {}, {}", pm.r(), cm.r()), true);
    let n = i32v(&mut kb, "dim", "dim N", false);
    let before = Origin {
        m0: m0.clone(),
        n0: zero.clone(),
        inside: false,
    };
    seed_loads(&mut kb, &before);
    kb.block(s.ops / 4, &before);
    // The column loop: carried values are taken from what exists now.
    let n_carry = kb.rng.range(1, 4);
    let mut carried = vec![];
    for _ in 0..n_carry {
        let ty = kb.random_type();
        let v = kb.value_of(&ty);
        carried.push(v);
    }
    let (j, args, limits) = kb.loop_header("j", &carried);
    let results = kb.loop_results(&carried);
    let tys: Vec<String> = carried.iter().map(|v| v.ty.text()).collect();
    let pairs: Vec<String> = args
        .iter()
        .zip(&carried)
        .map(|(a, v)| format!("{} = {}", a.r(), v.r()))
        .collect();
    let names: Vec<String> = results.iter().map(|v| v.r()).collect();
    kb.line(format!(
        "{} = for {} = {} to {} step {} iter({}) : {} {{",
        names.join(", "),
        j.r(),
        zero.r(),
        n.r(),
        cn.r(),
        pairs.join(", "),
        tys.join(", ")
    ));
    kb.depth += 1;
    kb.scopes.push(vec![j.clone()]);
    for a in &args {
        kb.push(a.clone());
    }
    let inside = Origin {
        m0: m0.clone(),
        n0: j.clone(),
        inside: true,
    };
    seed_loads(&mut kb, &inside);
    kb.block(s.ops / 2, &inside);
    // Every block of every 2-D output is written (a temp a later launch reads is then defined
    // everywhere: what a pass may do with reads of never-written elements is not checked).
    final_stores(&mut kb, &inside);
    let mut ys = vec![];
    for (a, l) in args.iter().zip(&limits) {
        let v = kb.value_of(&a.ty);
        let v = kb.tame_to(v, *l);
        ys.push(v.r());
    }
    kb.line(format!("yield {}", ys.join(", ")));
    kb.scopes.pop();
    kb.depth -= 1;
    kb.line("}");
    kb.feats.add("for");
    for (r, l) in results.iter().zip(&limits) {
        kb.set_mag(r, *l);
        kb.push(r.clone());
    }
    kb.block(s.ops / 4, &before);
    // Row results into [M] outputs (one program per row block: no other instance writes them).
    let outs: Vec<Tensor> = kb
        .tensors
        .iter()
        .filter(|t| t.access == "out" && t.dims == ["M"])
        .cloned()
        .collect();
    let bmv = s.tile[0];
    for t in outs {
        let col = kb.value_as(&Ty::tile(&[bmv, 1], t.dt));
        let flat = kb.op(
            "reshape",
            &format!("reshape {}", col.r()),
            Ty::tile(&[bmv], t.dt),
            Facts::default(),
        );
        kb.line(format!("store {}[{}], {} guard", t.name, m0.r(), flat.r()));
        kb.feats.add("store");
    }
    finish(s, &grid, kb, &before, 1)
}

/// GEMM options.
pub struct Gemm {
    /// Operand dtype (f32, f16, bf16).
    pub dt: Dtype,
    /// K tile.
    pub bk: usize,
    /// B is given as Bᵀ [N, K] and transposed after loading.
    pub trans_b: bool,
}

/// The gemm shape (see the module doc). Tensors must include `a`, `b` and an output `c`.
pub fn gemm_kernel(rng: &mut Rng, s: &Spec, g: &Gemm) -> Built {
    let (bm, bn) = dims_text(s);
    let grid = format!("cdiv(M, {bm}), cdiv(N, {bn}), 1");
    let [tm, tn] = s.tile;
    let mut kb = new_kb(rng, s);
    let pm = i32v(&mut kb, "program_id", "program_id 0", true);
    let pn = i32v(&mut kb, "program_id", "program_id 1", true);
    let cm = i32v(&mut kb, "const", &format!("const {bm}"), true);
    let cn = i32v(&mut kb, "const", &format!("const {bn}"), true);
    let ck = i32v(&mut kb, "const", &format!("const {}", g.bk), true);
    let zero = i32v(&mut kb, "const", "const 0", true);
    let m0 = i32v(&mut kb, "mul", &format!("mul {}, {}", pm.r(), cm.r()), true);
    let n0 = i32v(&mut kb, "mul", &format!("mul {}, {}", pn.r(), cn.r()), true);
    let kd = i32v(&mut kb, "dim", "dim K", false);
    let o = Origin {
        m0: m0.clone(),
        n0: n0.clone(),
        inside: true,
    };
    if kb.chance(0.5) {
        kb.block(s.ops / 4, &o);
    }
    let acc_ty = Ty::tile(&[tm, tn], Dtype::F32);
    let init = if kb.chance(0.8) {
        kb.konst(acc_ty.clone(), 0.0)
    } else {
        kb.value_of(&acc_ty)
    };
    // Extra carried values next to the accumulator (a running max, a count, ...).
    let mut carried = vec![init];
    if kb.chance(0.3) {
        let ty = kb.random_type();
        let v = kb.value_of(&ty);
        carried.push(v);
    }
    let (k, args, limits) = kb.loop_header("k", &carried);
    let results = kb.loop_results(&carried);
    let tys: Vec<String> = carried.iter().map(|v| v.ty.text()).collect();
    let pairs: Vec<String> = args
        .iter()
        .zip(&carried)
        .map(|(a, v)| format!("{} = {}", a.r(), v.r()))
        .collect();
    let names: Vec<String> = results.iter().map(|v| v.r()).collect();
    // A K mask computed before the loop (the pipelining pass accepts masks that depend on the
    // induction variable and on values defined before the loop only).
    let kmask = if kb.chance(0.25) {
        let io = kb.op(
            "iota",
            "iota axis 1",
            Ty::tile(&[tm, g.bk], Dtype::I32),
            Facts::default(),
        );
        Some(io)
    } else {
        None
    };
    kb.line(format!(
        "{} = for {} = {} to {} step {} iter({}) : {} {{",
        names.join(", "),
        k.r(),
        zero.r(),
        kd.r(),
        ck.r(),
        pairs.join(", "),
        tys.join(", ")
    ));
    kb.depth += 1;
    kb.scopes.push(vec![k.clone()]);
    for a in &args {
        kb.push(a.clone());
    }
    let zero_lit = lit(g.dt, 0.0);
    let a_other = if kb.chance(0.8) {
        zero_lit.clone()
    } else {
        kb.other_lit(g.dt)
    };
    let mut a_load = format!("load a[{}, {}]", m0.r(), k.r());
    if let Some(io) = &kmask {
        let cols = kb.op(
            "add",
            &format!("add {}, {}", io.r(), k.r()),
            io.ty.clone(),
            Facts::default(),
        );
        let mk = kb.op(
            "cmp",
            &format!("cmp lt {}, {}", cols.r(), kd.r()),
            io.ty.with_dt(Dtype::I1),
            Facts::default(),
        );
        a_load.push_str(&format!(" mask {}", mk.r()));
    }
    let a = kb.op(
        "load",
        &format!("{a_load} other {a_other}"),
        Ty::tile(&[tm, g.bk], g.dt),
        Facts::default(),
    );
    kb.set_mag(&a, 1e3);
    let b = if g.trans_b {
        let bt = kb.op(
            "load",
            &format!("load b[{}, {}] other {zero_lit}", n0.r(), k.r()),
            Ty::tile(&[tn, g.bk], g.dt),
            Facts::default(),
        );
        kb.op(
            "transpose",
            &format!("transpose {}", bt.r()),
            Ty::tile(&[g.bk, tn], g.dt),
            Facts::default(),
        )
    } else {
        kb.op(
            "load",
            &format!("load b[{}, {}] other {zero_lit}", k.r(), n0.r()),
            Ty::tile(&[g.bk, tn], g.dt),
            Facts::default(),
        )
    };
    kb.set_mag(&b, 1e3);
    // Now and then an elementwise op on an operand (the load then no longer feeds the dot
    // directly, and the pass must leave it alone).
    let a_used = if kb.chance(0.15) {
        let s = kb.value_of(&Ty::Scalar(g.dt));
        kb.op(
            "mul",
            &format!("mul {}, {}", a.r(), s.r()),
            a.ty.clone(),
            Facts::default(),
        )
    } else {
        a.clone()
    };
    let acc = args[0].clone();
    let d = kb.op(
        "dot",
        &format!("dot {}, {}, {}", a_used.r(), b.r(), acc.r()),
        acc.ty.clone(),
        Facts::default(),
    );
    kb.set_mag(&d, limits[0]);
    let d = kb.tame_to(d, limits[0]);
    let mut ys = vec![d.r()];
    if args.len() > 1 {
        let inside = Origin {
            m0: m0.clone(),
            n0: n0.clone(),
            inside: true,
        };
        let n = kb.rng.range(1, 5);
        kb.block(n, &inside);
        let v = kb.value_of(&args[1].ty);
        let v = kb.tame_to(v, limits[1]);
        ys.push(v.r());
    }
    kb.line(format!("yield {}", ys.join(", ")));
    kb.scopes.pop();
    kb.depth -= 1;
    kb.line("}");
    kb.feats.add("for");
    for (r, l) in results.iter().zip(&limits) {
        kb.set_mag(r, *l);
        kb.push(r.clone());
    }
    kb.block(s.ops / 2, &o);
    // The result: the accumulator (or something made from it) into c.
    let out = kb
        .tensors
        .iter()
        .find(|t| t.name == "c")
        .map(|t| t.dt)
        .unwrap_or(Dtype::F32);
    let r0 = results[0].clone();
    let v = if out == Dtype::F32 {
        r0
    } else {
        let m = kb.mag(&r0);
        let c = kb.op(
            "cast",
            &format!("cast {}", r0.r()),
            Ty::tile(&[tm, tn], out),
            Facts::default(),
        );
        kb.set_mag(&c, m);
        c
    };
    kb.line(format!("store c[{}, {}], {} guard", m0.r(), n0.r(), v.r()));
    kb.feats.add("store");
    final_stores(&mut kb, &o);
    finish(s, &grid, kb, &o, 2)
}
