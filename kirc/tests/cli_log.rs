//! `KIR_LOG` (kirc/src/log.rs): with a filter that lets debug events through, `kirc` prints the
//! e-graph's line for each kernel on stderr; without `KIR_LOG`, or with a level above debug, it
//! prints nothing there; a filter that does not parse is a user error. The output on stdout is
//! the same either way.

use std::process::{Command, Output};

/// `kirc compile rmsnorm_fwd --emit ir -o -` (the e-graph phase runs on its one kernel) with
/// `KIR_LOG` set to `log`, or removed when `None`.
fn compile(log: Option<&str>) -> Output {
    let args = "compile rmsnorm_fwd --target sm_80 --emit ir -o -";
    let mut c = Command::new(env!("CARGO_BIN_EXE_kirc"));
    c.env("KIR_CACHE_DIR", "off").args(args.split(' '));
    match log {
        Some(v) => c.env("KIR_LOG", v),
        None => c.env_remove("KIR_LOG"),
    };
    c.output().expect("kirc runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn kir_log_debug_prints_the_egraph_line_and_nothing_without_it() {
    let quiet = compile(None);
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet.stderr));
    assert_eq!(text(&quiet.stderr), "", "nothing on stderr without KIR_LOG");
    assert!(
        text(&quiet.stdout).contains("kernel @rmsnorm_fwd"),
        "{}",
        text(&quiet.stdout)
    );

    for filter in [
        "debug",
        "kir_compiler::egraph=debug",
        "warn,kir_compiler=trace",
    ] {
        let o = compile(Some(filter));
        assert_eq!(o.status.code(), Some(0), "{filter}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("egraph kernel="))
            .collect();
        assert_eq!(lines.len(), 1, "KIR_LOG={filter}: one e-graph line:\n{err}");
        let l = lines[0];
        assert!(
            l.contains("DEBUG")
                && l.contains("kir_compiler::egraph")
                && l.contains("kernel=rmsnorm_fwd")
                && l.contains("stop=")
                && l.contains("cost_before="),
            "KIR_LOG={filter}: {l}"
        );
        assert_eq!(o.stdout, quiet.stdout, "KIR_LOG={filter} changes stdout");
    }

    for filter in ["", "info", "kir_backends=debug"] {
        let o = compile(Some(filter));
        assert_eq!(o.status.code(), Some(0), "{filter:?}: {}", text(&o.stderr));
        assert!(
            !text(&o.stderr).contains("egraph"),
            "KIR_LOG={filter:?} lets a debug event of kir_compiler through:\n{}",
            text(&o.stderr)
        );
        assert_eq!(o.stdout, quiet.stdout, "KIR_LOG={filter:?} changes stdout");
    }
}

#[test]
fn a_kir_log_that_does_not_parse_is_a_user_error() {
    let o = compile(Some("kir_compiler=loud"));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: KIR_LOG=\"kir_compiler=loud\" is not a log filter"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "nothing runs: {}", text(&o.stdout));
}
