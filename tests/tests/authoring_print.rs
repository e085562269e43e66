//! `print` and the lowering of the authoring ops: the interpreter's lines (their text, program
//! order whether instances run in parallel or not, the lines before a failure), `print` through
//! the optimizer (its operands stay alive), through fusion (no print is dropped with a fused
//! launch) and through the scheduling passes of every target
//! (a GEMM printing its K offsets: the scheduled module prints the same lines and computes the
//! same bits, and its PTX assembles), and the PTX and CUDA C that erf, pow, fma and print lower
//! to on every target (tests/checks/authoring.check, ptxas; NVRTC is tests/tests/cuda_c.rs's).

use kir_backends::interp::{run_printing, HostArg, HostTensor, RunOptions};
use kir_backends::nvrtc::ptxas;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::{Dtype, Module};
use kir_tests::{filecheck, t, F64s, Rng};
use std::collections::BTreeMap;

/// Runs `m` on the interpreter; returns its outputs (or the error) and what `print` wrote.
fn run(
    m: &Module,
    args: &BTreeMap<String, HostArg>,
    parallel: bool,
) -> (Result<BTreeMap<String, HostTensor>, String>, String) {
    let mut printed = Vec::new();
    let opts = RunOptions { parallel, seed: 0 };
    let r = run_printing(m, args, &opts, &mut printed).map_err(|e| e.message);
    (r, String::from_utf8(printed).expect("utf-8"))
}

fn specialized(src: &str) -> Module {
    pipeline::output(src, &[]).unwrap_or_else(|e| panic!("{}", e.render("test", src)))
}

/// Every value kind: no value, scalars of each dtype, a bf16 tile, an i1 tile, a rank-2 tile
/// with a u8 twin and an i64 scalar (numbered `#k`), a value only `print` reads, and a loop.
const PRINTING: &str = r#"module printing

kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [cdiv(N, 4), 2, 1] {
  %p = program_id 0 : i32
  %q = program_id 1 : i32
  %four = const 4 : i32
  %o = mul %p, %four : i32
  %x = load x[%o] other 0.5 : tile<4xf32>
  print "start"
  print "pq" %p, %q
  %b = cast %x : tile<4xbf16>
  print "x" %b
  %zero = const 0.0 : f32
  %pos = cmp gt %x, %zero : tile<4xi1>
  print "pos" %pos
  %i = iota axis 1 : tile<2x3xi32>
  %u = cast %i : tile<2x3xu8>
  %l = cast %q : i64
  print "idx" %i, %u, %l
  %twice = add %x, %x : tile<4xf32>
  print "twice" %twice
  %lo = const 0 : i32
  %one = const 1 : i32
  %two = const 2 : i32
  for %j = %lo to %two step %one {
    print "j" %j
  }
  store y[%o], %x guard
}
"#;

/// What PRINTING prints for inputs `x`, written out by hand (the values are multiples of 1/4,
/// whose `%.9g` text is Rust's `{}`).
fn printing_lines(x: &[f64]) -> String {
    let n = x.len();
    let mut s = String::new();
    for q in 0..2 {
        for p in 0..n.div_ceil(4) {
            let pid = format!("({p}, {q}, 0)");
            let xs: Vec<f64> = (0..4).map(|e| *x.get(4 * p + e).unwrap_or(&0.5)).collect();
            s += &format!("{pid} start\n{pid} pq#0: {p}\n{pid} pq#1: {q}\n");
            for (e, v) in xs.iter().enumerate() {
                s += &format!("{pid} x[{e}]: {v}\n");
            }
            for (e, v) in xs.iter().enumerate() {
                s += &format!("{pid} pos[{e}]: {}\n", (*v > 0.0) as u8);
            }
            for k in 0..2 {
                for r in 0..2 {
                    for c in 0..3 {
                        s += &format!("{pid} idx#{k}[{r}, {c}]: {c}\n");
                    }
                }
            }
            s += &format!("{pid} idx#2: {q}\n");
            for (e, v) in xs.iter().enumerate() {
                s += &format!("{pid} twice[{e}]: {}\n", 2.0 * v);
            }
            s += &format!("{pid} j: 0\n{pid} j: 1\n");
        }
    }
    s
}

#[test]
fn lines_come_in_program_order() {
    let mut rng = Rng::fresh("print");
    let n = rng.range(1, 30);
    let x: Vec<f64> = (0..n)
        .map(|_| (rng.range(0, 81) as f64 - 40.0) / 4.0)
        .collect();
    let args = BTreeMap::from([("x".to_string(), t(Dtype::F32, &[n], x.clone()))]);
    let want = printing_lines(&x);
    // The specialized module, and the front end's output (after the e-graph, DCE and the other
    // passes), which keeps what only `print` reads (`%twice`).
    let (_, spec) = pipeline::frontend(PRINTING, &[]).expect("front end");
    let optimized = specialized(PRINTING);
    assert!(kir_ir::text::print(&optimized).contains("print \"twice\""));
    for m in [&spec, &optimized] {
        for parallel in [true, false] {
            let (out, printed) = run(m, &args, parallel);
            assert_eq!(out.expect("runs")["y"].data.f64s(), &x[..]);
            assert_eq!(printed, want, "parallel: {parallel}");
        }
    }
}

#[test]
fn lines_before_a_failure_are_written() {
    // Program 1 prints, then loads out of bounds (no `other`): an error after its line.
    let src = "module fails\n\n\
        kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [2, 1, 1] {\n\
        \x20 %p = program_id 0 : i32\n\
        \x20 print \"before\" %p\n\
        \x20 %k = const 5 : i32\n\
        \x20 %o = mul %p, %k : i32\n\
        \x20 %x = load x[%o] : tile<5xf32>\n\
        \x20 print \"after\" %p\n\
        \x20 store y[%o], %x guard\n\
        }\n";
    let m = specialized(src);
    let args = BTreeMap::from([("x".to_string(), t(Dtype::F32, &[7], vec![1.0; 7]))]);
    for parallel in [true, false] {
        let (out, printed) = run(&m, &args, parallel);
        let err = out.expect_err("program 1 reads past the end");
        assert!(err.contains("program (1, 0, 0)"), "{err}");
        assert_eq!(
            printed,
            "(0, 0, 0) before: 0\n(0, 0, 0) after: 0\n(1, 0, 0) before: 1\n"
        );
    }
}

/// The fusion pass keeps every `print` of a program: tests/in/fusion/gate_up_swiglu.kir with a
/// print in the gate GEMM's loop and one in the SwiGLU kernel (whose epilogue fusion would drop
/// it, so the kernel stays a launch of its own) prints the same lines after fusion as before.
#[test]
fn fusion_keeps_the_prints() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/fusion/gate_up_swiglu.kir");
    let src = std::fs::read_to_string(path).expect("read");
    let (dot, cast) = (
        "    %acc_n = dot %at, %bt, %acc_c : tile<BLOCK_M x BLOCK_N x f32>\n",
        "  %o = cast %prod : tile<BLOCK_R x BLOCK_C x DTYPE>\n",
    );
    assert!(src.contains(dot) && src.contains(cast));
    let src = src
        .replace(dot, &format!("{dot}    print \"k\" %k0\n"))
        .replace(cast, &format!("{cast}  print \"rc\" %rblk, %cblk\n"));
    let (_, spec) = pipeline::frontend(&src, &[]).expect("front end");
    let fused = specialized(&src);
    assert!(fused
        .program
        .as_ref()
        .is_some_and(|p| p.launches.len() == 2));
    let mut rng = Rng::fresh("fusion print");
    let (m, k, n) = (rng.range(1, 90), rng.range(1, 70), rng.range(1, 150));
    let args = BTreeMap::from([
        (
            "x".to_string(),
            t(Dtype::Bf16, &[m, k], rng.tensor(m * k, 2.0, Dtype::Bf16)),
        ),
        (
            "wg".to_string(),
            t(Dtype::Bf16, &[k, n], rng.tensor(k * n, 2.0, Dtype::Bf16)),
        ),
        (
            "wu".to_string(),
            t(Dtype::Bf16, &[k, n], rng.tensor(k * n, 2.0, Dtype::Bf16)),
        ),
    ]);
    let (want, want_lines) = run(&spec, &args, true);
    let (got, got_lines) = run(&fused, &args, true);
    assert_eq!(
        got.expect("fused")["out"].data.f64s(),
        want.expect("spec")["out"].data.f64s()
    );
    let sorted = |s: &str| {
        let mut v: Vec<String> = s.lines().map(str::to_string).collect();
        v.sort();
        v
    };
    assert!(want_lines.contains(" rc#1: "));
    assert_eq!(sorted(&got_lines), sorted(&want_lines));
}

/// The user GEMM of tests/in/user with a `print` of the K offset in its loop.
fn gemm_printing() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/user/matmul_leaky_relu.kir");
    let src = std::fs::read_to_string(path).expect("read");
    let dot = "    %next = dot %a_blk, %b_blk, %part : tile<BM x BN x f32>\n";
    assert!(src.contains(dot));
    src.replace(dot, &format!("{dot}    print \"k\" %kk\n"))
}

/// The lines without their program ids, sorted (scheduling may renumber programs).
fn unplaced(lines: &str) -> Vec<&str> {
    let mut v: Vec<&str> = lines
        .lines()
        .map(|l| l.split_once(") ").map_or(l, |(_, rest)| rest))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn scheduled_kernels_print_the_same_lines() {
    let src = gemm_printing();
    for target in Target::ALL {
        let plan = CompilePlan::resolve(&src, &[], target, Emit::Ptx, Flags::default())
            .unwrap_or_else(|e| panic!("{target:?}: {e}"));
        let mut before = None;
        let c = pipeline::compile_observed(&src, &plan, &mut |pass, m| {
            if !pipeline::SCHEDULE_PASSES.contains(&pass) {
                before = Some(m.clone());
            }
        })
        .unwrap_or_else(|e| panic!("{target:?}: {e}"));
        let before = before.expect("the front end ran");
        ptxas(&c.text, target.name()).unwrap_or_else(|e| panic!("{target:?}: {e}"));
        assert!(c.text.contains("vprintf"), "{target:?}");
        let mut rng = Rng::fresh("scheduled print");
        let (m, k, n) = (rng.range(1, 300), rng.range(1, 200), rng.range(1, 300));
        let args = BTreeMap::from([
            (
                "a".to_string(),
                t(Dtype::F16, &[m, k], rng.tensor(m * k, 2.0, Dtype::F16)),
            ),
            (
                "b".to_string(),
                t(Dtype::F16, &[k, n], rng.tensor(k * n, 2.0, Dtype::F16)),
            ),
        ]);
        let (want, want_lines) = run(&before, &args, true);
        let want = want.unwrap_or_else(|e| panic!("{target:?}: {e}"));
        assert!(!want_lines.is_empty());
        for seed in 0..2 {
            let mut printed = Vec::new();
            let opts = RunOptions {
                parallel: true,
                seed,
            };
            let got = run_printing(&c.module, &args, &opts, &mut printed)
                .unwrap_or_else(|e| panic!("{target:?} seed {seed}: {e}"));
            let got_bits: Vec<u64> = got["c"].data.f64s().iter().map(|v| v.to_bits()).collect();
            let want_bits: Vec<u64> = want["c"].data.f64s().iter().map(|v| v.to_bits()).collect();
            assert!(
                got_bits == want_bits,
                "{target:?} seed {seed}: outputs differ"
            );
            let printed = String::from_utf8(printed).expect("utf-8");
            assert_eq!(unplaced(&printed), unplaced(&want_lines), "{target:?}");
        }
    }
}

#[test]
fn ptx_and_cuda_c_of_the_authoring_ops() {
    let spec = include_str!("../checks/authoring.check");
    let read = |f: &str| {
        std::fs::read_to_string(format!("{}/in/{f}", env!("CARGO_MANIFEST_DIR"))).expect(f)
    };
    let (authoring, gelu) = (read("authoring.kir"), read("gelu_exact.kir"));
    for target in Target::ALL {
        for dt in ["f32", "bf16"] {
            let d = vec![("DTYPE".to_string(), dt.to_string())];
            let c = compile(&authoring, &d, None, target, Emit::Ptx)
                .unwrap_or_else(|e| panic!("{target:?} {dt}: {e}"));
            let vars = [("target", target.name())];
            if let Err(errs) = filecheck::check(&c.text, spec, &vars) {
                panic!("{target:?} {dt}: {}", errs.join("\n"));
            }
            ptxas(&c.text, target.name()).unwrap_or_else(|e| panic!("{target:?} {dt}: {e}"));
            let cu = compile(&authoring, &d, None, target, Emit::Cuda)
                .unwrap_or_else(|e| panic!("{target:?} {dt}: {e}"))
                .text;
            for want in [
                "erff(",
                "powf(",
                "__fmaf_rn(",
                "printf(\"(%d, %d, %d) program 0: s, x[0]#1: %.9g\\n\"",
            ] {
                assert!(
                    cu.contains(want),
                    "{target:?} {dt}: no `{want}` in the CUDA C"
                );
            }
        }
        let g = compile(&gelu, &[], None, target, Emit::Ptx)
            .unwrap_or_else(|e| panic!("gelu {target:?}: {e}"));
        assert!(g.text.contains("ex2.approx.f32") && !g.text.contains("vprintf"));
        ptxas(&g.text, target.name()).unwrap_or_else(|e| panic!("gelu {target:?}: {e}"));
    }
}

/// A program whose second kernel prints: its PTX cut into one module per kernel (as the runtime
/// loads a program, `split_entries`) gives modules that each assemble as a whole program (the
/// driver's JIT once refused the printing kernel's part, whose format strings and `vprintf`
/// prototype had stayed with the first kernel's).
#[test]
fn each_kernel_of_a_printing_program_assembles_alone() {
    let src = r#"module two
kernel @first(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [cdiv(N, 4), 1, 1] {
  %p = program_id 0 : i32
  %four = const 4 : i32
  %o = mul %p, %four : i32
  %x = load x[%o] other 0.0 : tile<4xf32>
  store y[%o], %x guard
}
kernel @second(y: in tensor<f32>[N], z: out tensor<f32>[N]) grid [cdiv(N, 4), 1, 1] {
  %p = program_id 0 : i32
  %four = const 4 : i32
  %o = mul %p, %four : i32
  %y = load y[%o] other 0.0 : tile<4xf32>
  print "y" %y
  %z = add %y, %y : tile<4xf32>
  print "p" %p
  store z[%o], %z guard
}
kernel @third(z: in tensor<f32>[N], w: out tensor<f32>[N]) grid [cdiv(N, 4), 1, 1] {
  %p = program_id 0 : i32
  %four = const 4 : i32
  %o = mul %p, %four : i32
  %z = load z[%o] other 0.0 : tile<4xf32>
  print "z" %z
  store w[%o], %z guard
}
program(x: in tensor<f32>[N], w: out tensor<f32>[N]) {
  temp y: tensor<f32>[N]
  temp z: tensor<f32>[N]
  launch @first(x, y)
  launch @second(y, z)
  launch @third(z, w)
}
"#;
    for target in Target::ALL {
        let c = compile(src, &[], None, target, Emit::Ptx)
            .unwrap_or_else(|e| panic!("{target:?}: {e}"));
        assert_eq!(c.text.matches("vprintf(.param").count(), 1, "one prototype");
        let parts = kir_backends::runtime::split_entries(&c.text);
        assert_eq!(parts.len(), 3, "{target:?}");
        for (symbol, part) in &parts {
            assert_eq!(part.matches(".visible .entry").count(), 1);
            ptxas(part, target.name())
                .unwrap_or_else(|e| panic!("{target:?} {symbol:?} alone: {e}\n{part}"));
        }
    }
}

/// A `print` in the producer partition of a warp-specialized kernel (which one thread runs) is
/// an error naming it, not a silently dropped line.
#[test]
fn print_in_a_producer_partition_is_an_error() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/sched/ring_ws.kir");
    let src = std::fs::read_to_string(path).expect("read");
    let ws = "consumer_regs 232 {\n";
    assert!(src.contains(ws));
    let src = src.replacen(ws, &format!("{ws}    print \"producer\" %r\n"), 1);
    let err = compile(&src, &[], None, Target::Sm90a, Emit::Ptx)
        .err()
        .expect("a print in the producer is refused")
        .to_string();
    assert!(
        err.contains("the producer partition runs on one thread, which cannot lower `print`"),
        "{err}"
    );
}
