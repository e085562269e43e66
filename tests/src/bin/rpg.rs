//! The random-program generator's driver: checks a seed range (see `kir_tests::rpg`), reduces
//! and saves every failure, prints counts.
//!
//! ```text
//! cargo run --release -p kir-tests --bin rpg -- [--seeds A..B] [--jobs N] [--ptx all|rotate|none]
//!     [--cuda every:N|none] [--sched-seeds N] [--save DIR] [--quiet]
//! cargo run --release -p kir-tests --bin rpg -- --show SEED        # print a program
//! cargo run --release -p kir-tests --bin rpg -- --check FILE...    # check saved programs
//! cargo run --release -p kir-tests --bin rpg -- --gpu DIR --seeds A..B [--count N]
//! ```
//! `--ptx rotate` assembles one PTX target per seed (seed mod 4, so every target is covered);
//! `--cuda every:N` compiles the CUDA C of one seed in N (target rotating). ptxas and NVRTC
//! come from `KIR_PTXAS` / `KIR_NVRTC` (`source .tools/env.sh`). Exit status 1 when any
//! program failed.

use kir_backends::nvrtc::Nvrtc;
use kir_backends::Target;
use kir_tests::rpg::check::{check, Config, Failure, Stats, Verdict};
use kir_tests::rpg::{artifacts, module, reduce};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

struct Opts {
    seeds: (u64, u64),
    jobs: usize,
    ptx: String,
    cuda_every: u64,
    sched_seeds: u64,
    save: Option<String>,
    quiet: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("rpg: {msg}\nusage: rpg [--seeds A..B] [--jobs N] [--ptx all|rotate|none] [--cuda every:N|none] [--sched-seeds N] [--save DIR] [--quiet] | --show SEED | --check FILE... | --gpu DIR --seeds A..B [--count N]");
    std::process::exit(2)
}

fn parse_range(s: &str) -> (u64, u64) {
    let (a, b) = s
        .split_once("..")
        .unwrap_or_else(|| usage("--seeds takes A..B"));
    let p = |x: &str| x.parse::<u64>().unwrap_or_else(|_| usage("bad seed"));
    (p(a), p(b))
}

/// The configuration for one seed: PTX targets and CUDA C per the options.
fn config_for(o: &Opts, seed: u64) -> Config {
    let targets = match o.ptx.as_str() {
        "all" => Target::ALL.to_vec(),
        "none" => vec![],
        _ => vec![Target::ALL[(seed % 4) as usize]],
    };
    let cuda = (o.cuda_every > 0 && seed % o.cuda_every == 0)
        .then(|| Target::ALL[((seed / o.cuda_every.max(1)) % 4) as usize]);
    Config {
        targets,
        cuda,
        sched_seeds: o.sched_seeds,
        ..Config::default()
    }
}

/// Reduces a failing text and returns the reduced text.
fn reduce_failure(text: &str, f: &Failure, cfg: &Config, nv: Option<&Nvrtc>) -> String {
    // Only the failing backend is needed to reproduce a backend failure.
    let mut rc = cfg.clone();
    if f.class() == "ptx" {
        rc.targets.retain(|t| f.stage.ends_with(t.name()));
        rc.cuda = None;
    } else if f.class() == "cuda" {
        rc.targets.clear();
    } else {
        rc.targets.clear();
        rc.cuda = None;
    }
    let class = f.class().to_string();
    let stage = f.stage.clone();
    let mut pred = |t: &str| match check(t, &rc, nv).0 {
        Verdict::Fail(g) => g.class() == class && (class != "ptx" || g.stage == stage),
        _ => false,
    };
    reduce::reduce(text, &mut pred, &reduce::Limits::default()).0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut o = Opts {
        seeds: (0, 1000),
        jobs: 1,
        ptx: "rotate".into(),
        cuda_every: 8,
        sched_seeds: 2,
        save: None,
        quiet: false,
    };
    let mut gpu: Option<String> = None;
    let mut count = 2000usize;
    let mut files = vec![];
    let mut i = 0;
    let next = |i: &mut usize| -> String {
        *i += 1;
        args.get(*i)
            .cloned()
            .unwrap_or_else(|| usage("missing value"))
    };
    while i < args.len() {
        match args[i].as_str() {
            "--seeds" => o.seeds = parse_range(&next(&mut i)),
            "--jobs" => o.jobs = next(&mut i).parse().unwrap_or_else(|_| usage("bad --jobs")),
            "--ptx" => o.ptx = next(&mut i),
            "--cuda" => {
                let v = next(&mut i);
                o.cuda_every = match v.strip_prefix("every:") {
                    Some(n) => n.parse().unwrap_or_else(|_| usage("bad --cuda")),
                    None if v == "none" => 0,
                    None => usage("--cuda takes every:N or none"),
                }
            }
            "--sched-seeds" => {
                o.sched_seeds = next(&mut i)
                    .parse()
                    .unwrap_or_else(|_| usage("bad --sched-seeds"))
            }
            "--save" => o.save = Some(next(&mut i)),
            "--quiet" => o.quiet = true,
            "--show" => {
                let s: u64 = next(&mut i).parse().unwrap_or_else(|_| usage("bad seed"));
                print!("{}", module::generate(s).text);
                return;
            }
            "--check" => {
                files = args[i + 1..].to_vec();
                break;
            }
            "--gpu" => gpu = Some(next(&mut i)),
            "--count" => {
                count = next(&mut i)
                    .parse()
                    .unwrap_or_else(|_| usage("bad --count"))
            }
            x => usage(&format!("unknown argument `{x}`")),
        }
        i += 1;
    }
    // Panics are caught and reported per stage; keep the default hook's noise out.
    std::panic::set_hook(Box::new(|_| {}));
    let nv = if o.cuda_every > 0 || !files.is_empty() {
        match Nvrtc::from_env() {
            Ok(n) => Some(n),
            Err(e) => usage(&format!("{e} (or pass --cuda none)")),
        }
    } else {
        None
    };
    if let Some(dir) = gpu {
        match artifacts::write(std::path::Path::new(&dir), o.seeds, count) {
            Ok(n) => println!("rpg: wrote {n} programs to {dir}"),
            Err(e) => {
                eprintln!("rpg: {e}");
                std::process::exit(1)
            }
        }
        return;
    }
    if !files.is_empty() {
        let mut bad = 0;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| usage(&format!("{f}: {e}")));
            let (v, _) = check(&text, &Config::default(), nv.as_ref());
            println!("{f}: {v:?}");
            bad += matches!(v, Verdict::Fail(_)) as usize;
        }
        std::process::exit((bad > 0) as i32);
    }
    let start = Instant::now();
    let next_seed = AtomicU64::new(o.seeds.0);
    let done = AtomicU64::new(0);
    let total = Mutex::new(Stats::default());
    let failures: Mutex<Vec<(u64, Failure, String)>> = Mutex::new(vec![]);
    std::thread::scope(|s| {
        for _ in 0..o.jobs.max(1) {
            s.spawn(|| loop {
                let seed = next_seed.fetch_add(1, Ordering::Relaxed);
                if seed >= o.seeds.1 {
                    break;
                }
                let case = module::generate(seed);
                let cfg = config_for(&o, seed);
                let (v, mut st) = check(&case.text, &cfg, nv.as_ref());
                st.add(format!("shape {}", case.shape), 1);
                match v {
                    Verdict::Pass => st.add("pass", 1),
                    Verdict::Skip(r) => {
                        st.add("skip", 1);
                        st.add(
                            format!("skip: {}", r.chars().take(80).collect::<String>()),
                            1,
                        );
                    }
                    Verdict::Fail(f) => {
                        st.add("fail", 1);
                        st.add(format!("fail: {}", f.stage), 1);
                        eprintln!(
                            "seed {seed} ({}): FAIL {}: {}",
                            case.shape,
                            f.stage,
                            f.message.lines().next().unwrap_or("")
                        );
                        let reduced = if o.save.is_some() {
                            reduce_failure(&case.text, &f, &cfg, nv.as_ref())
                        } else {
                            String::new()
                        };
                        if let Some(dir) = &o.save {
                            let _ = std::fs::create_dir_all(dir);
                            let name = format!("{dir}/{}-{seed}.kir", f.stage.replace(' ', "_"));
                            let body = format!(
                                "// rpg failure: {}: {}\n{reduced}",
                                f.stage,
                                f.message.lines().next().unwrap_or("")
                            );
                            // The seed line must stay first: put the failure note after it.
                            let body = match reduced.split_once('\n') {
                                Some((first, rest)) => format!(
                                    "{first}\n// failed at {}: {}\n{rest}",
                                    f.stage,
                                    f.message.lines().next().unwrap_or("")
                                ),
                                None => body,
                            };
                            let _ = std::fs::write(&name, body);
                            eprintln!("  reduced to {} lines: {name}", reduced.lines().count());
                        }
                        failures
                            .lock()
                            .map(|mut v| v.push((seed, f, case.shape.to_string())))
                            .ok();
                    }
                }
                total.lock().map(|mut t| t.merge(&st)).ok();
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if !o.quiet && n % 1000 == 0 {
                    let t = total
                        .lock()
                        .map(|t| t.counts.get("fail").copied().unwrap_or(0))
                        .unwrap_or(0);
                    eprintln!(
                        "rpg: {n} programs, {t} failed, {:.0}s",
                        start.elapsed().as_secs_f64()
                    );
                }
            });
        }
    });
    let total = total.into_inner().unwrap_or_default();
    let failures = failures.into_inner().unwrap_or_default();
    println!(
        "rpg: seeds {}..{}: {} programs in {:.1}s ({} jobs)",
        o.seeds.0,
        o.seeds.1,
        o.seeds.1.saturating_sub(o.seeds.0),
        start.elapsed().as_secs_f64(),
        o.jobs
    );
    for (k, v) in &total.counts {
        println!("{v:9} {k}");
    }
    for (s, f, shape) in &failures {
        println!(
            "FAIL seed {s} ({shape}) {}: {}",
            f.stage,
            f.message.lines().next().unwrap_or("")
        );
    }
    std::process::exit((!failures.is_empty()) as i32);
}
