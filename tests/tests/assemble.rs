//! kir's own assembler, `kir_backends::nvrtc::assemble` (the cache's cubins, `kirc cache
//! prebuild`): it runs the pinned ptxas with `--split-compile 0` and falls back for a ptxas
//! without the option; and where the ptxas it runs is looked for (`ptxas_path::find`). Needs
//! `KIR_PTXAS` (set by scripts/test.sh) and fails loudly without it.

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

/// Where the cache's ptxas is looked for (`kir_backends::ptxas_path::find`): `KIR_PTXAS` as
/// given, even where it does not exist; else the first executable among the `PATH`'s,
/// `$CUDA_HOME`'s, `$CUDA_PATH`'s, the default toolkit's, `$TRITON_PTXAS_PATH`, the active
/// Python environment's wheels (`VIRTUAL_ENV`, `CONDA_PREFIX`) and the registered candidates
/// (the Python package's wheels); a file without an execute bit, or a
/// directory named ptxas, is passed over; none found is `None`.
#[test]
fn ptxas_is_looked_for_where_toolkits_and_wheels_put_it() {
    use kir_backends::ptxas_path::find;
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    let root = std::env::temp_dir().join(format!("kir-find-ptxas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let exe = |dir: &str, mode: u32| -> PathBuf {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).expect("dir");
        let p = d.join("ptxas");
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    };
    let on_path = exe("path/bin", 0o755);
    let not_exec = exe("noexec/bin", 0o644);
    let home = exe("home/bin", 0o755);
    let cuda_path = exe("cudapath/bin", 0o755);
    let toolkit = exe("toolkit/bin", 0o755);
    let triton = exe("triton/bin", 0o755);
    let wheel = exe("wheel/bin", 0o755);
    std::fs::create_dir_all(root.join("dir/bin/ptxas")).expect("a directory named ptxas");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let dir_of = |p: &Path| s(p.parent().expect("parent"));
    let full: HashMap<&str, String> = [
        (
            "PATH",
            format!(
                "{}:{}:{}",
                s(&root.join("dir/bin")),
                dir_of(&not_exec),
                dir_of(&on_path)
            ),
        ),
        ("CUDA_HOME", s(&root.join("home"))),
        ("CUDA_PATH", s(&root.join("cudapath"))),
        ("TRITON_PTXAS_PATH", s(&triton)),
    ]
    .into_iter()
    .collect();
    let none = root.join("no-toolkit");
    let look = |vars: &HashMap<&str, String>, extra: &[PathBuf], tk: &Path| {
        let env = |k: &str| vars.get(k).map(OsString::from);
        find(&env, extra, tk)
    };
    let extra = [root.join("missing/ptxas"), wheel.clone()];
    let tk = root.join("toolkit");
    // Each location in turn, as the ones before it are taken away.
    let mut vars = full.clone();
    assert_eq!(look(&vars, &extra, &tk), Some(on_path.clone()));
    vars.insert("PATH", dir_of(&not_exec));
    assert_eq!(look(&vars, &extra, &tk), Some(home));
    vars.remove("CUDA_HOME");
    assert_eq!(look(&vars, &extra, &tk), Some(cuda_path));
    vars.remove("CUDA_PATH");
    assert_eq!(look(&vars, &extra, &tk), Some(toolkit));
    assert_eq!(look(&vars, &extra, &none), Some(triton));
    vars.remove("TRITON_PTXAS_PATH");
    // The active Python environment's wheels: the CUDA toolkit's, then Triton's.
    let venv = root.join("venv");
    let venv_triton = exe(
        "venv/lib/python3.12/site-packages/triton/backends/nvidia/bin",
        0o755,
    );
    vars.insert("VIRTUAL_ENV", s(&venv));
    assert_eq!(look(&vars, &extra, &none), Some(venv_triton));
    let venv_nvcc = exe("venv/lib/python3.12/site-packages/nvidia/cu13/bin", 0o755);
    assert_eq!(look(&vars, &extra, &none), Some(venv_nvcc.clone()));
    vars.remove("VIRTUAL_ENV");
    vars.insert("CONDA_PREFIX", s(&venv));
    assert_eq!(look(&vars, &extra, &none), Some(venv_nvcc));
    vars.remove("CONDA_PREFIX");
    assert_eq!(look(&vars, &extra, &none), Some(wheel));
    assert_eq!(look(&vars, &extra[..1], &none), None);
    // KIR_PTXAS is the user's choice: it wins, whether or not it exists; empty means unset.
    let mut vars = full.clone();
    vars.insert("KIR_PTXAS", "/nowhere/ptxas".into());
    assert_eq!(
        look(&vars, &extra, &tk),
        Some(PathBuf::from("/nowhere/ptxas"))
    );
    vars.insert("KIR_PTXAS", String::new());
    assert_eq!(look(&vars, &extra, &tk), Some(on_path));
    let _ = std::fs::remove_dir_all(&root);
}
