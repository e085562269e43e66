//! Whole modules: a seed picks a shape (one kernel, a program of launches over temps, a GEMM,
//! a hand-scheduled ring, or an attention-shaped masked loop), the dtypes, tile sizes and params, module constants (integers
//! for `static_if`, tile sizes for grids and tiles), and the body sizes; the text starts with
//! `// rpg seed S`, from which the inputs are derived again (see `inputs`). A tile, row-loop,
//! program or gemm kernel may also get an ordered section with a semaphore counter of its own
//! (`ordered`; decided on a stream of its own, so other seeds' programs are unchanged).

use super::gen::{mix, Features, Tensor};
use super::kernels::{gemm_kernel, row_loop_kernel, tile_kernel, Built, Gemm, Spec};
use super::ordered;
use crate::Rng;
use kir_ir::Dtype;

/// A generated program.
#[derive(Clone, Debug)]
pub struct Case {
    /// The seed it came from.
    pub seed: u64,
    /// The module text (`// rpg seed S` on its first line).
    pub text: String,
    /// Which shape the generator picked.
    pub shape: &'static str,
    /// What the kernels contain.
    pub feats: Features,
}

fn t(name: &str, access: &'static str, dt: Dtype, dims: &[&'static str]) -> Tensor {
    Tensor {
        name: name.to_string(),
        access,
        dt,
        dims: dims.to_vec(),
        atomic: false,
    }
}

fn data_dt(rng: &mut Rng) -> Dtype {
    let all = [
        Dtype::F32,
        Dtype::F32,
        Dtype::F32,
        Dtype::Bf16,
        Dtype::F16,
        Dtype::I32,
        Dtype::I32,
        Dtype::U8,
        Dtype::I64,
        Dtype::I1,
    ];
    all[rng.range(0, all.len())]
}

fn tile_dim(rng: &mut Rng) -> usize {
    let all = [1, 2, 4, 8, 8, 16, 16, 16, 32, 32, 64, 3, 5, 12];
    all[rng.range(0, all.len())]
}

/// The tensors of a tile or row-loop kernel: 1–3 inputs [M, N], maybe vectors [M] / [N], 1–2
/// outputs [M, N], maybe an atomic accumulator, maybe a read-modify-write `inout`.
fn elementwise_tensors(rng: &mut Rng, row_loop: bool) -> Vec<Tensor> {
    let mut v = vec![];
    for i in 0..rng.range(1, 4) {
        v.push(t(&format!("x{i}"), "in", data_dt(rng), &["M", "N"]));
    }
    if rng.range(0, 3) == 0 {
        v.push(t("rv", "in", data_dt(rng), &["N"]));
    }
    if rng.range(0, 3) == 0 {
        v.push(t("cv", "in", data_dt(rng), &["M"]));
    }
    for i in 0..rng.range(1, 3) {
        v.push(t(&format!("y{i}"), "out", data_dt(rng), &["M", "N"]));
    }
    if rng.range(0, 4) == 0 {
        v.push(t("io", "inout", data_dt(rng), &["M", "N"]));
    }
    if rng.range(0, 4) == 0 {
        let dt = if rng.range(0, 2) == 0 {
            Dtype::F32
        } else {
            Dtype::I32
        };
        let dims: &[&'static str] = if rng.range(0, 2) == 0 {
            &["M"]
        } else {
            &["M", "N"]
        };
        let mut a = t("acc", "inout", dt, dims);
        a.atomic = true;
        v.push(a);
    }
    if row_loop && rng.range(0, 2) == 0 {
        v.push(t("rows", "out", data_dt(rng), &["M"]));
    }
    v
}

fn scalars(rng: &mut Rng) -> Vec<(String, Dtype)> {
    let mut v = vec![];
    if rng.range(0, 2) == 0 {
        v.push(("s".to_string(), Dtype::F32));
    }
    if rng.range(0, 3) == 0 {
        v.push(("n".to_string(), Dtype::I32));
    }
    v
}

/// Module constant lines, the integer constants (name, value) and the tile-size constant names.
type Consts = (Vec<String>, Vec<(String, i64)>, Option<(String, String)>);

/// Module constants: a few integers for `static_if`, and tile-size constants when `tiles`.
fn consts(rng: &mut Rng, tile: [usize; 2], tiles: bool) -> Consts {
    let mut lines = vec![];
    let mut ints = vec![];
    for i in 0..rng.range(0, 3) {
        let v = rng.range(0, 5) as i64;
        lines.push(format!("const C{i}: int = {v}"));
        ints.push((format!("C{i}"), v));
    }
    let tc = if tiles {
        lines.push(format!("const BM: int = {} where BM >= 1", tile[0]));
        lines.push(format!("const BN: int = {} where BN >= 1", tile[1]));
        Some(("BM".to_string(), "BN".to_string()))
    } else {
        None
    };
    (lines, ints, tc)
}

fn params_of(ts: &[Tensor], scalars: &[(String, Dtype)]) -> String {
    let mut ps: Vec<String> = ts
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
    for (n, d) in scalars {
        ps.push(format!("  {n}: {},", d.name()));
    }
    ps.join("\n")
}

fn body_ops(rng: &mut Rng) -> usize {
    match rng.range(0, 10) {
        0..=2 => rng.range(3, 10),
        3..=7 => rng.range(10, 30),
        _ => rng.range(30, 60),
    }
}

/// One kernel, tile or row-loop shaped.
fn single(rng: &mut Rng, seed: u64) -> (String, &'static str, Features) {
    let row = rng.range(0, 3) == 0;
    let tile = [tile_dim(rng), tile_dim(rng)];
    let with_tiles = rng.range(0, 3) == 0;
    let (lines, ints, tc) = consts(rng, tile, with_tiles);
    let tensors = elementwise_tensors(rng, row);
    let ordered = ordered::plan(seed, 0, "", &tensors);
    let spec = Spec {
        name: "k",
        tensors,
        scalars: scalars(rng),
        consts: ints,
        tile,
        tile_consts: tc,
        ops: body_ops(rng),
        ordered,
    };
    let b = if row {
        row_loop_kernel(rng, &spec)
    } else {
        tile_kernel(rng, &spec)
    };
    let text = module_text(seed, &lines, &[b.text]);
    (text, if row { "row_loop" } else { "tile" }, b.feats)
}

fn module_text(seed: u64, consts: &[String], kernels: &[String]) -> String {
    let mut s = format!("// rpg seed {seed}\nmodule rpg_{seed}\n\n");
    for c in consts {
        s.push_str(c);
        s.push('\n');
    }
    if !consts.is_empty() {
        s.push('\n');
    }
    for k in kernels {
        s.push_str(k);
        s.push_str("\n\n");
    }
    s
}

/// A GEMM kernel (see `kernels::gemm_kernel`): sometimes with 64-multiples and 16-bit
/// operands (the held-ring shape).
fn gemm(rng: &mut Rng, seed: u64) -> (String, &'static str, Features) {
    let dt = [Dtype::F16, Dtype::Bf16, Dtype::F32][rng.range(0, 3)];
    let held = dt != Dtype::F32 && rng.range(0, 3) == 0;
    let (tile, bk) = if held {
        ([64, [16, 32, 64][rng.range(0, 3)]], 64)
    } else {
        let d = [8, 16, 16, 32, 32, 64];
        (
            [d[rng.range(0, 6)], d[rng.range(0, 6)]],
            [8, 16, 16, 32, 64][rng.range(0, 5)],
        )
    };
    let trans_b = rng.range(0, 3) == 0;
    let mut ts = vec![
        t("a", "in", dt, &["M", "K"]),
        if trans_b {
            t("b", "in", dt, &["N", "K"])
        } else {
            t("b", "in", dt, &["K", "N"])
        },
    ];
    let out_dt = [Dtype::F32, dt, Dtype::Bf16][rng.range(0, 3)];
    ts.push(t("c", "out", out_dt, &["M", "N"]));
    if rng.range(0, 2) == 0 {
        ts.push(t("x0", "in", data_dt(rng), &["M", "N"]));
    }
    if rng.range(0, 3) == 0 {
        ts.push(t("y0", "out", data_dt(rng), &["M", "N"]));
    }
    if rng.range(0, 3) == 0 {
        ts.push(t("rv", "in", data_dt(rng), &["N"]));
    }
    let with_tiles = rng.range(0, 3) == 0;
    let (lines, ints, tc) = consts(rng, tile, with_tiles);
    let ordered = ordered::plan(seed, 0, "", &ts);
    let spec = Spec {
        name: "gemm",
        tensors: ts,
        scalars: scalars(rng),
        consts: ints,
        tile,
        tile_consts: tc,
        ops: body_ops(rng) / 2,
        ordered,
    };
    let b = gemm_kernel(rng, &spec, &Gemm { dt, bk, trans_b });
    (module_text(seed, &lines, &[b.text]), "gemm", b.feats)
}

/// A program of two or three launches: the first writes a temp, later ones read it (and
/// sometimes the same input, so horizontal merging and epilogue fusion have candidates).
fn program(rng: &mut Rng, seed: u64) -> (String, &'static str, Features) {
    let tile = [tile_dim(rng), tile_dim(rng)];
    let same_tile = rng.range(0, 2) == 0;
    let (lines, ints, tc) = consts(rng, tile, false);
    let x = t("x", "in", data_dt(rng), &["M", "N"]);
    let tmp_dt = data_dt(rng);
    let n_launch = rng.range(2, 4);
    let mut kernels = vec![];
    let mut feats = Features::default();
    let mut temps = vec![];
    let mut prog_params = vec![x.clone()];
    let extra_in = t("w", "in", data_dt(rng), &["M", "N"]);
    if rng.range(0, 2) == 0 {
        prog_params.push(extra_in.clone());
    }
    let out = t("y", "out", data_dt(rng), &["M", "N"]);
    prog_params.push(out.clone());
    let sc = scalars(rng);
    let mut launches = vec![];
    let mut prev: Option<String> = None;
    for li in 0..n_launch {
        let last = li + 1 == n_launch;
        let mut ts = vec![x.clone()];
        if let Some(p) = &prev {
            ts.push(t(p, "in", tmp_dt, &["M", "N"]));
        }
        if prog_params.iter().any(|p| p.name == "w") && rng.range(0, 2) == 0 {
            ts.push(extra_in.clone());
        }
        let dest = if last {
            out.clone()
        } else {
            let name = format!("t{li}");
            temps.push(format!("  temp {name}: tensor<{}>[M, N]", tmp_dt.name()));
            prev = Some(name.clone());
            t(&name, "out", tmp_dt, &["M", "N"])
        };
        ts.push(dest);
        let kt = if same_tile {
            tile
        } else {
            [tile_dim(rng), tile_dim(rng)]
        };
        // Small consumer kernels (one load per input, a few elementwise ops, one store) are
        // what epilogue fusion takes.
        let ops = if rng.range(0, 2) == 0 {
            rng.range(1, 6)
        } else {
            body_ops(rng)
        };
        let name = format!("k{li}");
        // Each launch's counter is its own (`sem0`, `sem1`, …): a counter is never reset.
        let ordered = ordered::plan(seed, li, &li.to_string(), &ts);
        let spec = Spec {
            name: &name,
            tensors: ts.clone(),
            scalars: sc.clone(),
            consts: ints.clone(),
            tile: kt,
            tile_consts: if kt == tile { tc.clone() } else { None },
            ops,
            ordered,
        };
        let b: Built = if rng.range(0, 4) == 0 {
            row_loop_kernel(rng, &spec)
        } else {
            tile_kernel(rng, &spec)
        };
        for (k, v) in b.feats.ops {
            *feats.ops.entry(k).or_default() += v;
        }
        kernels.push(b.text);
        let binds: Vec<String> = ts.iter().chain(&b.extra).map(|p| p.name.clone()).collect();
        prog_params.extend(b.extra.iter().cloned());
        let mut binds = binds;
        for (n, _) in &sc {
            binds.push(n.clone());
        }
        launches.push(format!("  launch @{name}({})", binds.join(", ")));
    }
    let mut text = module_text(seed, &lines, &kernels);
    text.push_str(&format!(
        "program(\n{}\n) {{\n",
        params_of(&prog_params, &sc)
    ));
    for tl in &temps {
        text.push_str(tl);
        text.push('\n');
    }
    for l in &launches {
        text.push_str(l);
        text.push('\n');
    }
    text.push_str("}\n");
    feats.add("launch");
    (text, "program", feats)
}

/// Generates the program of `seed` (see the module doc). Deterministic in the seed.
pub fn generate(seed: u64) -> Case {
    let mut rng = Rng::seeded(mix(seed, 1));
    let (text, shape, feats) = match rng.range(0, 22) {
        0..=7 => single(&mut rng, seed),
        8..=12 => program(&mut rng, seed),
        13..=16 => gemm(&mut rng, seed),
        17..=19 => super::rings::ring(&mut rng, seed),
        _ => super::attention::attention(&mut rng, seed),
    };
    Case {
        seed,
        text,
        shape,
        feats,
    }
}
