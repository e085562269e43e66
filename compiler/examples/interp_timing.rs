//! Times the CPU interpreter on the built-in attention_fwd (bf16, D = 128, one head, S = 1024),
//! in parallel and sequentially: `cargo run --release -p kir-compiler --example interp_timing`.
//! A measurement, not a test: docs/history/benchmarks-log.md, "CPU interpreter", records its figures.

use kir_backends::interp::{run_with, HostArg, HostTensor, RunOptions};
use kir_ir::Dtype;
use std::collections::BTreeMap;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd")
        .ok_or("attention_fwd is not built in")?;
    let defs = [("DTYPE", "bf16"), ("HEAD_DIM", "128"), ("CAUSAL", "0")]
        .map(|(a, b)| (a.to_string(), b.to_string()));
    let (_, spec) = kir_compiler::internal::pipeline::frontend(src, &defs)
        .map_err(|e| e.render("attention_fwd.kir", src))?;
    let (s, d) = (1024usize, 128usize);
    // A fixed, cheap pseudo-random fill (values in [-1, 1)).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut tensor = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    };
    let mut args = BTreeMap::new();
    for name in ["q", "k", "v"] {
        let data = tensor(s * d);
        args.insert(
            name.to_string(),
            HostArg::Tensor(HostTensor {
                dtype: Dtype::Bf16,
                shape: vec![1, 1, s, d],
                data: data.into(),
            }),
        );
    }
    args.insert(
        "scale".to_string(),
        HostArg::Scalar(1.0 / (d as f64).sqrt()),
    );
    for parallel in [true, false] {
        let t = Instant::now();
        run_with(
            &spec,
            &args,
            &RunOptions {
                parallel,
                ..Default::default()
            },
        )?;
        println!(
            "attention_fwd bf16 S={s} D={d}, one head, parallel={parallel}: {:?}",
            t.elapsed()
        );
    }
    Ok(())
}
