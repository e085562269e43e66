//! The scheduler's state (sched/mod.rs): each task's status and what it observed, stage
//! buffers and their fills, mbarriers and their byte ledgers, copies in flight, and the seeded
//! choice of what runs or lands next, with the deadlock and ledger checks those make.

use super::{Cond, Fail};
use crate::interp::tile::Tile;
use kir_ir::{Span, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(super) enum Status {
    Ready,
    Blocked(Cond, Span, String),
    Done,
}

/// How a stage's current data was delivered, which decides who may read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Fill {
    Bar { bar: Value, round: i64 },
    Group { task: usize, group: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum StageState {
    Empty,
    InFlight,
    Full,
}

#[derive(Clone, Debug)]
pub(super) struct Stage {
    pub(super) state: StageState,
    pub(super) data: Option<Arc<Tile>>,
    pub(super) fill: Option<Fill>,
    pub(super) readers: BTreeSet<usize>,
    pub(super) released: BTreeSet<usize>,
}

#[derive(Clone, Debug)]
pub(super) struct Barrier {
    pub(super) expected: i64,
    pub(super) pending: i64,
    pub(super) tx: i64,
    /// Completed phases.
    pub(super) round: i64,
    /// Bytes announced by `mbar_arrive tx` in the current phase.
    pub(super) expect_sum: i64,
    /// Bytes of the copies issued for each phase (by the phase current at issue).
    pub(super) tagged: BTreeMap<i64, i64>,
}

#[derive(Clone, Debug)]
pub(super) struct Copy {
    pub(super) span: Span,
    pub(super) buf: Value,
    pub(super) stage: usize,
    pub(super) tile: Arc<Tile>,
    pub(super) bytes: i64,
    pub(super) fill: Fill,
    pub(super) bar_stage: Option<(Value, usize)>,
}

#[derive(Clone, Debug)]
pub(super) struct Task {
    pub(super) name: String,
    pub(super) status: Status,
    pub(super) parent: Option<usize>,
    /// Last phase of each (barrier, stage) this task observed through `mbar_wait`.
    pub(super) observed: HashMap<(Value, usize), i64>,
    /// Copy group numbering: the open group, the committed groups not yet waited for (oldest
    /// first), and every group this task has waited for.
    pub(super) open_group: u64,
    pub(super) committed: Vec<u64>,
    pub(super) waited: BTreeSet<u64>,
    /// `dot_async`s in flight (oldest first): result value, and the stages its operands came from.
    pub(super) dots: Vec<(Value, Vec<(Value, usize)>)>,
    /// Barrier stages this task arrived on since its last `mbar_wait` passed (a second arrival
    /// before any wait is a duplicated one).
    pub(super) arrived: BTreeSet<(Value, usize)>,
}

/// The shared state of one program instance's scheduled run.
pub(super) struct State {
    pub(super) rng: u64,
    pub(super) turn: usize,
    pub(super) failed: Option<Fail>,
    pub(super) tasks: Vec<Task>,
    pub(super) bufs: HashMap<Value, Vec<Stage>>,
    pub(super) bars: HashMap<Value, Vec<Barrier>>,
    pub(super) names: HashMap<Value, String>,
    pub(super) inflight: Vec<Copy>,
}

/// A task's view of its own copy in flight, for messages.
pub(super) fn stage_name(names: &HashMap<Value, String>, v: Value, s: usize) -> String {
    format!(
        "{}[{s}]",
        names.get(&v).cloned().unwrap_or_else(|| v.to_string())
    )
}

impl State {
    pub(super) fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn group_landed(&self, task: usize, g: u64) -> bool {
        !self
            .inflight
            .iter()
            .any(|c| c.fill == Fill::Group { task, group: g })
    }

    pub(super) fn cond_ok(&self, t: usize, c: &Cond) -> bool {
        match c {
            Cond::Bar { bar, stage, parity } => self
                .bars
                .get(bar)
                .and_then(|b| b.get(*stage))
                .is_some_and(|b| b.round % 2 != *parity),
            Cond::Groups { keep } => {
                let groups = &self.tasks[t].committed;
                let old = groups.len().saturating_sub(*keep);
                groups[..old].iter().all(|&g| self.group_landed(t, g))
            }
            Cond::Children => self
                .tasks
                .iter()
                .filter(|k| k.parent == Some(t))
                .all(|k| matches!(k.status, Status::Done)),
        }
    }

    pub(super) fn runnable(&self, t: usize) -> bool {
        match &self.tasks[t].status {
            Status::Ready => true,
            Status::Blocked(c, ..) => self.cond_ok(t, c),
            Status::Done => false,
        }
    }

    /// Picks the next task to run, landing copies in flight as the generator chooses.
    pub(super) fn pick(&mut self) -> Result<usize, Fail> {
        loop {
            let tasks: Vec<usize> = (0..self.tasks.len())
                .filter(|&t| self.runnable(t))
                .collect();
            let n = tasks.len() + self.inflight.len();
            if n == 0 {
                return Err(self.deadlock());
            }
            let i = (self.next_rand() % n as u64) as usize;
            if i < tasks.len() {
                return Ok(tasks[i]);
            }
            self.land(i - tasks.len())?;
        }
    }

    /// Every task waits and no copy in flight is left: describe each wait.
    pub(super) fn deadlock(&self) -> Fail {
        let mut span = None;
        let mut parts = Vec::new();
        for t in &self.tasks {
            let Status::Blocked(c, sp, what) = &t.status else {
                continue;
            };
            if matches!(c, Cond::Children) {
                continue;
            }
            span.get_or_insert(*sp);
            let detail = match c {
                Cond::Bar { bar, stage, .. } => match self.bars.get(bar).and_then(|b| b.get(*stage)) {
                    Some(b) => format!(
                        " ({} is in phase {}: {} of {} arrivals missing, {} bytes owed; expect_tx announced {} bytes, copies issued for the phase deliver {})",
                        stage_name(&self.names, *bar, *stage),
                        b.round,
                        b.pending,
                        b.expected,
                        b.tx,
                        b.expect_sum,
                        b.tagged.get(&b.round).copied().unwrap_or(0)
                    ),
                    None => String::new(),
                },
                _ => String::new(),
            };
            parts.push(format!("{} at `{what}`{detail}", t.name));
        }
        (
            span,
            format!(
                "deadlock: every partition is waiting and no copy is in flight: {}",
                parts.join("; ")
            ),
        )
    }

    /// Lands copy `i` of the in-flight list.
    pub(super) fn land(&mut self, i: usize) -> Result<(), Fail> {
        let c = self.inflight.remove(i);
        let still = self
            .inflight
            .iter()
            .any(|o| o.buf == c.buf && o.stage == c.stage);
        if let Some(st) = self.bufs.get_mut(&c.buf).and_then(|s| s.get_mut(c.stage)) {
            st.data = Some(c.tile.clone());
            st.fill = Some(c.fill);
            if !still {
                st.state = StageState::Full;
            }
        }
        if let Some((bar, s)) = c.bar_stage {
            let name = stage_name(&self.names, bar, s);
            if let Some(b) = self.bars.get_mut(&bar).and_then(|v| v.get_mut(s)) {
                b.tx -= c.bytes;
                if b.pending == 0 && b.tx < 0 {
                    return Err((Some(c.span), format!(
                        "barrier {name} phase {}: the copies deliver {} bytes more than its expect_tx of {} bytes announced",
                        b.round, -b.tx, b.expect_sum
                    )));
                }
            }
            self.complete(bar, s)
                .map_err(|(sp, m)| (sp.or(Some(c.span)), m))?;
        }
        Ok(())
    }

    /// Completes the current phase of `bar[s]` if nothing is owed; checks the byte ledger.
    pub(super) fn complete(&mut self, bar: Value, s: usize) -> Result<(), Fail> {
        let name = stage_name(&self.names, bar, s);
        let Some(b) = self.bars.get_mut(&bar).and_then(|v| v.get_mut(s)) else {
            return Ok(());
        };
        if b.pending != 0 || b.tx != 0 {
            return Ok(());
        }
        let tagged = b.tagged.remove(&b.round).unwrap_or(0);
        if tagged != b.expect_sum {
            return Err((
                None,
                format!(
                    "barrier {name} completed phase {} with expect_tx {} bytes, but the copies issued for that phase deliver {tagged} bytes",
                    b.round, b.expect_sum
                ),
            ));
        }
        b.round += 1;
        b.pending = b.expected;
        b.expect_sum = 0;
        Ok(())
    }
}
