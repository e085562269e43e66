//! What the tuner prints: the progress line (done, left, best so far, elapsed and estimated
//! time left), the table of timed candidates with the summary of dropped ones, and the winner
//! as `-D` flags and as a configuration value.

use super::types::{Dropped, Progress, TuneResult};
use std::fmt::Write;
use std::time::Duration;

/// `1m05s`, `12.3s`: a duration for the progress line.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        let whole = s.round() as u64;
        if whole < 3600 {
            format!("{}m{:02}s", whole / 60, whole % 60)
        } else {
            format!("{}h{:02}m", whole / 3600, whole % 3600 / 60)
        }
    }
}

/// The progress line: `tune: 12/96 done, 84 left, best 0.4123 ms (BLOCK_M=128 …), 14.2s
/// elapsed, ~1m39s left`. The estimate is the mean time per finished candidate times the
/// candidates left (`~?` before the first one is finished).
pub fn progress_line(p: &Progress) -> String {
    let left = p.total.saturating_sub(p.done);
    let best = match &p.best {
        Some((label, ms)) => format!("best {ms:.4} ms ({label})"),
        None => "best none yet".to_string(),
    };
    let eta = if p.done == 0 {
        "~?".to_string()
    } else {
        let per = p.elapsed.as_secs_f64() / p.done as f64;
        format!("~{}", duration(Duration::from_secs_f64(per * left as f64)))
    };
    format!(
        "tune: {}/{} done, {left} left, {best}, {} elapsed, {eta} left",
        p.done,
        p.total,
        duration(p.elapsed)
    )
}

/// The table of timed candidates (fastest first; TFLOP/s when `flops`, the work of one run, is
/// given), the summary of dropped candidates, and the winner as `kirc` arguments and as a
/// configuration value.
pub fn table(r: &TuneResult, flops: Option<f64>) -> String {
    let mut s = String::new();
    let axes: Vec<String> = r
        .axes
        .iter()
        .map(|(n, v)| format!("{n} {{{}}}", v.join(", ")))
        .collect();
    let _ = writeln!(s, "space: {} candidates ({})", r.space, axes.join(" × "));
    let checks: Vec<String> = r
        .check_shapes
        .iter()
        .map(|(n, v)| {
            let d: Vec<String> = v.iter().map(usize::to_string).collect();
            format!("{n}={}", d.join("x"))
        })
        .collect();
    let _ = writeln!(
        s,
        "checked against the interpreter on {}",
        checks.join(", ")
    );
    let (rejected, duplicate, wrong, failed) = r.counts();
    let _ = writeln!(
        s,
        "dropped: {rejected} rejected by the compiler, {duplicate} with the PTX of an earlier \
         candidate, {wrong} wrong, {failed} failed to run; timed: {}",
        r.timed.len()
    );
    for (c, d) in &r.dropped {
        match d {
            Dropped::Wrong(why) => {
                let _ = writeln!(s, "  WRONG  {}: {why}", c.label());
            }
            Dropped::Failed(why) => {
                let _ = writeln!(s, "  FAILED {}: {why}", c.label());
            }
            Dropped::Rejected(_) | Dropped::Duplicate(_) => {}
        }
    }
    let _ = writeln!(s);
    let rate = if flops.is_some() { "  TFLOP/s" } else { "" };
    let _ = writeln!(s, "rank   median ms{rate}  candidate");
    for (i, t) in r.timed.iter().enumerate() {
        let tf = match flops {
            Some(f) => format!("  {:>7.1}", f / t.median_ms / 1e9),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "{:>4}  {:>10.4}{tf}  {}",
            i + 1,
            t.median_ms,
            t.candidate.label()
        );
    }
    if let Some(w) = r.timed.first() {
        let _ = writeln!(s);
        let _ = writeln!(s, "winner: {}", w.candidate.cli_args());
        let _ = writeln!(s, "config: {:?}", w.candidate.config());
    }
    s
}
