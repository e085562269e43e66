//! The `stream_k` pass (compiler/src/passes/schedule/stream_k.rs), on the CPU: GEMMs on ragged
//! shapes whose tile counts leave a last wave (T ≥ 2P, T mod P > 0) run on a persistent grid
//! with a stream-K tail on the interpreter, against an f64 oracle, with and without an
//! epilogue; the same after pipelining and warp specialization (the sm_90a GEMM schedule's
//! shape), with the same bits under every scheduler seed; grids with no tail (T < 2P, or T a
//! multiple of P) stay exact; the program the pass builds (temps, the zeroing launch); and
//! kernels the pass does not take.

use kir_backends::interp::{run_with, HostArg, RunOptions};
use kir_compiler::internal::passes::{
    pipelining, stream_k, warp_specialize_within, PipelineConfig, WsPlan,
};
use kir_ir::{Dtype, Module, Opcode};
use kir_tests::oracle::{gemm as gemm_ref, Epilogue};
use kir_tests::sched_diff::{bits, checked, count, spec};
use kir_tests::{compare, t, tolerance, F64s, Rng};
use std::collections::BTreeMap;

/// f32 GEMM with `tiles` (BLOCK_M, BLOCK_N, BLOCK_K) and `extra` defines.
fn gemm(tiles: (usize, usize, usize), extra: &[(&str, &str)]) -> Module {
    let (bm, bn, bk) = (
        tiles.0.to_string(),
        tiles.1.to_string(),
        tiles.2.to_string(),
    );
    let mut defs = vec![
        ("DTYPE", "f32"),
        ("BLOCK_M", bm.as_str()),
        ("BLOCK_N", bn.as_str()),
        ("BLOCK_K", bk.as_str()),
    ];
    defs.extend_from_slice(extra);
    spec("gemm", &defs)
}

/// Pipelined (cp.async rings of 3 stages) and warp-specialized with one consumer of 4 warps.
fn scheduled(m: &Module) -> Module {
    let cfg = PipelineConfig {
        smem_budget: 232_448,
        stages: Some(3),
        hold_carried_dots: false,
        tma_rings: false,
    };
    let piped = pipelining(m, &cfg).expect("pipelining");
    warp_specialize_within(&piped, &WsPlan::one_consumer(4, None), 232_448).expect("ws")
}

/// Runs `m` on random inputs of (bt, m, k, n) of magnitude 3 from `rng` under scheduler
/// `seed`, compares c with the f64 oracle and returns the outputs' bits.
fn run_checked(
    what: &str,
    m: &Module,
    dims: (usize, usize, usize, usize),
    epi: Epilogue,
    seed: u64,
    rng: &mut Rng,
) -> Vec<(String, Vec<u64>)> {
    let (bt, mm, kk, nn) = dims;
    let a = rng.tensor(bt * mm * kk, 3.0, Dtype::F32);
    let b = rng.tensor(bt * kk * nn, 3.0, Dtype::F32);
    let bias = rng.tensor(nn, 3.0, Dtype::F32);
    let mut args: BTreeMap<String, HostArg> = BTreeMap::new();
    args.insert("a".into(), t(Dtype::F32, &[bt, mm, kk], a.clone()));
    args.insert("b".into(), t(Dtype::F32, &[bt, kk, nn], b.clone()));
    args.insert("alpha".into(), HostArg::Scalar(0.75));
    let with_bias = matches!(epi, Epilogue::Bias);
    if with_bias {
        args.insert("bias".into(), t(Dtype::F32, &[nn], bias.clone()));
    }
    let opts = RunOptions {
        parallel: true,
        seed,
    };
    let out = run_with(m, &args, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
    let bias = with_bias.then_some(&bias[..]);
    let want = gemm_ref(&a, &b, None, bias, dims, false, 0.75, epi);
    compare(what, out["c"].data.f64s(), &want, tolerance(Dtype::F32));
    bits(&out)
}

/// (T, whether the grid has a stream-K tail) for `tiles` over (bt, m, k, n) on P programs.
fn tail(tiles: (usize, usize, usize), programs: usize, dims: (usize, usize, usize, usize)) -> bool {
    let (bt, m, _, n) = dims;
    let t = n.div_ceil(tiles.1) * m.div_ceil(tiles.0) * bt;
    t >= 2 * programs && t % programs > 0
}

#[test]
fn stream_k_gemm_matches_the_oracle_on_ragged_shapes() {
    // (tiles, programs, (bt, m, k, n)): tile counts T ≥ 2P with a last wave, K loops of 2 to
    // 13 iterations, a batch axis; then two grids with no stream-K tail.
    let cases = [
        ((16, 16, 16), 4, (1, 70, 100, 45)),
        ((16, 16, 16), 7, (1, 70, 100, 45)),
        ((16, 32, 8), 5, (2, 37, 61, 50)),
        ((16, 16, 32), 4, (1, 95, 33, 77)),
        ((32, 16, 16), 5, (3, 41, 200, 29)),
        ((16, 16, 16), 8, (1, 70, 100, 45)),
        ((16, 16, 16), 5, (1, 70, 100, 45)),
    ];
    let tails = cases.iter().filter(|c| tail(c.0, c.1, c.2)).count();
    assert_eq!(tails, 5, "the first five cases have a stream-K tail");
    for (tiles, programs, dims) in cases {
        for (epi, extra) in [
            (Epilogue::None, vec![]),
            (Epilogue::Bias, vec![("EPILOGUE", "bias"), ("GROUP_M", "2")]),
        ] {
            let what = format!("gemm {tiles:?} {extra:?} stream_k {programs} {dims:?}");
            let m = checked(
                stream_k(&gemm(tiles, &extra), programs as u32, true).expect("stream_k"),
                &what,
            );
            assert_eq!(count(&m, Opcode::SemWait), 1, "{what}");
            assert_eq!(count(&m, Opcode::SemSignal), 1, "{what}");
            let mut rng = Rng::fresh(&what);
            run_checked(&what, &m, dims, epi, 0, &mut rng);
            let sched = checked(scheduled(&m), &format!("{what} scheduled"));
            assert_eq!(count(&sched, Opcode::WarpSpecialize), 1, "{what}");
            let mut first = None;
            for seed in 0..4 {
                let mut rng = Rng::seeded(7);
                let got = run_checked(&what, &sched, dims, epi, seed, &mut rng);
                // The same inputs give the same bits under every scheduler seed.
                match &first {
                    None => first = Some(got),
                    Some(f) => assert!(*f == got, "{what}: seed {seed} differs"),
                }
            }
        }
    }
}

#[test]
fn the_program_zeroes_the_counters_before_each_launch() {
    let m = stream_k(&gemm((16, 16, 16), &[]), 4, true).expect("stream_k");
    let p = m.program.as_ref().expect("a program");
    let launches: Vec<&str> = p.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(launches, ["gemm_stream_k_zero", "gemm"]);
    let temps: Vec<String> = p
        .temps
        .iter()
        .map(|t| format!("{}: {}", t.name, t.ty))
        .collect();
    assert_eq!(
        temps,
        [
            "stream_k_partials: tensor<f32>[4, 16, 16]",
            "stream_k_flags: tensor<i32>[4]"
        ]
    );
    // The entry's params are the kernel's own, so callers bind the same arguments.
    let names: Vec<&str> = p.params.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "alpha"]);
    // The grid is persistent: min(T, P) programs.
    let (_, k) = m.kernel("gemm").expect("gemm");
    assert_eq!(
        k.grid[0].to_string(),
        "min(cdiv(N, 16) * cdiv(M, 16) * Bt, 4)"
    );
}

#[test]
fn kernels_without_one_summed_k_loop_are_left_alone_or_refused_with_the_reason() {
    // Attention's key loop rescales its accumulator (not a sum of dot products); the norms'
    // kernels have no loop a persistent grid takes.
    for (name, why) in [
        (
            "attention_fwd",
            "its K loop carries `%acc`, which is not a zero f32 tile that only one `dot` accumulates into",
        ),
        ("rmsnorm_fwd", "a persistent grid does not take it"),
        ("layernorm_fwd", "a persistent grid does not take it"),
    ] {
        let m = spec(name, &[]);
        let out = stream_k(&m, 4, false).expect("stream_k");
        assert_eq!(
            kir_ir::text::print(&out),
            kir_ir::text::print(&m),
            "{name} changed"
        );
        // `--stream-k on` (strict): an error naming the kernel and why.
        let e = format!("{:?}", stream_k(&m, 4, true).expect_err(name));
        assert!(e.contains(&format!("`@{name}` cannot share out")), "{e}");
        assert!(e.contains(why), "{name}: {e}");
    }
    // SwiGLU's two accumulators are both sums: it qualifies, with a partial temp for each.
    let m = stream_k(&gemm((16, 16, 16), &[("EPILOGUE", "swiglu")]), 4, true).expect("stream_k");
    let temps = &m.program.as_ref().expect("a program").temps;
    assert_eq!(temps.len(), 3, "two partial temps and the counters");
    assert!(
        stream_k(&m, 0, false).is_err(),
        "a grid of no programs is an error"
    );
}

#[test]
fn the_default_gemm_tile_with_a_stream_k_tail_assembles_without_spills_on_every_target() {
    use kir_backends::Target;
    use kir_compiler::internal::compiled::Emit;
    use kir_compiler::internal::plan::{CompilePlan, Flags};
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    let none = kir_tests::defs(&[]);
    // 16384×14336×4096: sm_90a's row (128×256 tiles, warp-specialized, persistent), and each
    // other target's defaults; `--stream-k on` brings the persistent grid where the row has
    // none.
    let shapes = [
        ("a".to_string(), vec![1usize, 16384, 4096]),
        ("b".to_string(), vec![1, 4096, 14336]),
    ];
    for target in [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a] {
        let compile = |stream_k| {
            let flags = Flags {
                stream_k,
                ..Flags::default()
            };
            let plan = CompilePlan::resolve_for(src, &none, target, Emit::Ptx, flags, &shapes)
                .unwrap_or_else(|e| panic!("{e}"));
            kir_compiler::internal::pipeline::compile(src, &plan)
                .unwrap_or_else(|e| panic!("{}: {e}", target.name()))
        };
        let (plain, on) = (compile(None), compile(Some(true)));
        let name = format!("stream-K gemm on {}", target.name());
        // The counters: an acquiring spin and a releasing add, in the GEMM kernel; a zeroing
        // kernel before it.
        for want in ["ld.acquire.gpu.global", "red.release.gpu.global.add.s32"] {
            assert!(on.text.contains(want), "{name}: no `{want}`");
            assert!(
                !plain.text.contains(want),
                "{name}: `{want}` without the flag"
            );
        }
        assert!(on.text.contains(".entry gemm_stream_k_zero"), "{name}");
        let log = kir_tests::ptxas::assemble("stream_k_gemm", &on.text, target);
        kir_tests::ptxas::assert_no_spills(&log, &name);
    }
    // `--persistent off` leaves no grid to share out.
    let flags = Flags {
        stream_k: Some(true),
        persistent: Some(0),
        ..Flags::default()
    };
    let e = CompilePlan::resolve(src, &none, Target::Sm90a, Emit::Ptx, flags)
        .expect_err("no persistent grid");
    assert!(e.to_string().contains("--stream-k on shares out"), "{e}");
}
