//! Where the PTX backend widens a 16-bit tile to f32 (backends/src/ptx/lower/deferred.rs,
//! docs/backends.md): a tile loaded before a loop without dots and first cast inside it is
//! widened inside the loop (its packed words live across the loop), and again after the loop
//! for a cast there (the loop may run no times); a tile cast before the loop is widened once,
//! before it. Each kernel also runs on the interpreter against an f64 loop on ragged inputs,
//! including a loop that runs no times.

use kir_backends::interp::{self, HostArg};
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_compiler::internal::pipeline;
use kir_ir::Dtype;
use kir_tests::{compare, t, tolerance, F64s, Rng};
use std::collections::BTreeMap;

/// `y = x + Σ_{i < n} x`, with `x`'s cast to f32 inside the loop (`inside`) or before it.
fn kernel(inside: bool) -> String {
    let (before, within) = if inside {
        ("", "    %tf = cast %t : tile<256 x f32>\n")
    } else {
        ("  %tf = cast %t : tile<256 x f32>\n", "")
    };
    format!(
        "module widen\n\
         kernel @widen(x: in tensor<bf16>[N], y: out tensor<f32>[N], n: i32) grid [1, 1, 1] {{\n\
         \x20 %z = const 0 : i32\n\
         \x20 %one = const 1 : i32\n\
         \x20 %cnt = param n : i32\n\
         \x20 %t = load x[%z] other 0.0 : tile<256 x bf16>\n\
         {before}\
         \x20 %acc0 = const 0.0 : tile<256 x f32>\n\
         \x20 %r = for %i = %z to %cnt step %one iter(%a = %acc0) : tile<256 x f32> {{\n\
         {within}\
         \x20   %a1 = add %a, %tf : tile<256 x f32>\n\
         \x20   yield %a1\n\
         \x20 }}\n\
         \x20 %tf2 = cast %t : tile<256 x f32>\n\
         \x20 %o = add %r, %tf2 : tile<256 x f32>\n\
         \x20 store y[%z], %o guard\n\
         }}\n"
    )
}

/// The `cvt.f32.bf16` lines before the loop, inside it and after it.
fn widenings(ptx: &str) -> (usize, usize, usize) {
    let mut part = 0;
    let mut n = [0usize; 3];
    for l in ptx.lines() {
        if l.starts_with("$L_for_") {
            part = 1;
        } else if l.starts_with("$L_endfor_") {
            part = 2;
        } else if l.contains("cvt.f32.bf16") {
            n[part] += 1;
        }
    }
    (n[0], n[1], n[2])
}

#[test]
fn a_cast_inside_a_dot_free_loop_widens_there_and_after_it() {
    for target in [Target::Sm80, Target::Sm90a] {
        let inside = compile(&kernel(true), &vec![], None, target, Emit::Ptx)
            .unwrap_or_else(|e| panic!("{e}"))
            .text;
        let (pre, within, post) = widenings(&inside);
        assert_eq!(
            pre,
            0,
            "{}: widened before the loop\n{inside}",
            target.name()
        );
        assert!(
            within > 0,
            "{}: not widened in the loop\n{inside}",
            target.name()
        );
        assert_eq!(
            post,
            within,
            "{}: not widened again after the loop",
            target.name()
        );
        let before = compile(&kernel(false), &vec![], None, target, Emit::Ptx)
            .unwrap_or_else(|e| panic!("{e}"))
            .text;
        let (pre, within, post) = widenings(&before);
        assert!(
            pre > 0,
            "{}: the cast before the loop moved\n{before}",
            target.name()
        );
        assert_eq!(
            within,
            0,
            "{}: widened in the loop\n{before}",
            target.name()
        );
        assert_eq!(post, 0, "{}: widened twice\n{before}", target.name());
    }
}

/// Two loops in a row that each cast the tile loaded before them: each widens it for itself.
const TWO_LOOPS: &str = "module widen2
kernel @widen2(x: in tensor<bf16>[N], y: out tensor<f32>[N], n: i32) grid [1, 1, 1] {
  %z = const 0 : i32
  %one = const 1 : i32
  %cnt = param n : i32
  %t = load x[%z] other 0.0 : tile<256 x bf16>
  %acc0 = const 0.0 : tile<256 x f32>
  %r = for %i = %z to %cnt step %one iter(%a = %acc0) : tile<256 x f32> {
    %tf = cast %t : tile<256 x f32>
    %a1 = add %a, %tf : tile<256 x f32>
    yield %a1
  }
  %r2 = for %i = %z to %cnt step %one iter(%a = %r) : tile<256 x f32> {
    %tf = cast %t : tile<256 x f32>
    %a1 = mul %a, %tf : tile<256 x f32>
    yield %a1
  }
  store y[%z], %r2 guard
}
";

#[test]
fn sibling_loops_each_widen_the_tile() {
    for target in [Target::Sm80, Target::Sm90a] {
        let ptx = compile(TWO_LOOPS, &vec![], None, target, Emit::Ptx)
            .unwrap_or_else(|e| panic!("{e}"))
            .text;
        let mut per_loop = Vec::new();
        let mut inside = None;
        for l in ptx.lines() {
            if l.starts_with("$L_for_") {
                inside = Some(0usize);
            } else if l.starts_with("$L_endfor_") {
                per_loop.extend(inside.take());
            } else if l.contains("cvt.f32.bf16") {
                if let Some(n) = inside.as_mut() {
                    *n += 1;
                }
            }
        }
        assert_eq!(per_loop.len(), 2, "{}: two loops\n{ptx}", target.name());
        assert!(
            per_loop.iter().all(|&n| n > 0) && per_loop[0] == per_loop[1],
            "{}: widenings per loop {per_loop:?}\n{ptx}",
            target.name()
        );
    }
}

#[test]
fn both_forms_match_an_f64_loop_on_the_interpreter() {
    let mut rng = Rng::fresh("deferred_conversions");
    for inside in [true, false] {
        let src = kernel(inside);
        let m = pipeline::output(&src, &vec![])
            .unwrap_or_else(|e| panic!("{}", e.render("widen", &src)));
        for n_elems in [1usize, 37, 200, 255, 256] {
            for trips in [0i64, 1, 3] {
                let xs: Vec<f64> = rng.tensor(n_elems, 3.0, Dtype::Bf16);
                let args: BTreeMap<String, HostArg> = [
                    ("x".to_string(), t(Dtype::Bf16, &[n_elems], xs.clone())),
                    ("n".to_string(), HostArg::Int(trips)),
                ]
                .into_iter()
                .collect();
                let out = interp::run(&m, &args).unwrap_or_else(|e| panic!("{e}"));
                let want: Vec<f64> = xs.iter().map(|x| x * (1.0 + trips as f64)).collect();
                compare(
                    &format!("inside {inside}, {n_elems} elements, {trips} trips"),
                    out["y"].data.f64s(),
                    &want,
                    tolerance(Dtype::F32),
                );
            }
        }
    }
}
