//! Several consumer partitions on the PTX backend (backends/src/ptx/lower/consumers.rs):
//! attention_fwd under the `fa3` plan (`--ws fa3`: a producer warpgroup and two consumer
//! warpgroups that split the query blocks and ping-pong) compiles for sm_90a with each
//! consumer's thread index counted from its own first warp, its index and its named barrier
//! (15 − index) in registers, its own copy of the shared memory its region allocates (the
//! arena, at `kir_smem + index × stride` with the stride resolved), the empty ring counting both
//! consumers' warps, the kernel's shared bytes the shared part plus two arenas, and ptxas
//! assembles it without spills; one-consumer kernels keep the immediate barrier 15 and no arena;
//! the flags `kirc compile --ws fa3` resolves give PTX and META.json naming the plan; what the
//! backend does not lower is an error naming it; and the interpreter's own `--ws fa3` (`kirc run
//! --device cpu --target sm_90a --ws fa3`) still matches the unscheduled kernel bit for bit on
//! ragged shapes. Whether the consumers' barriers and arenas are right on a GPU is for
//! compute-sanitizer (docs/backends.md, "Several consumers").

use kir_backends::interp::{self, HostArg};
use kir_backends::Target;
use kir_compiler::internal::compile::{Compiled, Emit};
use kir_compiler::internal::passes::WsPlan;
use kir_compiler::internal::pipeline::{self, WsChoice};
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_tests::sched_diff::bits;
use kir_tests::{defs, dtype, t, Rng};
use std::collections::BTreeMap;

/// attention_fwd with `d` compiled for sm_90a as `kirc compile --ws PLAN` compiles it.
fn compile_with(plan: WsPlan, d: &[(&str, &str)]) -> Result<Compiled, String> {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let flags = Flags {
        ws_ptx: Some(WsChoice::Plan(plan)),
        ..Flags::default()
    };
    let p = CompilePlan::resolve(src, &defs(d), Target::Sm90a, Emit::Ptx, flags)
        .map_err(|e| e.to_string())?;
    pipeline::compile(src, &p).map_err(|e| e.to_string())
}

fn fa3(d: &[(&str, &str)]) -> Compiled {
    compile_with(WsPlan::FA3, d).unwrap_or_else(|e| panic!("{d:?}: {e}"))
}

/// The instruction lines of `ptx` (trimmed, without the `;`).
fn insts(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .map(|l| l.trim().trim_end_matches(';'))
        .filter(|l| !l.is_empty())
        .collect()
}

/// The operands of the first instruction with `opcode` after line `from` whose operands
/// satisfy `pred`, and its line.
fn find<'a>(
    lines: &[&'a str],
    from: usize,
    opcode: &str,
    pred: impl Fn(&[&str]) -> bool,
) -> Option<(usize, Vec<&'a str>)> {
    lines.iter().enumerate().skip(from).find_map(|(i, l)| {
        let rest = l.strip_prefix(opcode)?.strip_prefix(' ')?;
        let ops: Vec<&str> = rest.split(", ").collect();
        pred(&ops).then_some((i, ops))
    })
}

/// Checks the structure of a kernel with `n` consumers of `warps` warps behind a producer
/// warpgroup (module doc); returns the arena stride.
fn check_consumers(what: &str, c: &Compiled, n: u32, warps: u32) -> u32 {
    let ptx = &c.text;
    let report = &c.reports[0];
    let t = warps * 32;
    assert!(
        report.symbol.ends_with("_WSPLAN_fa3"),
        "{what}: {}",
        report.symbol
    );
    assert!(
        ptx.contains(&format!(".maxntid {}, 1, 1", 128 + n * t)),
        "{what}: block"
    );
    for placeholder in ["KIRARENASTRIDE", "KIRSCRATCH"] {
        assert!(!ptx.contains(placeholder), "{what}: {placeholder} left");
    }
    let l = insts(ptx);
    // Prologue: %tid.x, less the producer's threads, modulo one consumer's threads.
    let (at, tid) = find(&l, 0, "mov.u32", |o| o[1] == "%tid.x").expect("tid.x");
    let (_, rel) = find(&l, at, "sub.u32", |o| o[1] == tid[0] && o[2] == "128").expect("rel");
    find(&l, at, "and.b32", |o| {
        o[1] == rel[0] && o[2] == (t - 1).to_string()
    })
    .unwrap_or_else(|| panic!("{what}: no per-consumer thread index"));
    // Consumer entry: index = rel div T, barrier = 15 − index, base = smem + index × stride.
    let entry = l
        .iter()
        .position(|x| x.starts_with("$L_ws_consumer"))
        .expect("consumer label");
    let shift = t.trailing_zeros().to_string();
    let (_, idx) = find(&l, entry, "shr.u32", |o| o[2] == shift).expect("consumer index");
    let (_, bar) = find(&l, entry, "mov.u32", |o| o[1] == "15").expect("barrier 15");
    find(&l, entry, "sub.u32", |o| {
        o[0] == bar[0] && o[1] == bar[0] && o[2] == idx[0]
    })
    .unwrap_or_else(|| panic!("{what}: no barrier 15 − index"));
    let (_, base) = find(&l, entry, "mad.lo.s32", |o| o[1] == idx[0]).expect("arena base");
    let stride: u32 = base[2].parse().expect("a resolved stride");
    // Every block barrier of a consumer is its own named barrier; none is block-wide.
    let named = format!("bar.sync {}, {t}", bar[0]);
    assert!(l[entry..].contains(&named.as_str()), "{what}: {named}");
    for x in &l[entry..] {
        assert!(
            !x.starts_with("bar.sync") || *x == named,
            "{what}: a consumer barrier other than its own: {x}"
        );
    }
    // Something the consumer allocated is addressed from its base.
    let from_base = find(&l, entry, "mad.lo.s32", |o| o[3] == base[0]).is_some()
        || find(&l, entry, "add.s32", |o| o[1] == base[0]).is_some();
    assert!(from_base, "{what}: nothing addressed from the arena base");
    // Shared memory: the shared part and one arena per consumer.
    let (arena, copies) = report.consumer_arena.expect("an arena");
    assert_eq!((arena, copies), (stride, n), "{what}");
    assert!(
        stride > 0 && stride.is_multiple_of(16),
        "{what}: stride {stride}"
    );
    assert!(report.shared_bytes > n * stride, "{what}: shared bytes");
    let meta = c.meta.as_ref().expect("META.json");
    assert_eq!(
        meta["kernels"][0]["shared_bytes"].as_u64(),
        Some(u64::from(report.shared_bytes)),
        "{what}"
    );
    // The empty ring counts every consumer's warps; the order barriers one consumer's.
    let inits: Vec<&str> = l
        .iter()
        .filter_map(|x| x.split("mbarrier.init.shared::cta.b64 ").nth(1))
        .filter_map(|x| x.split(", ").nth(1))
        .collect();
    assert!(
        inits.contains(&(n * warps).to_string().as_str()),
        "{what}: {inits:?}"
    );
    assert!(
        inits.contains(&warps.to_string().as_str()),
        "{what}: {inits:?}"
    );
    stride
}

/// Two consumer warpgroups at head dims 64 and 128 and key blocks of 64 and 128 (and causal
/// at d128): the structure of the module doc, and ptxas assembles each without spills.
#[test]
fn fa3_lowers_two_consumers_with_their_own_index_barrier_and_arena() {
    for (d, bn, causal) in [
        ("64", "64", "0"),
        ("64", "128", "0"),
        ("128", "64", "0"),
        ("128", "128", "0"),
        ("128", "128", "1"),
    ] {
        let what = format!("d{d} 64x{bn} causal={causal}");
        let c = fa3(&[
            ("HEAD_DIM", d),
            ("BLOCK_M", "64"),
            ("BLOCK_N", bn),
            ("CAUSAL", causal),
        ]);
        let stride = check_consumers(&what, &c, 2, 4);
        // Each consumer stages its own 64-row query block (bf16) for wgmma.
        let q = 64 * d.parse::<u32>().expect("head dim") * 2;
        assert!(stride >= q, "{what}: stride {stride} below the query block");
        let log = kir_tests::ptxas::assemble("ws_consumers", &c.text, Target::Sm90a);
        kir_tests::ptxas::assert_no_spills(&log, &what);
    }
}

/// Three consumers (a plan of the same shape with one consumer more, 160 registers each):
/// barriers 15, 14 and 13 come from the same code, and the block holds three arenas.
#[test]
fn three_consumers_lower_from_the_same_code() {
    let plan = WsPlan {
        name: "fa3",
        consumers: 3,
        consumer_regs: 160,
        ..WsPlan::FA3
    };
    let c = compile_with(plan, &[("HEAD_DIM", "64"), ("BLOCK_M", "64")])
        .unwrap_or_else(|e| panic!("three consumers: {e}"));
    check_consumers("three consumers", &c, 3, 4);
    let log = kir_tests::ptxas::assemble("ws_consumers3", &c.text, Target::Sm90a);
    kir_tests::ptxas::assert_no_spills(&log, "three consumers");
}

/// A one-consumer kernel (the sm_90a default of attention_fwd at d128 with key lengths, whose
/// consumer synchronizes its warps) keeps the immediate named barrier 15, no arena and no plan
/// in its symbol.
#[test]
fn one_consumer_keeps_barrier_15_and_no_arena() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let d = defs(&[("VARLEN", "1")]);
    let p =
        CompilePlan::resolve(src, &d, Target::Sm90a, Emit::Ptx, Flags::default()).expect("plan");
    let c = pipeline::compile(src, &p).expect("compiles");
    let r = &c.reports[0];
    assert!(
        c.text.contains("setmaxnreg.inc"),
        "the default is specialized"
    );
    assert!(c.text.contains("bar.sync 15, "), "barrier 15");
    assert!(!c.text.contains("KIRARENASTRIDE"));
    assert_eq!(r.consumer_arena, None);
    assert!(!r.symbol.contains("WSPLAN"), "{}", r.symbol);
    assert!(!r.to_string().contains("consumers of"), "{}", r.to_string());
}

/// The flags `kirc compile --ws fa3` resolves (kirc/src/compile.rs) give PTX and META.json:
/// the symbol names the plan in both, the block is the producer's and both consumers' threads.
#[test]
fn compile_flag_gives_ptx_and_meta() {
    let c = fa3(&[("HEAD_DIM", "64")]);
    let meta = c.meta.as_ref().expect("META.json");
    let k = &meta["kernels"][0];
    let sym = k["symbol"].as_str().expect("symbol");
    assert!(sym.ends_with("_WSPLAN_fa3"), "{sym}");
    assert!(c.text.contains(&format!(".visible .entry {sym}(")), "PTX");
    assert_eq!(k["block"][0].as_u64(), Some(384), "{k}");
    assert_eq!(
        k["grid"]["x"].as_str(),
        Some("cdiv(cdiv(Sq, 64), 2)"),
        "two query blocks per program"
    );
}

/// What the backend does not lower with several consumers is an error naming it: consumers of
/// two warpgroups that take ping-pong turns, and more than 15 consumers.
#[test]
fn unsupported_consumers_are_errors_naming_why() {
    let pingpong = WsPlan {
        name: "fa3",
        consumer_warps: 8,
        consumer_regs: 112,
        ..WsPlan::FA3
    };
    let Err(e) = compile_with(pingpong, &[("HEAD_DIM", "64"), ("BLOCK_M", "128")]) else {
        panic!("consumers of two warpgroups compiled");
    };
    assert!(e.contains("2 consumers") && e.contains("ping-pong"), "{e}");
    let many = WsPlan {
        name: "fa3",
        producer_warps: 1,
        consumers: 16,
        consumer_warps: 1,
        consumer_regs: 56,
        ..WsPlan::FA3
    };
    let Err(e) = compile_with(many, &[("HEAD_DIM", "64"), ("BLOCK_M", "16")]) else {
        panic!("16 consumers compiled");
    };
    assert!(
        e.contains("16 consumers") && e.contains("at most 15"),
        "{e}"
    );
}

/// The interpreter's `--ws fa3` (the plan `kirc run --device cpu --target sm_90a --ws fa3`
/// resolves) matches the unscheduled kernel bit for bit on ragged shapes, at the default tiles
/// and at tiles too small for wgmma's layout, causal or not.
#[test]
fn interpreter_fa3_matches_the_default_run() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let mut rng = Rng::fresh("ws_consumers interpreter");
    let bf16 = dtype("bf16");
    let (b, hq, hkv, sq, sk, d) = (1, 2, 1, 37, 45, 64);
    let q = rng.tensor(b * hq * sq * d, 2.0, bf16);
    let k = rng.tensor(b * hkv * sk * d, 2.0, bf16);
    let v = rng.tensor(b * hkv * sk * d, 2.0, bf16);
    let args: BTreeMap<String, HostArg> = [
        ("q", t(bf16, &[b, hq, sq, d], q)),
        ("k", t(bf16, &[b, hkv, sk, d], k)),
        ("v", t(bf16, &[b, hkv, sk, d], v)),
        ("scale", HostArg::Scalar(0.125)),
    ]
    .into_iter()
    .map(|(n, a)| (n.to_string(), a))
    .collect();
    for extra in [
        &[][..],
        &[("CAUSAL", "1")][..],
        &[("BLOCK_M", "16"), ("BLOCK_N", "16")][..],
    ] {
        let mut all = vec![("HEAD_DIM", "64")];
        all.extend_from_slice(extra);
        let what = format!("{all:?}");
        let plain = pipeline::output(src, &defs(&all)).expect("front end");
        let want = interp::run(&plain, &args).unwrap_or_else(|e| panic!("{what}: {e}"));
        let flags = Flags {
            ws_plan: Some(WsChoice::Plan(WsPlan::FA3)),
            ..Flags::default()
        };
        let p =
            CompilePlan::resolve(src, &defs(&all), Target::Sm90a, Emit::Ptx, flags).expect("plan");
        let scheduled = pipeline::compile(src, &p)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .module;
        assert!(
            kir_tests::sched_diff::count(&scheduled, kir_ir::Opcode::WarpSpecialize) == 1,
            "{what}: not specialized"
        );
        let got = interp::run(&scheduled, &args).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(bits(&got), bits(&want), "{what}");
    }
}
