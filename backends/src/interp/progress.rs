//! How far a run has got, readable from another thread while it goes on: which launch of the
//! entry is running and how many of its program instances have finished. The runner only
//! stores into atomics (one relaxed increment per program instance), so observing a run costs
//! it nothing measurable; `kirc run` reads a [`Progress`] from a timer thread to draw its
//! progress line.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Counters of a run in progress, shared with the thread that runs it ([`super::run_observed`]).
/// A fresh `Progress` reads as no launch started; each launch resets the program counts.
#[derive(Debug, Default)]
pub struct Progress {
    /// Launches of the entry: the program's launches, or 1 for a single kernel.
    launches: AtomicUsize,
    /// The running launch, from 1 (0 before the first starts).
    launch: AtomicUsize,
    /// Program instances of the running launch (its grid's size).
    programs: AtomicUsize,
    /// Program instances of the running launch that have finished.
    done: AtomicUsize,
}

/// One reading of a [`Progress`]. The fields are read one after another while the run goes
/// on, so `done` may belong to a launch just after `launch`; [`Snapshot::done`] never exceeds
/// [`Snapshot::programs`] all the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The running launch, from 1 (0 before the first starts).
    pub launch: usize,
    /// Launches of the entry (0 before the run has bound its arguments).
    pub launches: usize,
    /// Program instances of the running launch that have finished.
    pub done: usize,
    /// Program instances of the running launch.
    pub programs: usize,
}

impl Progress {
    /// Counters reading as no launch started.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let launch = self.launch.load(Ordering::Relaxed);
        let launches = self.launches.load(Ordering::Relaxed);
        let programs = self.programs.load(Ordering::Relaxed);
        let done = self.done.load(Ordering::Relaxed).min(programs);
        Snapshot {
            launch,
            launches: launches.max(launch),
            done,
            programs,
        }
    }

    /// The entry has `n` launches.
    pub(crate) fn set_launches(&self, n: usize) {
        self.launches.store(n, Ordering::Relaxed);
    }

    /// Launch `index` (from 1) starts, with `programs` program instances.
    pub(crate) fn start_launch(&self, index: usize, programs: usize) {
        self.done.store(0, Ordering::Relaxed);
        self.programs.store(programs, Ordering::Relaxed);
        self.launch.store(index, Ordering::Relaxed);
    }

    /// One program instance of the running launch has finished.
    pub(crate) fn program_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{run_observed, run_with, HostArg, HostData, HostTensor, RunOptions};
    use std::collections::BTreeMap;

    /// Two launches: `@scale` over R×C×2 programs (one element each, written twice) into a
    /// temp, then `@add` over R×C programs: y = 6·x.
    const SRC: &str = r#"module two
kernel @scale(x: in tensor<f32>[R, C], t: out tensor<f32>[R, C]) grid [R, C, 2] {
  %r = program_id 0 : i32
  %c = program_id 1 : i32
  %v = load x[%r, %c] : tile<1x1xf32>
  %k = const 3.0 : f32
  %kb = broadcast %k : tile<1x1xf32>
  %w = mul %v, %kb : tile<1x1xf32>
  store t[%r, %c], %w
}
kernel @add(t: in tensor<f32>[R, C], y: out tensor<f32>[R, C]) grid [R, C, 1] {
  %r = program_id 0 : i32
  %c = program_id 1 : i32
  %v = load t[%r, %c] : tile<1x1xf32>
  %w = add %v, %v : tile<1x1xf32>
  store y[%r, %c], %w
}
program(x: in tensor<f32>[R, C], y: out tensor<f32>[R, C]) {
  temp t: tensor<f32>[R, C]
  launch @scale(x, t)
  launch @add(t, y)
}
"#;

    #[test]
    fn counts_every_launch_and_program_and_changes_no_result() {
        let m = kir_ir::text::parse(SRC).unwrap_or_else(|e| panic!("{}", e.render("two", SRC)));
        // Ragged, fresh sizes and values per run.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.subsec_nanos() as usize);
        let (r, c) = (3 + seed % 13, 2 + (seed / 13) % 7);
        let data: Vec<f64> = (0..r * c)
            .map(|i| ((i * 7919 + seed) % 1000) as f64 / 37.0 - 13.0)
            .collect();
        let args: BTreeMap<String, HostArg> = [(
            "x".to_string(),
            HostArg::Tensor(HostTensor {
                dtype: kir_ir::Dtype::F32,
                shape: vec![r, c],
                data: HostData::F64(data.clone()),
            }),
        )]
        .into_iter()
        .collect();
        for parallel in [true, false] {
            let opts = RunOptions { parallel, seed: 0 };
            let p = Progress::new();
            assert_eq!(p.snapshot(), Snapshot::default());
            let observed = run_observed(&m, &args, &opts, &p).expect("runs");
            let plain = run_with(&m, &args, &opts).expect("runs");
            assert_eq!(observed, plain);
            // f32 rounding of x, then ×3 and ×2, each exact or rounded once in f32.
            let y = observed["y"].data.as_f64().expect("f32 data");
            for (i, (&got, &x)) in y.iter().zip(&data).enumerate() {
                let want = ((x as f32 as f64 * 3.0) as f32 as f64 * 2.0) as f32 as f64;
                assert_eq!(got, want, "element {i}");
            }
            // The last launch is @add, over R×C programs, all finished.
            let s = p.snapshot();
            assert_eq!(
                s,
                Snapshot {
                    launch: 2,
                    launches: 2,
                    done: r * c,
                    programs: r * c,
                }
            );
        }
    }

    #[test]
    fn a_reading_never_shows_more_done_than_programs() {
        let p = Progress::new();
        p.set_launches(3);
        p.start_launch(1, 2);
        for _ in 0..5 {
            p.program_done();
        }
        let s = p.snapshot();
        assert_eq!((s.launch, s.launches, s.done, s.programs), (1, 3, 2, 2));
        p.start_launch(2, 10);
        assert_eq!(p.snapshot().done, 0);
    }
}
