//! The autotuner (`kir_compiler::internal::tune`, docs/tuning.md) with a deterministic [`Measure`]: the
//! space it enumerates (the product of the unfixed tune sets and lowering flags; `-D` and
//! fixed flags remove axes), the compiler's pruning (a tile over shared memory), the
//! interpreter check dropping a candidate whose outputs are wrong, duplicate code, winner
//! selection, the progress events and line, and the input errors. Nothing here is timed: the
//! test measure's "time" is a function of the candidate.

use kir_backends::interp::{self, HostArg, HostTensor};
use kir_backends::Target;
use kir_compiler::internal::compiled::Compiled;
use kir_compiler::internal::plan::Flags;
use kir_compiler::internal::tune::{
    self, check, report, Candidate, Dropped, Event, Measure, Progress, TuneError, TuneOptions,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// A square-tile matmul whose largest tile (256: 2 · 256² bf16 operands staged in shared
/// memory) fits no target's shared memory.
const DOT: &str = r#"module tiny_dot

const T: int = 32 tune {16, 32, 256} where T >= 16 && T <= 256

kernel @tiny_dot(a: in tensor<bf16>[M, K], b: in tensor<bf16>[K, N], c: out tensor<f32>[M, N]) grid [cdiv(N, T), cdiv(M, T), 1] {
  %pn = program_id 0 : i32
  %pm = program_id 1 : i32
  %t = const T : i32
  %m0 = mul %pm, %t : i32
  %n0 = mul %pn, %t : i32
  %zero = const 0 : i32
  %k = dim K : i32
  %acc0 = const 0.0 : tile<T x T x f32>
  %acc = for %k0 = %zero to %k step %t iter(%c = %acc0) : tile<T x T x f32> {
    %x = load a[%m0, %k0] other 0.0 : tile<T x T x bf16>
    %y = load b[%k0, %n0] other 0.0 : tile<T x T x bf16>
    %d = dot %x, %y, %c : tile<T x T x f32>
    yield %d
  }
  store c[%m0, %n0], %acc guard
}
"#;

/// Two tunable constants and one that is not, on an elementwise kernel.
const TWO: &str = r#"module two

const A: int = 2 tune {1, 2, 4} where A >= 1
const B: int = 8 tune {8, 16}
const C: int = 3

kernel @two(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [cdiv(N, B), 1, 1] {
  %p = program_id 0 : i32
  %b = const B : i32
  %o = mul %p, %b : i32
  %v = load x[%o] other 0.0 : tile<B x f32>
  %s = const A : f32
  %w = mul %v, %s : tile<B x f32>
  %u = div %w, %s : tile<B x f32>
  store y[%o], %u guard
}
"#;

fn shapes(list: &[(&str, &[usize])]) -> Vec<(String, Vec<usize>)> {
    list.iter()
        .map(|(n, s)| (n.to_string(), s.to_vec()))
        .collect()
}

fn dot_shapes() -> Vec<(String, Vec<usize>)> {
    shapes(&[("a", &[40, 48]), ("b", &[48, 36])])
}

/// Fixed flags: one warp count and ring depth, so only the constants are searched.
fn fixed() -> TuneOptions {
    TuneOptions {
        flags: Flags {
            warps: Some(4),
            stages: Some(2),
            ..Flags::default()
        },
        ..TuneOptions::default()
    }
}

/// Runs the lowered module on the interpreter (corrupting the outputs of the candidate
/// `wrong`), and "times" each candidate with `cost`.
struct Fake {
    wrong: Option<Vec<(String, i64)>>,
    cost: fn(&Candidate) -> f64,
    runs: usize,
    timed: usize,
}

impl Fake {
    fn new(cost: fn(&Candidate) -> f64) -> Fake {
        Fake {
            wrong: None,
            cost,
            runs: 0,
            timed: 0,
        }
    }
}

impl Measure for Fake {
    fn run(
        &mut self,
        c: &Candidate,
        compiled: &Compiled,
        args: &BTreeMap<String, HostArg>,
    ) -> Result<BTreeMap<String, HostTensor>, String> {
        self.runs += 1;
        let mut out = interp::run(&compiled.module, args).map_err(|e| e.to_string())?;
        if self.wrong.as_ref() == Some(&c.consts) {
            for t in out.values_mut() {
                if let interp::HostData::F64(v) = &mut t.data {
                    v[0] += 1000.0;
                }
            }
        }
        Ok(out)
    }

    fn time(
        &mut self,
        c: &Candidate,
        _: &Compiled,
        _: &tune::Shapes,
        _: &BTreeMap<String, HostArg>,
    ) -> Result<f64, String> {
        self.timed += 1;
        Ok((self.cost)(c))
    }
}

fn value(c: &Candidate, name: &str) -> i64 {
    c.consts
        .iter()
        .find(|(n, _)| n == name)
        .map_or(-1, |(_, v)| *v)
}

#[test]
fn the_space_is_the_product_of_the_unfixed_axes() {
    let sh = shapes(&[("x", &[100])]);
    let p = tune::prepare(TWO, &[], Target::Sm80, &sh, &TuneOptions::default()).expect("prepare");
    let names: Vec<&str> = p.axes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["A", "B", "warps", "stages"]);
    assert_eq!(p.candidates.len(), 3 * 2 * 2 * 3);
    assert_eq!(p.candidates[0].label(), "A=1 B=8 warps=4 stages=2");
    assert_eq!(p.candidates[1].label(), "A=1 B=8 warps=4 stages=3");
    assert_eq!(p.candidates[35].label(), "A=4 B=16 warps=8 stages=4");
    // sm_90a adds warp specialization on/off.
    let p = tune::prepare(TWO, &[], Target::Sm90a, &sh, &TuneOptions::default()).expect("prepare");
    assert_eq!(p.candidates.len(), 72);
    assert_eq!(
        p.axes.last().map(|(n, _)| n.as_str()),
        Some("warp-specialize")
    );
    // -D fixes a constant, a flag fixes its axis.
    let d = vec![("A".to_string(), "2".to_string())];
    let p = tune::prepare(TWO, &d, Target::Sm80, &sh, &fixed()).expect("prepare");
    assert_eq!(p.candidates.len(), 2);
    assert!(p.candidates.iter().all(|c| value(c, "A") == -1));
    assert!(p.candidates.iter().all(|c| c.flags.warps == Some(4)));
    assert_eq!(p.candidates[1].cli_args(), "-D B=16 --warps 4 --stages 2");
}

/// An attention kernel adds a persistent grid (off or one program per SM) and `dot_overlap`
/// on/off on sm_90a (the score dot issued under the previous block's P·V), after warp
/// specialization; a GEMM does not, and sm_80 has neither.
#[test]
fn attention_searches_persistence_and_overlap_on_sm90a() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in");
    let sh = shapes(&[
        ("q", &[1, 2, 300, 64]),
        ("k", &[1, 2, 300, 64]),
        ("v", &[1, 2, 300, 64]),
    ]);
    let d = vec![("HEAD_DIM".to_string(), "64".to_string())];
    let names = |t: Target| -> Vec<String> {
        let p = tune::prepare(src, &d, t, &sh, &TuneOptions::default()).expect("prepare");
        p.axes.iter().map(|(n, _)| n.clone()).collect()
    };
    let on90 = names(Target::Sm90a);
    assert_eq!(
        on90[on90.len() - 3..],
        [
            "warp-specialize".to_string(),
            "persistent".to_string(),
            "overlap".to_string()
        ]
    );
    let on80 = names(Target::Sm80);
    assert!(!on80.iter().any(|n| n == "overlap" || n == "persistent"));
    let p = tune::prepare(src, &d, Target::Sm90a, &sh, &TuneOptions::default()).expect("prepare");
    let on: Vec<_> = p
        .candidates
        .iter()
        .filter(|c| c.flags.overlap == Some(true))
        .collect();
    assert_eq!(on.len() * 2, p.candidates.len());
    assert!(
        on[0].cli_args().ends_with("--overlap on"),
        "{}",
        on[0].cli_args()
    );
    // Half the candidates run on a persistent grid of one program per SM, the rest take none.
    let grid: Vec<_> = p.candidates.iter().map(|c| c.flags.persistent).collect();
    let sms = Target::Sm90a.sm_count();
    assert_eq!(
        grid.iter().filter(|&&g| g == Some(sms)).count() * 2,
        grid.len()
    );
    assert_eq!(
        grid.iter().filter(|&&g| g == Some(0)).count() * 2,
        grid.len()
    );
    let persistent = p
        .candidates
        .iter()
        .find(|c| c.flags.persistent == Some(sms))
        .expect("a persistent candidate");
    assert!(
        persistent
            .cli_args()
            .contains(&format!("--persistent {sms}")),
        "{}",
        persistent.cli_args()
    );
    let gemm = kir_compiler::internal::oplib::builtin("gemm").expect("built-in");
    let gsh = shapes(&[("a", &[1, 64, 64]), ("b", &[1, 64, 64])]);
    let p = tune::prepare(gemm, &[], Target::Sm90a, &gsh, &TuneOptions::default()).expect("gemm");
    assert!(!p
        .axes
        .iter()
        .any(|(n, _)| n == "overlap" || n == "persistent"));
}

#[test]
fn empty_and_oversized_spaces_are_errors() {
    let sh = shapes(&[("x", &[100])]);
    let d = vec![
        ("A".to_string(), "2".to_string()),
        ("B".to_string(), "8".to_string()),
    ];
    let e = tune::prepare(TWO, &d, Target::Sm80, &sh, &fixed()).unwrap_err();
    assert!(
        matches!(&e, TuneError::Space(m) if m.contains("nothing to tune")),
        "{e}"
    );
    let small = TuneOptions {
        limit: 10,
        ..TuneOptions::default()
    };
    let e = tune::prepare(TWO, &[], Target::Sm80, &sh, &small).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("36 candidates") && m.contains("A {1, 2, 4}"),
        "{m}"
    );
    // A limit above the cap is the cap; a product that overflows is refused, not allocated.
    let mut wide = String::from("module wide\n");
    for i in 0..25 {
        wide += &format!("const C{i}: int = 1 tune {{1, 2, 3, 4, 5, 6, 7, 8, 9}}\n");
    }
    wide += "kernel @k(x: in tensor<f32>[N]) grid [1, 1, 1] {\n  yield\n}\n";
    let huge = TuneOptions {
        limit: usize::MAX,
        ..TuneOptions::default()
    };
    let e = tune::prepare(&wide, &[], Target::Sm80, &sh, &huge).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("has more candidates than the limit of 1000000"),
        "{m}"
    );
    // A flag the target does not have is refused before anything runs.
    let ws = TuneOptions {
        flags: Flags {
            warp_specialize: Some(true),
            ..Flags::default()
        },
        ..TuneOptions::default()
    };
    assert!(matches!(
        tune::prepare(TWO, &[], Target::Sm80, &sh, &ws),
        Err(TuneError::Space(_))
    ));
    // A source error is the compiler's, located.
    let bad = TWO.replace("tune {8, 16}", "tune {8, 8}");
    assert!(matches!(
        tune::prepare(&bad, &[], Target::Sm80, &sh, &fixed()),
        Err(TuneError::Source(_))
    ));
}

#[test]
fn shapes_must_name_each_input_once_with_its_rank() {
    let o = fixed();
    let t = Target::Sm80;
    let e = tune::prepare(DOT, &[], t, &shapes(&[("a", &[4, 4])]), &o).unwrap_err();
    assert!(e.to_string().contains("input tensor(s) b"), "{e}");
    let e = tune::prepare(DOT, &[], t, &shapes(&[("a", &[4, 4]), ("q", &[4])]), &o).unwrap_err();
    assert!(e.to_string().contains("no input tensor `q`"), "{e}");
    let e = tune::prepare(DOT, &[], t, &shapes(&[("a", &[4]), ("b", &[4, 4])]), &o).unwrap_err();
    assert!(e.to_string().contains("has 2 dims"), "{e}");
    let mut big = fixed();
    big.check_shapes = shapes(&[("a", &[1 << 20, 1 << 20]), ("b", &[4, 4])]);
    let e = tune::prepare(DOT, &[], t, &dot_shapes(), &big).unwrap_err();
    assert!(
        e.to_string().contains("too many for the interpreter check"),
        "{e}"
    );
    let mut o2 = fixed();
    o2.scalars = vec![("eps".into(), 1.0)];
    let e = tune::prepare(DOT, &[], t, &dot_shapes(), &o2).unwrap_err();
    assert!(e.to_string().contains("no scalar param `eps`"), "{e}");
}

#[test]
fn the_check_shrinks_large_dims_and_keeps_dim_expressions() {
    assert_eq!(check::shrink(100), 100);
    assert_eq!(check::shrink(160), 160);
    assert_eq!(check::shrink(4096), 160);
    assert_eq!(check::shrink(4097), 161);
    assert_eq!(check::shrink(1000), 160 + 1000 % 32);
    // gemm_nf4: a is [M, 2 * KH], codes [N, KH]: the check keeps a's width twice KH's.
    let src = kir_compiler::internal::oplib::builtin("gemm_nf4").expect("gemm_nf4");
    let sh = shapes(&[
        ("a", &[512, 1024]),
        ("codes", &[256, 512]),
        ("scales", &[256, 16]),
    ]);
    let d = vec![
        ("BLOCK_M".to_string(), "32".to_string()),
        ("BLOCK_N".to_string(), "64".to_string()),
    ];
    let p = tune::prepare(src, &d, Target::Sm80, &sh, &fixed()).expect("prepare");
    let small: BTreeMap<_, _> = p.check_shapes.into_iter().collect();
    assert_eq!(small["a"], vec![160, 320]);
    assert_eq!(small["codes"], vec![160, 160]);
    assert_eq!(small["scales"], vec![160, 5]);
}

#[test]
fn a_tile_over_shared_memory_is_dropped_and_the_rest_checked_and_timed() {
    let mut m = Fake::new(|c| value(c, "T") as f64);
    let mut events = Vec::new();
    let r = tune::tune_with(
        DOT,
        &[],
        Target::Sm80,
        &dot_shapes(),
        &fixed(),
        &mut m,
        &mut |e| events.push(e.clone()),
    )
    .expect("tunes");
    assert_eq!(r.space, 3);
    assert_eq!(r.counts(), (1, 0, 0, 0));
    let (c, d) = &r.dropped[0];
    assert_eq!(value(c, "T"), 256);
    assert!(
        matches!(d, Dropped::Rejected(w) if w.contains("shared memory")),
        "{d:?}"
    );
    assert_eq!((m.runs, m.timed), (2, 2));
    assert_eq!(r.winner().candidate.label(), "T=16 warps=4 stages=2");
    assert_eq!(r.winner().median_ms, 16.0);
    // One progress event per candidate, in order, the last with everything done.
    let done: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            Event::Progress(p) => Some(p.done),
            Event::Dropped { .. } => None,
        })
        .collect();
    assert_eq!(done, [1, 2, 3]);
    match events.last() {
        Some(Event::Progress(p)) => {
            assert_eq!(p.total, 3);
            assert_eq!(p.best.as_ref().map(|b| b.1), Some(16.0));
        }
        other => panic!("{other:?}"),
    }
    let table = report::table(&r, Some(2.0 * 40.0 * 36.0 * 48.0));
    assert!(table.contains("1 rejected by the compiler"), "{table}");
    assert!(
        table.contains("winner: -D T=16 --warps 4 --stages 2"),
        "{table}"
    );
    assert!(table.contains("TFLOP/s"), "{table}");
}

#[test]
fn a_candidate_with_wrong_results_is_dropped_loudly() {
    let mut m = Fake::new(|c| value(c, "T") as f64);
    m.wrong = Some(vec![("T".to_string(), 16)]);
    let mut dropped = Vec::new();
    let r = tune::tune_with(
        DOT,
        &[],
        Target::Sm80,
        &dot_shapes(),
        &fixed(),
        &mut m,
        &mut |e| {
            if let Event::Dropped { label, why } = e {
                dropped.push((label.clone(), why.clone()));
            }
        },
    )
    .expect("tunes");
    assert_eq!(r.counts(), (1, 0, 1, 0));
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].0, "T=16 warps=4 stages=2");
    assert!(dropped[0].1.contains("output `c`"), "{}", dropped[0].1);
    // The wrong one was never timed; the winner is the only right one left.
    assert_eq!(m.timed, 1);
    assert_eq!(r.timed.len(), 1);
    assert_eq!(value(&r.winner().candidate, "T"), 32);
    assert!(report::table(&r, None).contains("WRONG  T=16"));
}

#[test]
fn the_winner_is_the_fastest_and_ties_keep_enumeration_order() {
    let sh = shapes(&[("x", &[300])]);
    let d = vec![("A".to_string(), "2".to_string())];
    // B=16 is faster; warps do not matter (a tie: the earlier, warps=4, wins).
    let mut m = Fake::new(|c| if value(c, "B") == 16 { 1.0 } else { 2.0 });
    let mut o = fixed();
    o.flags.warps = None;
    let r = tune::tune_with(TWO, &d, Target::Sm80, &sh, &o, &mut m, &mut |_| {}).expect("tunes");
    let times: Vec<f64> = r.timed.iter().map(|t| t.median_ms).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let w = &r.winner().candidate;
    assert_eq!(w.label(), "B=16 warps=4 stages=2");
    let cfg = w.config();
    assert_eq!(cfg.defines, vec![("B".to_string(), "16".to_string())]);
    assert_eq!((cfg.warps, cfg.stages), (Some(4), Some(2)));
    assert!(!cfg.warp_specialize && !cfg.persistent && !cfg.overlap);
}

#[test]
fn candidates_with_the_same_code_are_timed_once() {
    // No loop: the ring depth changes nothing, so every stages value after the first repeats
    // the code of the first.
    let sh = shapes(&[("x", &[300])]);
    let d = vec![
        ("A".to_string(), "2".to_string()),
        ("B".to_string(), "8".to_string()),
    ];
    let mut o = fixed();
    o.flags.stages = None;
    let mut m = Fake::new(|_| 1.0);
    let r = tune::tune_with(TWO, &d, Target::Sm80, &sh, &o, &mut m, &mut |_| {}).expect("tunes");
    assert_eq!(r.space, 3);
    assert_eq!(r.counts(), (0, 2, 0, 0));
    assert_eq!(r.timed.len(), 1);
    assert!(r
        .dropped
        .iter()
        .all(|(_, d)| matches!(d, Dropped::Duplicate(l) if l == "warps=4 stages=2")));
}

#[test]
fn the_progress_line_counts_down_and_estimates() {
    let p = Progress {
        done: 3,
        total: 10,
        best: Some(("T=32 warps=4".into(), 0.5)),
        elapsed: Duration::from_secs(6),
    };
    assert_eq!(
        report::progress_line(&p),
        "tune: 3/10 done, 7 left, best 0.5000 ms (T=32 warps=4), 6.0s elapsed, ~14.0s left"
    );
    let p = Progress {
        done: 0,
        total: 4,
        best: None,
        elapsed: Duration::from_millis(300),
    };
    assert_eq!(
        report::progress_line(&p),
        "tune: 0/4 done, 4 left, best none yet, 0.3s elapsed, ~? left"
    );
    assert_eq!(report::duration(Duration::from_secs(125)), "2m05s");
    assert_eq!(report::duration(Duration::from_secs(7300)), "2h01m");
}

#[test]
fn when_nothing_is_left_the_error_says_why() {
    // Only T=256 is searched, and it does not fit.
    let bad = DOT.replace("tune {16, 32, 256}", "tune {256}");
    let mut m = Fake::new(|_| 1.0);
    let e = tune::tune_with(
        &bad,
        &[],
        Target::Sm80,
        &dot_shapes(),
        &fixed(),
        &mut m,
        &mut |_| {},
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("1 rejected") && msg.contains("shared memory"),
        "{msg}"
    );
}

#[test]
fn the_built_in_ops_declare_tune_sets_on_their_tiles() {
    for (op, consts) in [
        ("gemm", &["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"][..]),
        ("attention_fwd", &["BLOCK_M", "BLOCK_N", "GROUP_H"]),
        (
            "attention_bwd",
            &["BLOCK_M", "BLOCK_N", "BLOCK_KV", "BLOCK_MQ"],
        ),
        ("gemm_nf4", &["BLOCK_M", "BLOCK_N", "BLOCK_K"]),
        ("rmsnorm_fwd", &["BLOCK", "ROWS"]),
        ("rmsnorm_bwd", &["BLOCK"]),
        ("layernorm_fwd", &["BLOCK", "ROWS"]),
        ("layernorm_bwd", &["BLOCK"]),
        ("swiglu", &["BLOCK_R", "BLOCK_N"]),
    ] {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in");
        let m = kir_ir::text::parse(src).expect("parses");
        let tuned: Vec<&str> = m
            .consts
            .iter()
            .filter(|c| c.tune.is_some())
            .map(|c| c.name.as_str())
            .collect();
        let mut want = consts.to_vec();
        want.sort();
        let mut got = tuned.clone();
        got.sort();
        assert_eq!(got, want, "{op}");
        // Powers of two, but for FlashAttention-3's key blocks (80 at d256, 176 at d128).
        let fa3 = |name: &str, v: i64| {
            op == "attention_fwd" && name == "BLOCK_N" && (v == 80 || v == 176)
        };
        for c in m.consts.iter().filter(|c| c.tune.is_some()) {
            let vs = &c.tune.as_ref().expect("tuned").values;
            assert!(
                vs.iter()
                    .all(|v| *v > 0 && ((*v as u64).is_power_of_two() || fa3(&c.name, *v))),
                "{op}.{}: {vs:?}",
                c.name
            );
        }
    }
}
