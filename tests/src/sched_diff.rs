//! Differential checks of scheduling passes on the CPU interpreter, shared by
//! tests/tests/scheduling.rs, tests/tests/persistent.rs and tests/tests/ws_outer_loop.rs: the
//! front end's output of an op, op counts, a verified and canonically printed module, and a
//! before/after run that demands bit-identical outputs under several seeds.

use crate::{inputs::inputs, F64s, Rng};
use kir_backends::interp::{run_with, HostTensor, RunOptions};
use kir_ir::{Module, Opcode};
use std::collections::BTreeMap;

/// The front end's last module for a built-in op (what the scheduling passes take in the
/// pipeline: after mask_split, attention's key ranges are per query block, its masks guarded).
/// Panics with the rendered diagnostics if the op does not specialize.
pub fn spec(name: &str, defs: &[(&str, &str)]) -> Module {
    let src = kir_compiler::internal::oplib::builtin(name).expect("op");
    let d: Vec<(String, String)> = defs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    kir_compiler::internal::pipeline::output(src, &d)
        .unwrap_or_else(|e| panic!("{name}: {}", e.render(name, src)))
}

/// `m`, after checking that it verifies and that its text parses back and prints the same
/// (canonical); panics naming `what` otherwise.
pub fn checked(m: Module, what: &str) -> Module {
    kir_ir::verifier::verify(&m).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    let text = kir_ir::text::print(&m);
    let again = kir_ir::text::parse(&text).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(kir_ir::text::print(&again), text, "{what}: not canonical");
    m
}

/// How many ops of `op` the module's kernels hold, at any depth.
pub fn count(m: &Module, op: Opcode) -> usize {
    m.kernels
        .values()
        .map(|k| {
            k.dfg
                .blocks
                .values()
                .flat_map(|b| &b.ops)
                .filter(|&&o| k.dfg.ops[o].opcode == op)
                .count()
        })
        .sum()
}

/// The outputs' bit patterns (as f64), by name.
pub fn bits(out: &BTreeMap<String, HostTensor>) -> Vec<(String, Vec<u64>)> {
    out.iter()
        .map(|(n, t)| {
            (
                n.clone(),
                t.data.f64s().iter().map(|x| x.to_bits()).collect(),
            )
        })
        .collect()
}

/// Runs `before` once and `after` under scheduler seeds `0..seeds`, on fresh random ragged
/// inputs of magnitude 1 and 3, and panics unless every output is bit-identical.
pub fn differential(what: &str, before: &Module, after: &Module, seeds: u64) {
    for mag in [1.0, 3.0] {
        let mut rng = Rng::fresh(&format!("{what} x{mag}"));
        let args = inputs(before, mag, &mut rng);
        let a = run_with(before, &args, &RunOptions::default())
            .unwrap_or_else(|e| panic!("{what}: before: {e}"));
        for seed in 0..seeds {
            let opts = RunOptions {
                parallel: true,
                seed,
            };
            let b = run_with(after, &args, &opts)
                .unwrap_or_else(|e| panic!("{what}: after, seed {seed}: {e}"));
            assert!(
                bits(&a) == bits(&b),
                "{what} mag {mag} seed {seed}: outputs differ after scheduling"
            );
        }
    }
}
