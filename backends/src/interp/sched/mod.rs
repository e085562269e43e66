//! The scheduled-IR runtime of one program instance: stage buffers, mbarriers, copies in flight
//! and the partitions of `warp_specialize`, run as cooperating tasks under a deterministic
//! scheduler.
//!
//! Exactly one task runs at a time. At every scheduling op a task hands control back, and the
//! scheduler picks, with a seeded generator, either a runnable task or a copy in flight to land.
//! So one seed is one interleaving, and other seeds explore others. The checks (docs/ir.md,
//! "Scheduled IR"):
//! - **deadlock**: no task can run and no copy in flight can change that;
//! - **unfilled read**: `smem_read` of a stage that is empty, still being filled, or whose fill
//!   this task has not observed (through the fill's barrier phase or its copy group);
//! - **overwrite in use**: a copy into a stage whose previous fill is unread, still read (no
//!   `smem_release` by a reader), or still being copied; a release while a `dot_async` reading
//!   the stage is in flight;
//! - **barrier ledgers**: a phase that completes with `expect_tx` bytes different from the bytes
//!   of the copies issued for it, more arrivals than the barrier expects, and a wait whose parity
//!   lets it pass over a phase this task never observed (phase aliasing);
//! - **duplicates**: a task that releases a stage twice with no copy refilling it in between, or
//!   arrives on a barrier stage twice with no `mbar_wait` of its own passing in between (reported
//!   under every seed, wherever the duplicate lands).

mod state;

use kir_ir::{Span, Value};
use state::{stage_name, Barrier, Copy, Fill, Stage, StageState, State, Status, Task};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::tile::Tile;

/// A scheduling failure: a message and, where one op is at fault, its span.
pub(crate) type Fail = (Option<Span>, String);

/// What a blocked task waits for.
#[derive(Clone, Debug)]
pub(crate) enum Cond {
    /// `mbar_wait`: the phase of `bar[stage]` with this parity has completed.
    Bar {
        bar: Value,
        stage: usize,
        parity: i64,
    },
    /// `async_wait`: every committed copy group but the newest `keep` has landed.
    Groups { keep: usize },
    /// `warp_specialize`: the partitions this task started have all finished.
    Children,
}

/// One program instance's scheduler, shared by its partition threads.
pub(crate) struct Sched {
    st: Mutex<State>,
    cv: Condvar,
}

/// Releases the lock while waiting for this task's turn; `Err` when the run failed meanwhile.
fn wait_turn<'a>(
    cv: &Condvar,
    mut g: MutexGuard<'a, State>,
    me: usize,
) -> Result<MutexGuard<'a, State>, Fail> {
    loop {
        if let Some(f) = &g.failed {
            return Err(f.clone());
        }
        if g.turn == me {
            return Ok(g);
        }
        g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
    }
}

impl Sched {
    /// A scheduler with one task (the program instance itself, named `main`), seeded by `seed`.
    pub(crate) fn new(seed: u64) -> Sched {
        let main = Task {
            name: "the kernel body".into(),
            status: Status::Ready,
            parent: None,
            observed: HashMap::new(),
            open_group: 0,
            committed: vec![],
            waited: BTreeSet::new(),
            dots: vec![],
            arrived: BTreeSet::new(),
        };
        Sched {
            st: Mutex::new(State {
                rng: seed,
                turn: 0,
                failed: None,
                tasks: vec![main],
                bufs: HashMap::new(),
                bars: HashMap::new(),
                names: HashMap::new(),
                inflight: vec![],
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a failure (the first one wins) and wakes every task so it can stop.
    pub(crate) fn abort(&self, f: Fail) {
        let mut g = self.lock();
        if g.failed.is_none() {
            g.failed = Some(f);
        }
        self.cv.notify_all();
    }

    /// The recorded failure, if any.
    pub(crate) fn failure(&self) -> Option<Fail> {
        self.lock().failed.clone()
    }

    /// A scheduling point of task `me`: optionally block on `cond` (at op `span`, described by
    /// `what`), let the scheduler run others and land copies, and return once `me` runs again
    /// with its condition true.
    pub(crate) fn point(&self, me: usize, cond: Option<(Cond, Span, String)>) -> Result<(), Fail> {
        let mut g = self.lock();
        if let Some((c, sp, what)) = cond {
            g.tasks[me].status = Status::Blocked(c, sp, what);
        }
        match g.pick() {
            Ok(next) => g.turn = next,
            Err(f) => {
                g.failed.get_or_insert(f.clone());
                self.cv.notify_all();
                return Err(f);
            }
        }
        self.cv.notify_all();
        let mut g = wait_turn(&self.cv, g, me)?;
        g.tasks[me].status = Status::Ready;
        Ok(())
    }

    /// Adds the partitions of a `warp_specialize` run by task `parent`; returns their ids.
    pub(crate) fn spawn(&self, parent: usize, names: Vec<String>) -> Vec<usize> {
        let mut g = self.lock();
        let mut ids = Vec::new();
        for name in names {
            ids.push(g.tasks.len());
            g.tasks.push(Task {
                name,
                status: Status::Ready,
                parent: Some(parent),
                observed: HashMap::new(),
                open_group: 0,
                committed: vec![],
                waited: BTreeSet::new(),
                dots: vec![],
                arrived: BTreeSet::new(),
            });
        }
        ids
    }

    /// Blocks a freshly started partition thread until its first turn.
    pub(crate) fn start(&self, me: usize) -> Result<(), Fail> {
        let g = self.lock();
        wait_turn(&self.cv, g, me).map(|_| ())
    }

    /// Task `me` has finished: hand control to another task.
    pub(crate) fn finish(&self, me: usize) {
        let mut g = self.lock();
        g.tasks[me].status = Status::Done;
        match g.pick() {
            Ok(next) => g.turn = next,
            Err(f) => {
                g.failed.get_or_insert(f);
            }
        }
        self.cv.notify_all();
    }

    /// Declares a stage buffer of `stages` stages, all empty.
    pub(crate) fn alloc_buf(&self, v: Value, name: String, stages: usize) {
        let mut g = self.lock();
        let st = Stage {
            state: StageState::Empty,
            data: None,
            fill: None,
            readers: BTreeSet::new(),
            released: BTreeSet::new(),
        };
        g.bufs.insert(v, vec![st; stages]);
        g.names.insert(v, name);
    }

    /// Declares `stages` mbarriers in phase 0, each expecting `arrivals` arrivals.
    pub(crate) fn alloc_bar(&self, v: Value, name: String, stages: usize, arrivals: i64) {
        let mut g = self.lock();
        let b = Barrier {
            expected: arrivals,
            pending: arrivals,
            tx: 0,
            round: 0,
            expect_sum: 0,
            tagged: BTreeMap::new(),
        };
        g.bars.insert(v, vec![b; stages]);
        g.names.insert(v, name);
    }

    /// Starts a copy of `tile` (`bytes` bytes) into `buf[stage]` by task `me`, completing on
    /// `bar[stage]` or joining `me`'s open copy group.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy(
        &self,
        me: usize,
        span: Span,
        buf: Value,
        stage: usize,
        tile: Tile,
        bytes: i64,
        bar: Option<Value>,
    ) -> Result<(), String> {
        let mut g = self.lock();
        let g = &mut *g;
        let name = stage_name(&g.names, buf, stage);
        let st = g
            .bufs
            .get_mut(&buf)
            .and_then(|s| s.get_mut(stage))
            .ok_or_else(|| format!("stage {stage} is outside buffer {name}"))?;
        match st.state {
            StageState::InFlight => {
                return Err(format!(
                    "copy into {name} overwrites a stage whose earlier copy is still in flight"
                ))
            }
            StageState::Full if st.readers.is_empty() && st.released.is_empty() => {
                return Err(format!(
                    "copy into {name} overwrites a fill that no partition has read or released"
                ))
            }
            StageState::Full => {
                let busy: Vec<String> = st
                    .readers
                    .difference(&st.released)
                    .map(|&t| g.tasks[t].name.clone())
                    .collect();
                if !busy.is_empty() {
                    return Err(format!("copy into {name} overwrites a stage still being read by {} (no `smem_release` since its `smem_read`)", busy.join(", ")));
                }
            }
            StageState::Empty => {}
        }
        st.state = StageState::InFlight;
        st.readers.clear();
        st.released.clear();
        let fill = match bar {
            Some(b) => {
                let bars = g
                    .bars
                    .get_mut(&b)
                    .ok_or_else(|| "unknown barrier".to_string())?;
                let bs = bars
                    .get_mut(stage)
                    .ok_or_else(|| format!("barrier stage {stage} out of range"))?;
                *bs.tagged.entry(bs.round).or_insert(0) += bytes;
                Fill::Bar {
                    bar: b,
                    round: bs.round,
                }
            }
            None => Fill::Group {
                task: me,
                group: g.tasks[me].open_group,
            },
        };
        g.inflight.push(Copy {
            span,
            buf,
            stage,
            tile: Arc::new(tile),
            bytes,
            fill,
            bar_stage: bar.map(|b| (b, stage)),
        });
        Ok(())
    }

    /// `async_commit` of task `me`.
    pub(crate) fn commit(&self, me: usize) {
        let mut g = self.lock();
        let t = &mut g.tasks[me];
        t.committed.push(t.open_group);
        t.open_group += 1;
    }

    /// After an `async_wait keep` of task `me` passed: every group but the newest `keep` is waited.
    pub(crate) fn waited_groups(&self, me: usize, keep: usize) {
        let mut g = self.lock();
        let t = &mut g.tasks[me];
        let old = t.committed.len().saturating_sub(keep);
        let done: Vec<u64> = t.committed.drain(..old).collect();
        t.waited.extend(done);
    }

    /// `mbar_arrive` (with `tx` bytes announced first) by task `me`. A task that arrives on a
    /// barrier stage twice with no `mbar_wait` passing in between is reported whatever the
    /// interleaving: where the second arrival lands (the same phase, or the next one after a
    /// copy landed) depends on the schedule, the duplicate itself does not. `count` arrivals
    /// land at once: a cluster arrival counts once for each CTA of the cluster, since every CTA
    /// makes the same one (the interpreter runs one CTA and stands for its peers).
    pub(crate) fn arrive(
        &self,
        me: usize,
        bar: Value,
        stage: usize,
        tx: i64,
        count: i64,
    ) -> Result<(), Fail> {
        let mut g = self.lock();
        let name = stage_name(&g.names, bar, stage);
        let t = &mut g.tasks[me];
        if !t.arrived.insert((bar, stage)) {
            return Err((
                None,
                format!(
                    "{} arrives on barrier {name} again with no `mbar_wait` since its last arrival there (a duplicated arrival completes a phase early)",
                    t.name
                ),
            ));
        }
        let b = g
            .bars
            .get_mut(&bar)
            .and_then(|v| v.get_mut(stage))
            .ok_or((None, format!("barrier stage {name} out of range")))?;
        if b.pending < count {
            return Err((
                None,
                format!(
                    "barrier {name} phase {} got more than its {} expected arrivals",
                    b.round, b.expected
                ),
            ));
        }
        b.tx += tx;
        b.expect_sum += tx;
        b.pending -= count;
        g.complete(bar, stage)
    }

    /// After `mbar_wait` of task `me` on `bar[stage]` passed: records the phase it observed and
    /// checks that no phase was skipped.
    pub(crate) fn observed(&self, me: usize, bar: Value, stage: usize) -> Result<(), String> {
        let mut g = self.lock();
        let name = stage_name(&g.names, bar, stage);
        let round = g
            .bars
            .get(&bar)
            .and_then(|v| v.get(stage))
            .map_or(0, |b| b.round);
        let seen = round - 1;
        let t = &mut g.tasks[me];
        t.arrived.clear();
        let prev = t.observed.get(&(bar, stage)).copied();
        if let Some(p) = prev {
            if seen > p + 1 {
                return Err(format!("phase aliasing: the wait passed on {name} phase {seen}, but {} last observed phase {p} and never saw phase {}", t.name, p + 1));
            }
        }
        t.observed
            .insert((bar, stage), prev.map_or(seen, |p| p.max(seen)));
        Ok(())
    }

    /// `smem_read` of `buf[stage]` by task `me`.
    pub(crate) fn read(&self, me: usize, buf: Value, stage: usize) -> Result<Arc<Tile>, String> {
        let mut g = self.lock();
        let g = &mut *g;
        let name = stage_name(&g.names, buf, stage);
        let t = &g.tasks[me];
        let st = g
            .bufs
            .get_mut(&buf)
            .and_then(|s| s.get_mut(stage))
            .ok_or_else(|| format!("stage {stage} is outside buffer {name}"))?;
        match st.state {
            StageState::Empty => return Err(format!("{} reads {name}, which no producer has filled", t.name)),
            StageState::InFlight => return Err(format!("{} reads {name} while a copy into it is still in flight (the fill is not complete)", t.name)),
            StageState::Full => {}
        }
        if st.released.contains(&me) {
            return Err(format!("{} reads {name} after releasing it", t.name));
        }
        match st.fill {
            Some(Fill::Bar { bar, round }) => {
                let bname = stage_name(&g.names, bar, stage);
                match t.observed.get(&(bar, stage)).copied() {
                    Some(o) if o == round => {}
                    Some(o) if o > round => return Err(format!("{} reads {name}, which holds the fill of phase {round} of {bname}, but it waited for phase {o}: a fill was lost", t.name)),
                    _ => return Err(format!("{} reads {name} before waiting for its fill (phase {round} of {bname})", t.name)),
                }
            }
            Some(Fill::Group { task, group }) => {
                if task != me {
                    return Err(format!("{} reads {name}, filled by a copy group of {}: only a barrier makes it visible to another partition", t.name, g.tasks[task].name));
                }
                if !t.waited.contains(&group) {
                    return Err(format!("{} reads {name} before an `async_wait` covering the copy group that fills it", t.name));
                }
            }
            None => {
                return Err(format!(
                    "{} reads {name}, which no producer has filled",
                    t.name
                ))
            }
        }
        st.readers.insert(me);
        st.data
            .clone()
            .ok_or_else(|| format!("{name} holds no data"))
    }

    /// `smem_release` of `buf[stage]` by task `me`.
    pub(crate) fn release(&self, me: usize, buf: Value, stage: usize) -> Result<(), String> {
        let mut g = self.lock();
        let g = &mut *g;
        let name = stage_name(&g.names, buf, stage);
        let t = &g.tasks[me];
        if let Some((d, _)) = t.dots.iter().find(|(_, srcs)| srcs.contains(&(buf, stage))) {
            return Err(format!(
                "{} releases {name} while `dot_async` {d} still reads it (no `dot_wait` yet)",
                t.name
            ));
        }
        let st = g
            .bufs
            .get_mut(&buf)
            .and_then(|s| s.get_mut(stage))
            .ok_or_else(|| format!("stage {stage} is outside buffer {name}"))?;
        if !st.released.insert(me) {
            return Err(format!(
                "{} releases {name} twice: its fill was already released by this partition and no copy has refilled it since",
                g.tasks[me].name
            ));
        }
        Ok(())
    }

    /// Records a `dot_async` of task `me` whose operands came from these stages.
    pub(crate) fn dot_started(&self, me: usize, v: Value, srcs: Vec<(Value, usize)>) {
        self.lock().tasks[me].dots.push((v, srcs));
    }

    /// `dot_wait %v pending keep` of task `me`: retires every `dot_async` but the newest `keep`,
    /// which must include `v`'s.
    pub(crate) fn dot_wait(&self, me: usize, v: Value, keep: usize) -> Result<(), String> {
        let mut g = self.lock();
        let t = &mut g.tasks[me];
        let old = t.dots.len().saturating_sub(keep);
        let pos = t.dots.iter().position(|(d, _)| *d == v);
        match pos {
            Some(p) if p < old => {
                t.dots.drain(..old);
                Ok(())
            }
            Some(_) => Err(format!("`dot_wait` with pending {keep} does not retire {v}: it is among the {keep} newest `dot_async`s of {}", t.name)),
            None => Err(format!("{v} is not a `dot_async` in flight in {}", t.name)),
        }
    }

    /// At the end of the kernel: no copy may still target shared memory.
    pub(crate) fn check_exit(&self) -> Result<(), String> {
        let g = self.lock();
        match g.inflight.first() {
            None => Ok(()),
            Some(c) => Err(format!(
                "the kernel ends with {} async copies in flight (one into {}); wait for them before exiting",
                g.inflight.len(),
                stage_name(&g.names, c.buf, c.stage)
            )),
        }
    }
}
