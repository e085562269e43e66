//! `kirc cache dir|list|clear|prebuild` and the cache of `kirc compile` (docs/cache.md): each
//! test points `KIR_CACHE_DIR` (or `XDG_CACHE_HOME`/`HOME`) at a scratch directory of its own,
//! so the user's cache is never touched.

mod common;
use common::{scratch, stderr, stdout};
use std::path::Path;
use std::process::{Command, Output};

/// Runs kirc with only the cache variables given (the others of the test's environment that
/// choose the cache removed).
fn kirc_env(vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kirc"));
    c.env_remove("KIR_CACHE_DIR")
        .env_remove("KIR_LOG")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("HOME");
    for (k, v) in vars {
        c.env(k, v);
    }
    c.args(args).output().expect("kirc runs")
}

/// Runs kirc with `KIR_CACHE_DIR=dir`.
fn kirc_in(dir: &Path, args: &[&str]) -> Output {
    kirc_env(&[("KIR_CACHE_DIR", dir.to_str().unwrap())], args)
}

/// The files of `dir` named like entries.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn cache_dir_follows_the_environment() {
    let d = scratch("cache", "dir");
    let o = kirc_env(
        &[("KIR_CACHE_DIR", "/tmp/kc-x"), ("HOME", "/h")],
        &["cache", "dir"],
    );
    assert_eq!(stdout(&o), "/tmp/kc-x\n", "{}", stderr(&o));
    let o = kirc_env(
        &[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")],
        &["cache", "dir"],
    );
    assert_eq!(stdout(&o), "/x/kir\n");
    let o = kirc_env(&[("HOME", "/h")], &["cache", "dir"]);
    assert_eq!(stdout(&o), "/h/.cache/kir\n");
    for args in [
        &["cache", "dir"][..],
        &["cache", "list"],
        &["cache", "clear"],
    ] {
        let o = kirc_env(&[("KIR_CACHE_DIR", "off"), ("HOME", "/h")], args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("the kir cache is off (KIR_CACHE_DIR=off)"),
            "{}",
            stderr(&o)
        );
    }
    // The default location under HOME is where compile stores.
    let home = d.to_str().unwrap();
    let o = kirc_env(
        &[("HOME", home)],
        &["compile", "rmsnorm_fwd", "-o", "/dev/null"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(entries(&d.join(".cache/kir")).len(), 1);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compile_stores_then_hits_with_the_same_output() {
    let d = scratch("cache", "compile");
    let cache = d.join("cache");
    let (a, b) = (d.join("a.ptx"), d.join("b.ptx"));
    let (ma, mb) = (d.join("a.json"), d.join("b.json"));
    let args = |out: &Path, meta: &Path| -> Vec<String> {
        ["compile", "gemm", "--target", "sm_80", "--report", "-o"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                out.display().to_string(),
                "--meta".into(),
                meta.display().to_string(),
            ])
            .collect()
    };
    let run = |out: &Path, meta: &Path, extra: &[&str]| {
        let mut v = args(out, meta);
        v.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        let o = kirc_in(&cache, &refs);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stderr(&o)
    };
    let first = run(&a, &ma, &[]);
    let stored = first.lines().last().unwrap().to_string();
    assert!(stored.starts_with("cache: stored "), "{first}");
    let key = stored.trim_start_matches("cache: stored ");
    assert_eq!(key.len(), 64);
    assert_eq!(entries(&cache), vec![format!("{key}.compiled")]);
    let second = run(&b, &mb, &[]);
    assert_eq!(second.lines().last().unwrap(), format!("cache: hit {key}"));
    // The whole report but its last line is the same, and so are the files.
    let body = |r: &str| {
        r.lines()
            .take(r.lines().count() - 1)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&first), body(&second));
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(std::fs::read(&ma).unwrap(), std::fs::read(&mb).unwrap());
    // --no-cache neither reads nor writes; a change of define stores a second entry.
    let third = run(&b, &mb, &["--no-cache"]);
    assert_eq!(third.lines().last().unwrap(), "cache: off");
    assert_eq!(body(&first), body(&third));
    assert_eq!(entries(&cache).len(), 1);
    let fourth = run(&b, &mb, &["-D", "BLOCK_N=64"]);
    assert!(
        fourth.lines().last().unwrap().starts_with("cache: stored "),
        "{fourth}"
    );
    assert_eq!(entries(&cache).len(), 2);
    // list shows both, clear removes them.
    let o = kirc_in(&cache, &["cache", "list"]);
    let l = stdout(&o);
    assert!(l.starts_with("KEY "), "{l}");
    assert!(l.contains(&key[..16]), "{l}");
    let rows = l
        .lines()
        .filter(|r| r.contains(" compiled ") && r.contains(" gemm ") && r.contains(" sm_80 ptx "))
        .count();
    assert_eq!(rows, 2, "{l}");
    assert!(l.contains("2 entries"), "{l}");
    let o = kirc_in(&cache, &["cache", "clear"]);
    assert_eq!(
        stdout(&o),
        format!("removed 2 files from {}\n", cache.display())
    );
    assert!(entries(&cache).is_empty());
    assert!(stdout(&kirc_in(&cache, &["cache", "list"])).starts_with("0 entries"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_corrupt_entry_is_a_warning_and_is_overwritten() {
    let d = scratch("cache", "corrupt");
    let args = ["compile", "rmsnorm_fwd", "-o", "-"];
    let o = kirc_in(&d, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fresh = stdout(&o);
    let name = entries(&d).pop().unwrap();
    let path = d.join(&name);
    std::fs::write(&path, b"garbage, not an entry").unwrap();
    let o = kirc_in(&d, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), fresh);
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with(&format!(
            "warning: kir cache: ignoring {}: ",
            path.display()
        )),
        "{e}"
    );
    assert!(e.contains("bad magic"), "{e}");
    // list says what a broken file is; the next compile stored a valid entry over it.
    std::fs::write(d.join(format!("{}.cubin", "f".repeat(64))), b"KIRCACHE\x01").unwrap();
    let l = stdout(&kirc_in(&d, &["cache", "list"]));
    assert!(l.contains("invalid ffff"), "{l}");
    assert!(l.contains("rmsnorm_fwd"), "{l}");
    let o = kirc_in(&d, &args);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn concurrent_kirc_processes_leave_valid_entries() {
    let d = scratch("cache", "processes");
    let cache = d.join("cache");
    let spawn = |op: &str| {
        Command::new(env!("CARGO_BIN_EXE_kirc"))
            .env("KIR_CACHE_DIR", &cache)
            .args(["compile", op, "-o", "/dev/null"])
            .spawn()
            .expect("kirc starts")
    };
    // Two processes on one key and two on others, at once.
    let children: Vec<_> = ["rmsnorm_fwd", "rmsnorm_fwd", "layernorm_fwd", "swiglu"]
        .iter()
        .map(|op| spawn(op))
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let l = stdout(&kirc_in(&cache, &["cache", "list"]));
    assert!(!l.contains("invalid"), "{l}");
    assert!(l.contains("3 entries"), "{l}");
    assert!(!entries(&cache).iter().any(|e| e.starts_with(".tmp-")));
    let _ = std::fs::remove_dir_all(&d);
}

/// `kirc cache prebuild` compiles a module and stores one cubin per target that ptxas assembled
/// (no GPU); another cache directory whose prebuilt directory it is (`KIR_CACHE_PREBUILT`)
/// reads the compilation from there and writes nothing. A ptxas that cannot run and a cache
/// that is off are errors with exit code 2.
#[test]
fn prebuild_stores_cubins_that_a_prebuilt_directory_serves() {
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)")
    });
    let d = scratch("cache", "prebuild");
    let (pre, user, out) = (d.join("pre"), d.join("user"), d.join("g.ptx"));
    let args = [
        "cache", "prebuild", "gemm", "--target", "sm_90a", "--target", "sm_80",
    ];
    let o = kirc_env(
        &[("KIR_CACHE_DIR", common::s(&pre)), ("KIR_PTXAS", &ptxas)],
        &args,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for t in ["sm_90a", "sm_80"] {
        assert!(
            text.contains(&format!("prebuilt gemm for {t}: 1 kernel, cubin ")),
            "{text}"
        );
    }
    let mut kinds: Vec<String> = entries(&pre)
        .iter()
        .map(|f| f.rsplit('.').next().unwrap_or("").to_string())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["compiled", "compiled", "cubin", "cubin"].map(String::from),
        "{kinds:?}"
    );
    let compile = |prebuilt: &Path| {
        kirc_env(
            &[
                ("KIR_CACHE_DIR", common::s(&user)),
                ("KIR_CACHE_PREBUILT", common::s(prebuilt)),
            ],
            &[
                "compile",
                "gemm",
                "--target",
                "sm_90a",
                "--report",
                "-o",
                common::s(&out),
            ],
        )
    };
    let o = compile(&pre);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .lines()
            .last()
            .unwrap_or("")
            .starts_with("cache: hit "),
        "{}",
        stderr(&o)
    );
    assert!(entries(&user).is_empty(), "{:?}", entries(&user));
    // Without it, the same compile is a miss, stored in the user's directory.
    let o = compile(Path::new("off"));
    assert!(
        stderr(&o)
            .lines()
            .last()
            .unwrap_or("")
            .starts_with("cache: stored "),
        "{}",
        stderr(&o)
    );
    assert_eq!(entries(&user).len(), 1);
    let o = kirc_env(
        &[
            ("KIR_CACHE_DIR", common::s(&pre)),
            ("KIR_PTXAS", "/nonexistent/ptxas"),
        ],
        &args,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot run /nonexistent/ptxas"),
        "{}",
        stderr(&o)
    );
    let o = kirc_env(&[("KIR_CACHE_DIR", "off")], &args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the kir cache is off"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A prebuilt entry for one problem serves every problem whose shapes select the same
/// configuration (the key holds the configuration, not the dims: `CompilePlan::identity`): a
/// GEMM prebuilt at 16 rows serves 13 rows (both the swapped 16×128 tile) and not 200 rows.
#[test]
fn a_prebuilt_shape_configuration_serves_other_shapes_that_select_it() {
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)")
    });
    let d = scratch("cache", "prebuild-shapes");
    let (pre, user, out) = (d.join("pre"), d.join("user"), d.join("g.ptx"));
    let shapes = |m: usize| {
        [
            "--shape".to_string(),
            format!("a=1x{m}x4096"),
            "--shape".to_string(),
            "b=1x4096x1000".to_string(),
        ]
    };
    let mut args: Vec<String> = ["cache", "prebuild", "gemm", "--target", "sm_90a"]
        .map(String::from)
        .to_vec();
    args.extend(shapes(16));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = kirc_env(
        &[("KIR_CACHE_DIR", common::s(&pre)), ("KIR_PTXAS", &ptxas)],
        &args,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let compile = |m: usize| {
        let mut a: Vec<String> = ["compile", "gemm", "--target", "sm_90a", "--report", "-o"]
            .map(String::from)
            .to_vec();
        a.push(common::s(&out).to_string());
        a.extend(shapes(m));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        kirc_env(
            &[
                ("KIR_CACHE_DIR", common::s(&user)),
                ("KIR_CACHE_PREBUILT", common::s(&pre)),
            ],
            &a,
        )
    };
    let last = |o: &Output| stderr(o).lines().last().unwrap_or("").to_string();
    let o = compile(13);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("BLOCK_M=16 (M tile)"), "{}", stderr(&o));
    assert!(last(&o).starts_with("cache: hit "), "{}", stderr(&o));
    assert!(entries(&user).is_empty(), "{:?}", entries(&user));
    let o = compile(200);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(last(&o).starts_with("cache: stored "), "{}", stderr(&o));
    assert_eq!(entries(&user).len(), 1, "{:?}", entries(&user));
    let _ = std::fs::remove_dir_all(&d);
}
