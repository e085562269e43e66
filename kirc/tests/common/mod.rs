//! Helpers shared by the `kirc` command-line tests: run the built binary, read its output, and
//! make a fresh scratch directory per test. Each test file uses the subset it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `kirc` binary built for these tests with `args`, with the on-disk cache off
/// (`KIR_CACHE_DIR=off`: the tests never read or write the user's cache; kirc/tests/cli_cache.rs
/// tests the cache with directories of its own) and no log on stderr (`KIR_LOG` removed;
/// kirc/tests/cli_log.rs tests it).
pub fn kirc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kirc"))
        .env("KIR_CACHE_DIR", "off")
        .env_remove("KIR_LOG")
        .args(args)
        .output()
        .expect("kirc runs")
}

/// The command's standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The command's standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh, empty scratch directory for one test (`suite` and `test` name it; the process id
/// keeps concurrent runs apart).
pub fn scratch(suite: &str, test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kirc-{suite}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// A path as `&str` (the tests only build UTF-8 paths).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}
