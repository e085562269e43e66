//! The progress line of `kirc run` on the interpreter: when a run takes more than a second and
//! standard error is a terminal, one line there, redrawn in place every fifth of a second, says
//! which launch is running, how many of its program instances have finished and how long the
//! run has taken (`running: launch 1/2, 1530/4096 programs (37%), 2.4 s`). The line is erased
//! when the run ends, so what stays on the terminal is what kirc prints without it. On a
//! standard error that is not a terminal (a file, a pipe) nothing is written.
//!
//! A timer thread reads the interpreter's counters ([`Progress`]); the run itself only bumps
//! them, so showing the line does not slow it.

use kir_backends::interp::progress::{Progress, Snapshot};
use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a run goes on before the line appears.
const DELAY: Duration = Duration::from_secs(1);

/// How often the line is redrawn.
const PERIOD: Duration = Duration::from_millis(200);

/// Runs `f` with a [`Progress`] to count into, drawing the progress line on standard error
/// while it runs if that is a terminal; returns what `f` returns.
pub fn observe<T>(f: impl FnOnce(&Progress) -> T) -> T {
    let progress = Progress::new();
    if !std::io::stderr().is_terminal() {
        return f(&progress);
    }
    let start = Instant::now();
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let p = &progress;
        s.spawn(move || draw(p, start, &stopped));
        let r = f(&progress);
        // The receiver ends when this sender is dropped; a send error cannot happen while
        // the timer thread lives, and does not matter once it has ended.
        let _ = stop.send(());
        r
    })
}

/// The timer thread: waits [`DELAY`], then redraws the line every [`PERIOD`] until told to
/// stop, and erases it. Nothing is written if the run ends within the delay.
fn draw(p: &Progress, start: Instant, stopped: &mpsc::Receiver<()>) {
    if !matches!(
        stopped.recv_timeout(DELAY),
        Err(mpsc::RecvTimeoutError::Timeout)
    ) {
        return;
    }
    let mut err = std::io::stderr();
    loop {
        // `\r` and "erase the line" (ESC [ 2 K), then the line without a newline.
        let _ = write!(err, "\r\x1b[2K{}", line(p.snapshot(), start.elapsed()));
        let _ = err.flush();
        if !matches!(
            stopped.recv_timeout(PERIOD),
            Err(mpsc::RecvTimeoutError::Timeout)
        ) {
            break;
        }
    }
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}

/// The text of the line for reading `s`, `elapsed` into the run.
pub fn line(s: Snapshot, elapsed: Duration) -> String {
    let launch = if s.launches > 1 {
        format!("launch {}/{}, ", s.launch, s.launches)
    } else {
        String::new()
    };
    let percent = (s.done * 100).checked_div(s.programs).unwrap_or(0);
    format!(
        "running: {launch}{}/{} programs ({percent}%), {:.1} s",
        s.done,
        s.programs,
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_launch_only_when_there_are_several() {
        let one = Snapshot {
            launch: 1,
            launches: 1,
            done: 1530,
            programs: 4096,
        };
        assert_eq!(
            line(one, Duration::from_millis(2430)),
            "running: 1530/4096 programs (37%), 2.4 s"
        );
        let two = Snapshot {
            launch: 2,
            launches: 3,
            done: 7,
            programs: 7,
        };
        assert_eq!(
            line(two, Duration::from_secs(61)),
            "running: launch 2/3, 7/7 programs (100%), 61.0 s"
        );
        assert_eq!(
            line(Snapshot::default(), Duration::ZERO),
            "running: 0/0 programs (0%), 0.0 s"
        );
    }

    #[test]
    fn observe_returns_what_the_run_returns() {
        let r = observe(|p| {
            assert_eq!(p.snapshot(), Snapshot::default());
            41 + 1
        });
        assert_eq!(r, 42);
    }
}
