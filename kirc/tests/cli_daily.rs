//! What a daily user of `kirc` leans on: `kirc ops NAME` (kinds, defaults, allowed values),
//! "did you mean" for ops, targets and `-D` constants, nvcc's `-arch`, `--version`, `kirc fmt
//! --write` and shell completions (docs/cli.md).

mod common;
use common::{kirc, s, scratch, stderr, stdout};
use std::process::Command;

/// The exit code and stderr of a user error (exit 2), checking it says `want`.
fn user_error(args: &[&str], want: &str) {
    let o = kirc(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
}

#[test]
fn ops_name_lists_every_constant_with_kind_default_and_allowed_values() {
    // The oracle: the declarations in the op's source, read here line by line.
    for op in ["attention_fwd", "gemm", "rmsnorm_bwd", "swiglu"] {
        let src = stdout(&kirc(&["fmt", op]));
        let decls: Vec<&str> = src
            .lines()
            .filter_map(|l| l.strip_prefix("const "))
            .collect();
        assert!(!decls.is_empty(), "{op} declares constants");
        let o = kirc(&["ops", op]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        let lines: Vec<&str> = out.lines().skip(2).collect();
        assert_eq!(lines.len(), decls.len(), "{out}");
        for (line, decl) in lines.iter().zip(&decls) {
            // `NAME: KIND = DEFAULT [tune {…}] [where …]` in the source; the listing has the
            // same name, kind and default, and the same tune set and condition.
            let (name, rest) = decl.split_once(':').unwrap();
            let shown = line.trim_start();
            assert!(shown.starts_with(&format!("{name}:")), "{line} / {decl}");
            let kind = rest.split('=').next().unwrap().trim();
            assert!(shown.contains(&format!(": {kind} = ")), "{line} / {decl}");
            if let Some(t) = decl.split("tune ").nth(1) {
                let set = &t[..=t.find('}').unwrap()];
                assert!(shown.contains(&format!("tune {set}")), "{line} / {decl}");
            }
            assert_eq!(
                decl.contains(" where "),
                shown.contains("  where "),
                "{line}"
            );
        }
    }
    let out = stdout(&kirc(&["ops", "attention_fwd"]));
    assert!(out.contains("  DTYPE: {f32, f16, bf16} = bf16\n"), "{out}");
    assert!(
        out.contains("  BLOCK_N: int = 64  tune {32, 64, 80, 128, 176}"),
        "{out}"
    );
}

#[test]
fn did_you_mean_for_ops_targets_and_constants() {
    user_error(
        &["ops", "gemn"],
        "no built-in op `gemn`; did you mean `gemm`?",
    );
    user_error(
        &["check", "rmsnorm_fdw"],
        "no built-in op of that name; did you mean `rmsnorm_fwd`?",
    );
    user_error(
        &["compile", "gemm", "--target", "sm90a", "-o", "-"],
        "unknown target `sm90a`; did you mean `sm_90a`?",
    );
    user_error(
        &["check", "gemm", "--target", "sm_90", "--stages", "2"],
        "did you mean `sm_90a`?",
    );
    // An unknown constant stays an error, with the suggestion.
    user_error(
        &["check", "attention_fwd", "-D", "HEADDIM=64"],
        "-D HEADDIM: unknown constant `HEADDIM`; did you mean `HEAD_DIM`?",
    );
    user_error(
        &["check", "attention_fwd", "-D", "DTYPE=bf61"],
        "did you mean `bf16`?",
    );
    // Nothing close: no suggestion.
    let o = kirc(&["check", "attention_fwd", "-D", "ZZZZZZ=1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("did you mean"), "{}", stderr(&o));
    let o = kirc(&["ops", "softmax"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("did you mean"), "{}", stderr(&o));
}

#[test]
fn arch_is_target_in_both_spellings() {
    let want = stdout(&kirc(&[
        "compile",
        "rmsnorm_fwd",
        "--target",
        "sm_80",
        "-o",
        "-",
    ]));
    assert!(want.contains(".target sm_80"), "{want}");
    let joined = kirc(&["compile", "rmsnorm_fwd", "-arch=sm_80", "-o", "-"]);
    assert!(joined.status.success(), "{}", stderr(&joined));
    assert_eq!(stdout(&joined), want);
    let split = kirc(&["compile", "rmsnorm_fwd", "-arch", "sm_80", "-o", "-"]);
    assert!(split.status.success(), "{}", stderr(&split));
    assert_eq!(stdout(&split), want);
    // A different target really changes the output: the flag is not ignored.
    let other = stdout(&kirc(&[
        "compile",
        "rmsnorm_fwd",
        "-arch=sm_90a",
        "-o",
        "-",
    ]));
    assert!(other.contains(".target sm_90a"), "{other}");
    user_error(
        &["compile", "rmsnorm_fwd", "-arch=sm90a", "-o", "-"],
        "did you mean `sm_90a`?",
    );
    // Without a value it is `--target` without one.
    user_error(&["compile", "rmsnorm_fwd", "-arch"], "--target");
}

#[test]
fn version_names_the_commit_and_the_cuda_runtime() {
    let o = kirc(&["--version"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = stdout(&o);
    assert!(
        v.starts_with(&format!("kirc {} (", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    let cuda = if cfg!(feature = "cuda") {
        "; CUDA runtime: built in)"
    } else {
        "; CUDA runtime: not built in)"
    };
    assert!(v.trim_end().ends_with(cuda), "{v}");
    // The commit, as git sees this checkout now (the build script reruns when HEAD moves).
    let dir = env!("CARGO_MANIFEST_DIR");
    let tracked = Command::new("git")
        .args(["-C", dir, "ls-files", "--error-unmatch", "build.rs"])
        .output()
        .is_ok_and(|o| o.status.success());
    let head = Command::new("git")
        .args(["-C", dir, "rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success() && tracked)
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(h) => assert!(v.contains(&format!("(commit {h};")), "{v} vs {h}"),
        None => assert!(
            v.contains("(unknown commit;") || v.contains("(commit "),
            "{v}"
        ),
    }
}

#[test]
fn fmt_write_rewrites_only_what_changes() {
    let d = scratch("daily", "fmt_write");
    let canonical = stdout(&kirc(&["fmt", "rmsnorm_fwd"]));
    let messy = canonical.replace("  %g = program_id 0 : i32", "  %g   =  program_id 0: i32");
    assert_ne!(messy, canonical);
    let (good, bad) = (d.join("good.kir"), d.join("bad.kir"));
    std::fs::write(&good, &canonical).unwrap();
    std::fs::write(&bad, &messy).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    let good_mtime = std::fs::metadata(&good).unwrap().modified().unwrap();
    let o = kirc(&["fmt", "--write", s(&good), s(&bad)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("formatted {}\n", s(&bad)));
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), canonical);
    assert_eq!(
        std::fs::metadata(&good).unwrap().modified().unwrap(),
        good_mtime
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&bad).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }
    // Now both are canonical: --check agrees, and --write changes nothing.
    assert_eq!(
        kirc(&["fmt", "--check", s(&good), s(&bad)]).status.code(),
        Some(0)
    );
    let o = kirc(&["fmt", "--write", s(&bad)]);
    assert!(
        o.status.success() && stdout(&o).is_empty(),
        "{}",
        stdout(&o)
    );
    // A file that does not parse: an error, and no file is touched.
    std::fs::write(&bad, &messy).unwrap();
    let broken = d.join("broken.kir");
    std::fs::write(
        &broken,
        "module m\nkernel @k() grid [1, 1, 1] {\n  %x = nope : i32\n}\n",
    )
    .unwrap();
    let o = kirc(&["fmt", "--write", s(&bad), s(&broken)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with(&format!("{}:3:8: error: unknown op `nope`", s(&broken))),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), messy);
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["bad.kir", "broken.kir", "good.kir"]);
    // Built-in ops are not files; --check and --write do not go together; printing takes one.
    user_error(
        &["fmt", "--write", "gemm"],
        "gemm: a built-in op, not a file",
    );
    user_error(&["fmt", "--write", s(&d.join("none.kir"))], "no such file");
    user_error(
        &["fmt", "--write", "--check", s(&bad)],
        "cannot be used with",
    );
    user_error(&["fmt", s(&bad), s(&good)], "kirc fmt prints one module");
}

#[test]
fn completions_for_every_shell_name_the_subcommands_and_flags() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let o = kirc(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for word in [
            "check",
            "compile",
            "completions",
            "message-format",
            "target",
            "dump-after",
        ] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    // The bash script is valid bash, and defines the completion function.
    let d = scratch("daily", "completions");
    let path = d.join("kirc.bash");
    std::fs::write(&path, stdout(&kirc(&["completions", "bash"]))).unwrap();
    if let Ok(o) = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p kirc && declare -F _kirc",
            s(&path)
        ))
        .output()
    {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("_kirc"));
    }
    user_error(&["completions", "tcsh"], "invalid value 'tcsh'");
}
