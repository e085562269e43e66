//! kir's own assembler, `kir_backends::nvrtc::assemble` (the cache's cubins, `kirc cache
//! prebuild`): it runs the pinned ptxas with `--split-compile 0` and falls back for a ptxas
//! without the option. Needs `KIR_PTXAS` (set by scripts/test.sh) and fails loudly without it.

use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};

/// kir's own assembler (`kir_backends::nvrtc::assemble`: the cache's cubins, `kirc cache
/// prebuild`) assembles a module's kernels on threads of their own (`--split-compile 0`); a
/// ptxas that refuses the option is run again without it, and not asked again. A stand-in ptxas
/// that refuses it (and logs its arguments) still yields attention_bwd's cubin, with the real
/// ptxas's report but for the compile times.
#[test]
fn assembly_falls_back_for_a_ptxas_without_split_compile() {
    use std::os::unix::fs::PermissionsExt;
    let real = kir_tests::pinned_ptxas();
    let dir = std::env::temp_dir().join(format!("kir-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (fake, log) = (dir.join("old-ptxas"), dir.join("args.log"));
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\nfor a in \"$@\"; do\n  if [ \"$a\" = --split-compile ]; then\n    echo \"ptxas fatal   : Unknown option '--split-compile'\" >&2\n    exit 1\n  fi\ndone\nexec '{real}' \"$@\"\n",
        log.display()
    );
    std::fs::write(&fake, script).expect("write the stand-in");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("built-in op");
    let out = compile(src, &[], None, Target::Sm90a, Emit::Ptx).expect("attention_bwd");
    let without_times = |r: &str| {
        r.lines()
            .filter(|l| !l.contains("Compile time"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let exe = fake.to_str().expect("utf-8 path");
    let mut reports = vec![];
    for _ in 0..2 {
        let (bin, report) = kir_backends::nvrtc::assemble(exe, &out.text, "sm_90a")
            .unwrap_or_else(|e| panic!("the stand-in: {e}"));
        assert!(bin.starts_with(b"\x7fELF"), "not a cubin");
        assert!(report.contains("attention_bwd_dkdv"), "{report}");
        reports.push(without_times(&report));
    }
    let calls = std::fs::read_to_string(&log).expect("the stand-in's log");
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls[0].contains("--split-compile 0"), "{calls:?}");
    assert!(calls[1..].iter().all(|c| !c.contains("split")), "{calls:?}");
    let (bin, report) =
        kir_backends::nvrtc::assemble(&real, &out.text, "sm_90a").expect("the real ptxas");
    assert!(bin.starts_with(b"\x7fELF"));
    assert_eq!(without_times(&report), reports[0]);
    assert_eq!(reports[0], reports[1]);
    let _ = std::fs::remove_dir_all(&dir);
}
