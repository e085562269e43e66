//! Hand-scheduled rings, generated with a plain twin: the same computation with an ordinary
//! `load` where the ring has `smem_read`. Two forms, as tests/in/sched/ring_plain.kir and
//! ring_ws.kir are written:
//! - **copy groups**: one partition, S stages, a prologue of S − 1 guarded `async_copy` +
//!   `async_commit`, and a loop that refills the stage released one iteration earlier, waits
//!   with `async_wait pending S−1`, reads, computes, stores and releases (PTX lowers this form);
//! - **mbarriers**: `warp_specialize` with a producer walking the rows (`mbar_wait` on the empty
//!   ring with parity `(k div S) mod 2 xor 1`, `mbar_arrive … tx BYTES`, `async_copy … bar`) and
//!   one or two consumers (`mbar_wait` on the full ring, `smem_read`, `smem_release`,
//!   `mbar_arrive` on the empty ring; consumer k mod C stores row block k).
//!
//! The ring's result must equal the twin's bit for bit under every scheduler seed: the
//! interpreter checks the protocol (deadlocks, unfilled reads, overwrites in use, barrier
//! ledgers) while it runs.

use super::gen::{Features, Kb, Tensor};
use super::gen_ctl::Origin;
use super::ty::{Facts, Ty, Val};
use crate::Rng;
use kir_ir::Dtype;

/// The lines of the per-row-block computation: `%t` is the tile of x at [i, c0]; the block
/// ends by storing its result into y at [i, c0] (guarded). Shared verbatim by ring and twin.
fn compute(
    rng: &mut Rng,
    tile: [usize; 2],
    x: &Tensor,
    others: &[Tensor],
    y: &Tensor,
    depth: usize,
    dot: bool,
) -> (Vec<String>, Features) {
    let mut tensors = others.to_vec();
    tensors.push(x.clone());
    let mut kb = Kb::new(rng, tile, tensors);
    kb.depth = depth;
    let i = Val {
        name: "i".into(),
        ty: Ty::Scalar(Dtype::I32),
        facts: Facts {
            index: true,
            constant: false,
        },
    };
    let c0 = Val {
        name: "c0".into(),
        ty: Ty::Scalar(Dtype::I32),
        facts: Facts {
            index: true,
            constant: false,
        },
    };
    let tv = Val {
        name: "t".into(),
        ty: Ty::tile(&tile, x.dt),
        facts: Facts::default(),
    };
    kb.set_mag(&tv, 1e3);
    kb.push(i.clone());
    kb.push(c0.clone());
    kb.push(tv.clone());
    if dot {
        // `%dr`: the tile times its own transpose, computed before the body (see `dot_lines`).
        let dr = Val {
            name: "dr".into(),
            ty: Ty::tile(&[tile[0], tile[0]], Dtype::F32),
            facts: Facts::default(),
        };
        kb.set_mag(&dr, 1e9);
        kb.push(dr);
    }
    let o = Origin {
        m0: i,
        n0: c0,
        inside: true,
    };
    let n = kb.rng.range(1, 12);
    kb.block(n, &o);
    // Most of the time the stored value is the read tile itself or made from it.
    let ty = Ty::tile(&tile, y.dt);
    let v = if kb.chance(0.3) {
        if y.dt == x.dt {
            tv
        } else {
            kb.op(
                "cast",
                &format!("cast {}", tv.r()),
                ty.clone(),
                Facts::default(),
            )
        }
    } else {
        kb.value_as(&ty)
    };
    kb.line(format!("store {}[%i, %c0], {} guard", y.name, v.r()));
    (kb.lines, kb.feats)
}

fn kernel_head(name: &str, ts: &[Tensor], bc: usize) -> String {
    let ps: Vec<String> = ts
        .iter()
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
    format!(
        "kernel @{name}(\n{}\n) grid [cdiv(N, {bc}), 1, 1] {{\n  %pc = program_id 0 : i32\n  %bc = const {bc} : i32\n  %c0 = mul %pc, %bc : i32\n  %rows = dim M : i32\n  %zero = const 0 : i32\n  %one = const 1 : i32\n",
        ps.join("\n")
    )
}

/// `%dr = %t · %tᵀ` (f32): in a ring read from the stage with `dot_async` + `dot_wait`
/// (before the stage's release) when `asynchronous`, else with `dot`.
fn dot_lines(tile: [usize; 2], dt: Dtype, asynchronous: bool, ind: &str) -> String {
    let [br, bc] = tile;
    let d = dt.name();
    let mut s = format!("{ind}%wt = transpose %t : tile<{bc}x{br}x{d}>\n");
    s.push_str(&format!("{ind}%z0 = const 0.0 : tile<{br}x{br}xf32>\n"));
    if asynchronous {
        s.push_str(&format!(
            "{ind}%da = dot_async %t, %wt, %z0 : tile<{br}x{br}xf32>\n"
        ));
        s.push_str(&format!("{ind}%dr = dot_wait %da : tile<{br}x{br}xf32>\n"));
    } else {
        s.push_str(&format!(
            "{ind}%dr = dot %t, %wt, %z0 : tile<{br}x{br}xf32>\n"
        ));
    }
    s
}

/// The plain twin: a loop over row blocks with a `load` of the tile.
fn twin(
    seed: u64,
    ts: &[Tensor],
    tile: [usize; 2],
    other: &str,
    body: &[String],
    dot: bool,
) -> String {
    let [br, bc] = tile;
    let x = &ts[0];
    let mut s = format!("// rpg seed {seed} (plain twin)\nmodule rpg_{seed}\n\n");
    s.push_str(&kernel_head("ring", ts, bc));
    s.push_str(&format!("  %br = const {br} : i32\n"));
    s.push_str("  for %i = %zero to %rows step %br {\n");
    s.push_str(&format!(
        "    %t = load {}[%i, %c0] other {other} : tile<{br}x{bc}x{}>\n",
        x.name,
        x.dt.name()
    ));
    if dot {
        s.push_str(&dot_lines(tile, x.dt, false, "    "));
    }
    for l in body {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("  }\n}\n");
    s
}

/// The copy-group ring (see the module doc).
#[allow(clippy::too_many_arguments)]
fn copy_groups(
    seed: u64,
    ts: &[Tensor],
    tile: [usize; 2],
    stages: usize,
    other: &str,
    body: &[String],
    select_form: bool,
    dot: bool,
) -> String {
    let [br, bc] = tile;
    let x = &ts[0];
    let dt = x.dt.name();
    let mut s = format!("// rpg seed {seed}\nmodule rpg_{seed}\n\n");
    s.push_str(&kernel_head("ring", ts, bc));
    s.push_str(&format!("  %br = const {br} : i32\n"));
    s.push_str(&format!("  %ns = const {stages} : i32\n"));
    s.push_str(&format!(
        "  %buf = smem_alloc : smem<{stages}x{br}x{bc}x{dt}>\n"
    ));
    for p in 0..stages - 1 {
        s.push_str(&format!("  %po{p} = const {} : i32\n", p * br));
        s.push_str(&format!("  %ps{p} = const {p} : i32\n"));
        s.push_str(&format!("  %pok{p} = cmp lt %po{p}, %rows : i1\n"));
        s.push_str(&format!(
            "  if %pok{p} {{\n    async_copy {}[%po{p}, %c0], %buf, %ps{p} other {other}\n  }}\n",
            x.name
        ));
        s.push_str("  async_commit\n");
    }
    s.push_str(&format!("  %ahead = const {} : i32\n", (stages - 1) * br));
    s.push_str(&format!("  %sm1 = const {} : i32\n", stages - 1));
    s.push_str("  %s_end = for %i = %zero to %rows step %br iter(%s = %zero) : i32 {\n");
    s.push_str("    %nx = add %i, %ahead : i32\n");
    if select_form {
        // The stage arithmetic as the pipelining pass writes it (the PTX backend unrolls it).
        s.push_str("    %is0 = cmp eq %s, %zero : i1\n");
        s.push_str("    %sdec = sub %s, %one : i32\n");
        s.push_str("    %pf = select %is0, %sm1, %sdec : i32\n");
    } else {
        s.push_str("    %pf0 = add %s, %sm1 : i32\n");
        s.push_str("    %pf = rem %pf0, %ns : i32\n");
    }
    s.push_str("    %more = cmp lt %nx, %rows : i1\n");
    s.push_str(&format!(
        "    if %more {{\n      async_copy {}[%nx, %c0], %buf, %pf other {other}\n    }}\n",
        x.name
    ));
    s.push_str("    async_commit\n");
    s.push_str(&format!("    async_wait pending {}\n", stages - 1));
    s.push_str(&format!(
        "    %t = smem_read %buf, %s : tile<{br}x{bc}x{dt}>\n"
    ));
    if dot {
        s.push_str(&dot_lines(tile, x.dt, false, "    "));
    }
    for l in body {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("    smem_release %buf, %s\n");
    s.push_str("    %s1 = add %s, %one : i32\n");
    if select_form {
        s.push_str("    %at_end = cmp eq %s, %sm1 : i1\n");
        s.push_str("    %sn = select %at_end, %zero, %s1 : i32\n");
    } else {
        s.push_str("    %sn = rem %s1, %ns : i32\n");
    }
    s.push_str("    yield %sn\n  }\n}\n");
    s
}

/// The mbarrier ring with `warp_specialize` (see the module doc).
#[allow(clippy::too_many_arguments)]
fn mbarriers(
    seed: u64,
    ts: &[Tensor],
    tile: [usize; 2],
    stages: usize,
    consumers: usize,
    other: &str,
    body: &[String],
    dot: bool,
    fence: bool,
) -> String {
    let [br, bc] = tile;
    let x = &ts[0];
    let dt = x.dt.name();
    let bytes = br * bc * x.dt.size_bytes();
    let mut s = format!("// rpg seed {seed}\nmodule rpg_{seed}\n\n");
    s.push_str(&kernel_head("ring", ts, bc));
    s.push_str(&format!("  %br = const {br} : i32\n"));
    s.push_str(&format!("  %ns = const {stages} : i32\n"));
    s.push_str("  %two = const 2 : i32\n");
    s.push_str(&format!("  %nc = const {consumers} : i32\n"));
    s.push_str(&format!(
        "  %buf = smem_alloc : smem<{stages}x{br}x{bc}x{dt}>\n"
    ));
    s.push_str(&format!(
        "  %full = mbar_alloc arrivals 1 : mbar<{stages}>\n"
    ));
    s.push_str(&format!(
        "  %empty = mbar_alloc arrivals {consumers} : mbar<{stages}>\n"
    ));
    s.push_str(&format!(
        "  warp_specialize producer_warps 1 producer_regs 40 consumers {consumers} consumer_warps 4 consumer_regs 232 {{\n"
    ));
    s.push_str("    %pk = for %i = %zero to %rows step %br iter(%k = %zero) : i32 {\n");
    s.push_str("      %s = rem %k, %ns : i32\n");
    s.push_str("      %round = div %k, %ns : i32\n");
    s.push_str("      %rp = rem %round, %two : i32\n");
    s.push_str("      %pe = xor %rp, %one : i32\n");
    s.push_str("      mbar_wait %empty, %s, %pe\n");
    s.push_str(&format!("      mbar_arrive %full, %s tx {bytes}\n"));
    if fence {
        s.push_str("      fence_async\n");
    }
    s.push_str(&format!(
        "      async_copy {}[%i, %c0], %buf, %s other {other} bar %full\n",
        x.name
    ));
    s.push_str("      %k1 = add %k, %one : i32\n      yield %k1\n    }\n");
    s.push_str("  } consumer(%wg) {\n");
    s.push_str("    %ck = for %i = %zero to %rows step %br iter(%k = %zero) : i32 {\n");
    s.push_str("      %s = rem %k, %ns : i32\n");
    s.push_str("      %round = div %k, %ns : i32\n");
    s.push_str("      %pf = rem %round, %two : i32\n");
    s.push_str("      mbar_wait %full, %s, %pf\n");
    s.push_str(&format!(
        "      %t = smem_read %buf, %s : tile<{br}x{bc}x{dt}>\n"
    ));
    if dot {
        s.push_str(&dot_lines(tile, x.dt, true, "      "));
    }
    s.push_str("      smem_release %buf, %s\n");
    s.push_str("      mbar_arrive %empty, %s\n");
    s.push_str("      %who = rem %k, %nc : i32\n");
    s.push_str("      %mine = cmp eq %who, %wg : i1\n");
    s.push_str("      if %mine {\n");
    for l in body {
        s.push_str("    ");
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("      }\n");
    s.push_str("      %k1 = add %k, %one : i32\n      yield %k1\n    }\n  }\n}\n");
    s
}

/// A ring case: the ring module's text, and its plain twin in `Case::twin` form (returned
/// together as one text: the ring, then a line `// ---- twin ----`, then the twin).
pub fn ring(rng: &mut Rng, seed: u64) -> (String, &'static str, Features) {
    let dts = [Dtype::F32, Dtype::F32, Dtype::Bf16, Dtype::F16, Dtype::I32];
    let dt = dts[rng.range(0, dts.len())];
    let br = [1, 4, 8, 16, 32][rng.range(0, 5)];
    let bc = [8, 16, 32, 64][rng.range(0, 4)];
    let tile = [br, bc];
    let stages = rng.range(2, 5);
    let x = Tensor {
        name: "x".into(),
        access: "in",
        dt,
        dims: vec!["M", "N"],
        atomic: false,
    };
    let mut others = vec![];
    if rng.range(0, 3) == 0 {
        others.push(Tensor {
            name: "x2".into(),
            access: "in",
            dt: [Dtype::F32, Dtype::I32, Dtype::Bf16][rng.range(0, 3)],
            dims: vec!["M", "N"],
            atomic: false,
        });
    }
    let y = Tensor {
        name: "y".into(),
        access: "out",
        dt: [dt, Dtype::F32, Dtype::I32][rng.range(0, 3)],
        dims: vec!["M", "N"],
        atomic: false,
    };
    let ws = rng.range(0, 2) == 0;
    let consumers = if ws { rng.range(1, 3) } else { 1 };
    let dot = dt.is_float() && br * br <= 1024 && rng.range(0, 3) == 0;
    let (body, feats) = compute(rng, tile, &x, &others, &y, if ws { 3 } else { 2 }, dot);
    let other = if dt.is_float() {
        ["0.0", "1.5", "-inf", "nan"][rng.range(0, 4)]
    } else {
        ["0", "7", "-1"][rng.range(0, 3)]
    };
    let mut ts = vec![x];
    ts.extend(others);
    ts.push(y);
    let twin_body: Vec<String> = body.iter().map(|l| l.to_string()).collect();
    let ring = if ws {
        let fence = rng.range(0, 2) == 0;
        mbarriers(seed, &ts, tile, stages, consumers, other, &body, dot, fence)
    } else {
        let select_form = rng.range(0, 4) != 0;
        copy_groups(seed, &ts, tile, stages, other, &body, select_form, dot)
    };
    let tw = twin(seed, &ts, tile, other, &twin_body, dot);
    let text = format!("{ring}{TWIN_MARK}\n{tw}");
    (text, if ws { "ring_ws" } else { "ring_groups" }, feats)
}

/// The line separating a ring from its plain twin in a case's text.
pub const TWIN_MARK: &str = "// ---- twin ----";

/// Splits a case text into the module and, for rings, the twin.
pub fn split_twin(text: &str) -> (&str, Option<&str>) {
    match text.find(TWIN_MARK) {
        Some(i) => (&text[..i], Some(&text[i + TWIN_MARK.len()..])),
        None => (text, None),
    }
}
