//! ptxas for the tests that assemble PTX: the pinned ptxas (`KIR_PTXAS`, which
//! ./scripts/test.sh installs and exports), an assembler that fails the test on an error, a
//! warning or a performance-loss note, the no-spill check on its report, and a compile result
//! that may only fail for a target's shared-memory limit.

use kir_backends::Target;
use kir_compiler::internal::compile::{CompileError, Compiled};
use std::process::Command;

/// The pinned ptxas that ./scripts/test.sh installs (`KIR_PTXAS`); panics, naming the
/// script, when it is not set.
pub fn pinned_ptxas() -> String {
    std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas and exports KIR_PTXAS)")
    })
}

/// Assembles `ptx` for `target` with `ptxas -v`; returns the report lines, or panics with the log.
pub fn assemble(name: &str, ptx: &str, target: Target) -> String {
    let dir = std::env::temp_dir().join(format!("kir-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Tests run in parallel threads: every assembly gets its own file names.
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("{name}.{n}.{}.ptx", target.name()));
    std::fs::write(&file, ptx).expect("write ptx");
    let out = Command::new(pinned_ptxas())
        .arg(format!("-arch={}", target.name()))
        .arg("-v")
        .arg(&file)
        .arg("-o")
        .arg(dir.join(format!("{name}.{n}.{}.cubin", target.name())))
        .output()
        .expect("run ptxas");
    let log =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ptxas -arch={} failed for {name}:\n{log}",
        target.name()
    );
    assert!(
        !log.contains("warning"),
        "ptxas warned for {name} on {}:\n{log}",
        target.name()
    );
    assert!(
        performance_losses(&log).is_empty(),
        "ptxas noted a performance loss for {name} on {}:\n{log}",
        target.name()
    );
    log
}

/// The lines of a `ptxas -v` log that note a performance loss, such as C7512: wgmma
/// instructions serialized for want of registers. No spill, but a slow kernel: the d256
/// backward's dQ kernel at 240 registers ran 17 % slower so (call D2, docs/configs.md).
pub fn performance_losses(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("Performance Loss"))
        .map(str::trim)
        .collect()
}

/// Every kernel of a `ptxas -v` log reports 0 spill bytes (and the log has spill lines at all, so
/// a change in ptxas's wording cannot make the check pass vacuously).
pub fn assert_no_spills(log: &str, what: &str) {
    let spills: Vec<&str> = log.lines().filter(|l| l.contains("spill")).collect();
    assert!(
        !spills.is_empty(),
        "{what}: ptxas -v printed no spill line:\n{log}"
    );
    for line in spills {
        assert!(
            line.contains(" 0 bytes spill stores") && line.contains(" 0 bytes spill loads"),
            "{what} spills: {line}"
        );
    }
}

/// The compilation, or `None` when it failed because a kernel needs more shared memory than
/// `target` lets a block use (the error must name the target's own limit); any other error
/// fails the test.
pub fn or_over_limit(
    r: Result<Compiled, CompileError>,
    target: Target,
    what: &str,
) -> Option<Compiled> {
    match r {
        Ok(c) => Some(c),
        Err(e) => {
            let limit = format!("more than the {} a block may use", target.smem_per_block());
            assert!(e.to_string().contains(&limit), "{what}: {e}");
            None
        }
    }
}
