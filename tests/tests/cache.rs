//! The on-disk cache as a library (compiler/src/cache/, docs/cache.md): a hit returns exactly
//! what a fresh compilation does, anything that changes the output misses, damaged, truncated,
//! foreign and other-version entries are warned about and recompiled over, concurrent writers
//! leave only valid entries, cubins are kept per architecture and tuned configurations per GPU
//! and shape bucket, and a read-only prebuilt directory serves what the cache lacks (its damaged
//! entries warned about, nothing written there). Every test uses a directory of its own (no
//! environment variable is read).

use kir_backends::Target;
use kir_compiler::internal::cache::{
    self, compile_key, decode, encode, Cache, Entry, GpuId, Header, Key, Kind, Outcome,
    ShapeBucket, TunedConfig,
};
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kir-cache-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// A cache in `dir` whose warnings are collected.
fn cache(dir: &PathBuf) -> (Cache, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let c = Cache::new(dir).with_warnings(Arc::new(move |l: &str| {
        sink.lock().unwrap().push(l.to_string())
    }));
    (c, seen)
}

fn src(op: &str) -> &'static str {
    kir_compiler::internal::oplib::builtin(op).expect("a built-in op")
}

fn plan(
    src: &str,
    defines: &[(&str, &str)],
    target: Target,
    emit: Emit,
    flags: Flags,
) -> CompilePlan {
    let d: Vec<(String, String)> = defines
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    CompilePlan::resolve(src, &d, target, emit, flags).expect("a valid plan")
}

/// `c` is byte for byte the fresh compilation of `plan`.
fn same_as_fresh(src: &str, plan: &CompilePlan, c: &cache::Cached) {
    let fresh = kir_compiler::internal::pipeline::compile(src, plan).expect("compiles");
    assert_eq!(c.compiled.text, fresh.text, "code");
    assert_eq!(c.compiled.meta, fresh.meta, "META");
    let pretty = |m: &Option<serde_json::Value>| {
        m.as_ref().map(|v| serde_json::to_string_pretty(v).unwrap())
    };
    assert_eq!(pretty(&c.compiled.meta), pretty(&fresh.meta), "META text");
    assert_eq!(c.compiled.module, fresh.module, "module");
    assert_eq!(c.compiled.tried, fresh.tried, "tried");
    assert_eq!(c.compiled.fusion, fresh.fusion, "fusion");
    let report: String = fresh.reports.iter().map(|r| r.render(Some(src))).collect();
    assert_eq!(c.report, report, "report");
}

#[test]
fn miss_then_hit_equals_a_fresh_compile() {
    let dir = scratch("hit");
    let (c, warnings) = cache(&dir);
    let cases = [
        ("gemm", Target::Sm90a, Emit::Ptx),
        ("attention_fwd", Target::Sm80, Emit::Ptx),
        ("rmsnorm_fwd", Target::Sm90a, Emit::Cuda),
        ("layernorm_fwd", Target::Sm100a, Emit::Ir),
    ];
    for (op, target, emit) in cases {
        let s = src(op);
        let p = plan(s, &[], target, emit, Flags::default());
        let first = cache::compile(s, &p, Some(&c)).expect("compiles");
        let key = compile_key(c.version(), s, &p);
        assert_eq!(first.outcome, Outcome::Stored(key.clone()), "{op}");
        assert!(c.path(Kind::Compiled, &key).is_file());
        let second = cache::compile(s, &p, Some(&c)).expect("compiles");
        assert_eq!(second.outcome, Outcome::Hit(key), "{op}");
        same_as_fresh(s, &p, &first);
        same_as_fresh(s, &p, &second);
    }
    // A program the compile driver decides fusion for keeps the decision on a hit.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/fusion/rmsnorm_gemm.kir");
    let s = std::fs::read_to_string(path).expect("rmsnorm_gemm.kir");
    let p = plan(&s, &[], Target::Sm90a, Emit::Ptx, Flags::default());
    let first = cache::compile(&s, &p, Some(&c)).expect("compiles");
    let second = cache::compile(&s, &p, Some(&c)).expect("compiles");
    assert!(matches!(second.outcome, Outcome::Hit(_)));
    assert!(second.compiled.fusion.is_some());
    same_as_fresh(&s, &p, &first);
    same_as_fresh(&s, &p, &second);
    // Without a cache nothing is stored, and the output is the same.
    let s = src("gemm");
    let p = plan(s, &[], Target::Sm90a, Emit::Ptx, Flags::default());
    let off = cache::compile(s, &p, None).unwrap();
    assert_eq!(off.outcome, Outcome::Off);
    same_as_fresh(s, &p, &off);
    assert!(
        warnings.lock().unwrap().is_empty(),
        "{:?}",
        warnings.lock().unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_changes_the_output_misses() {
    let dir = scratch("miss");
    let (c, _) = cache(&dir);
    let s = src("gemm");
    let base = plan(s, &[], Target::Sm90a, Emit::Ptx, Flags::default());
    assert!(matches!(
        cache::compile(s, &base, Some(&c)).unwrap().outcome,
        Outcome::Stored(_)
    ));
    let changed_src = format!("{s}\n// another comment\n");
    let warps = Flags {
        warps: Some(4),
        ..Flags::default()
    };
    let variants: Vec<(String, CompilePlan)> = vec![
        (
            changed_src.clone(),
            plan(
                &changed_src,
                &[],
                Target::Sm90a,
                Emit::Ptx,
                Flags::default(),
            ),
        ),
        (
            s.to_string(),
            plan(
                s,
                &[("BLOCK_N", "64")],
                Target::Sm90a,
                Emit::Ptx,
                Flags::default(),
            ),
        ),
        (
            s.to_string(),
            plan(s, &[], Target::Sm80, Emit::Ptx, Flags::default()),
        ),
        (s.to_string(), plan(s, &[], Target::Sm90a, Emit::Ptx, warps)),
        (
            s.to_string(),
            plan(s, &[], Target::Sm90a, Emit::Cuda, Flags::default()),
        ),
        (
            s.to_string(),
            base.clone()
                .with_stage(kir_compiler::internal::compile::Stage::Fused),
        ),
    ];
    let mut keys = vec![compile_key(c.version(), s, &base)];
    for (i, (text, p)) in variants.iter().enumerate() {
        let out = cache::compile(text, p, Some(&c)).unwrap();
        let Outcome::Stored(k) = out.outcome.clone() else {
            panic!("variant {i} did not miss: {:?}", out.outcome);
        };
        assert!(!keys.contains(&k), "variant {i} shares a key");
        keys.push(k);
        same_as_fresh(text, p, &out);
    }
    // The base is still a hit.
    assert!(matches!(
        cache::compile(s, &base, Some(&c)).unwrap().outcome,
        Outcome::Hit(_)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An entry of `version` at the place of `key`, holding `sections`.
fn entry_bytes(version: &str, kind: Kind, key: &Key, sections: Vec<(String, Vec<u8>)>) -> Vec<u8> {
    encode(&Entry {
        header: Header {
            version: version.into(),
            kind,
            key: key.to_string(),
            name: "x".into(),
            target: "sm_90a ptx".into(),
            created: 0,
        },
        sections,
    })
}

#[test]
fn damaged_entries_warn_recompile_and_are_overwritten() {
    let dir = scratch("damaged");
    let (c, warnings) = cache(&dir);
    let s = src("rmsnorm_fwd");
    let p = plan(s, &[], Target::Sm90a, Emit::Ptx, Flags::default());
    let key = compile_key(c.version(), s, &p);
    let path = c.path(Kind::Compiled, &key);
    cache::compile(s, &p, Some(&c)).unwrap();
    let valid = std::fs::read(&path).unwrap();
    // A deterministic pseudo-random byte string.
    let mut x = 0x1234_5678u32;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    let mut flipped = valid.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let mut other_format = valid.clone();
    other_format[8] = 99;
    let damages: Vec<(&str, Vec<u8>, &str)> = vec![
        ("random bytes", random, "bad magic"),
        ("empty", Vec::new(), "bad magic"),
        ("truncated", valid[..valid.len() / 2].to_vec(), "truncated"),
        ("a flipped bit", flipped, "checksum"),
        ("another format", other_format, "format version 99"),
        (
            "another kir",
            entry_bytes("0.0.0-old", Kind::Compiled, &key, vec![]),
            "written by kir 0.0.0-old",
        ),
        (
            "another entry",
            entry_bytes(
                c.version(),
                Kind::Compiled,
                &Key::parse(&"0".repeat(64)).unwrap(),
                vec![],
            ),
            "foreign entry",
        ),
        (
            "missing sections",
            entry_bytes(
                c.version(),
                Kind::Compiled,
                &key,
                vec![("text".into(), b"x".to_vec())],
            ),
            "no UTF-8 section",
        ),
    ];
    for (what, bytes, why) in damages {
        std::fs::write(&path, &bytes).unwrap();
        warnings.lock().unwrap().clear();
        let out = cache::compile(s, &p, Some(&c)).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(out.outcome, Outcome::Stored(key.clone()), "{what}");
        same_as_fresh(s, &p, &out);
        let w = warnings.lock().unwrap().clone();
        assert_eq!(w.len(), 1, "{what}: {w:?}");
        assert!(
            w[0].starts_with("warning: kir cache: ignoring "),
            "{what}: {}",
            w[0]
        );
        assert!(
            w[0].contains(&path.display().to_string()),
            "{what}: {}",
            w[0]
        );
        assert!(w[0].contains(why), "{what}: {}", w[0]);
        assert!(!w[0].contains('\n'), "{what}: one line");
        // Overwritten with a valid entry: the next compile hits without a warning.
        assert!(decode(&std::fs::read(&path).unwrap()).is_ok(), "{what}");
        warnings.lock().unwrap().clear();
        let again = cache::compile(s, &p, Some(&c)).unwrap();
        assert_eq!(again.outcome, Outcome::Hit(key.clone()), "{what}");
        assert!(warnings.lock().unwrap().is_empty(), "{what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_version_bump_does_not_use_old_entries() {
    let dir = scratch("version");
    let (c, warnings) = cache(&dir);
    let old = c.clone().with_version("0.0.1+0000000000000000/f1");
    let s = src("gemm");
    let p = plan(s, &[], Target::Sm80, Emit::Ptx, Flags::default());
    let Outcome::Stored(old_key) = cache::compile(s, &p, Some(&old)).unwrap().outcome else {
        panic!("the old version stores");
    };
    // The version is in the key: this kir misses, and the old entry stays for the old kir.
    let out = cache::compile(s, &p, Some(&c)).unwrap();
    let Outcome::Stored(new_key) = out.outcome.clone() else {
        panic!("this version missed: {:?}", out.outcome);
    };
    assert_ne!(old_key, new_key);
    same_as_fresh(s, &p, &out);
    assert!(matches!(
        cache::compile(s, &p, Some(&old)).unwrap().outcome,
        Outcome::Hit(_)
    ));
    // And it is checked on read: the old kir's entry renamed to this kir's key is refused.
    std::fs::copy(
        c.path(Kind::Compiled, &old_key),
        c.path(Kind::Compiled, &new_key),
    )
    .unwrap();
    let out = cache::compile(s, &p, Some(&c)).unwrap();
    assert_eq!(out.outcome, Outcome::Stored(new_key));
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.iter().any(|l| l.contains("written by kir 0.0.1")),
        "{w:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_writers_leave_valid_entries() {
    let dir = scratch("concurrent");
    let (c, warnings) = cache(&dir);
    let keys: Vec<Key> = (0..4)
        .map(|i| {
            cache::KeyBuilder::new(Kind::Cubin, c.version())
                .field("i", &[i])
                .finish()
        })
        .collect();
    std::thread::scope(|scope| {
        for t in 0..8u8 {
            let (c, keys) = (&c, &keys);
            scope.spawn(move || {
                for round in 0..40u32 {
                    // Every thread writes the shared key 0 and one key of its own pair.
                    for key in [&keys[0], &keys[1 + (t as usize % 3)]] {
                        let body = vec![t; 1000 + (round as usize * 97 + t as usize * 13) % 5000];
                        let sections = vec![("cubin".to_string(), body)];
                        c.store(Kind::Cubin, key, "m", "gpu", sections)
                            .expect("stores");
                        if let Some(e) = c.load(Kind::Cubin, key) {
                            let b = e.section("cubin").expect("a cubin");
                            assert!(b.iter().all(|&x| x == b[0]), "a mixed entry");
                        }
                    }
                }
            });
        }
    });
    // Whole compilations of one plan from several threads at once.
    let s = src("rmsnorm_fwd");
    let p = plan(s, &[], Target::Sm90a, Emit::Ptx, Flags::default());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| same_as_fresh(s, &p, &cache::compile(s, &p, Some(&c)).unwrap()));
        }
    });
    let listed = c.list().unwrap();
    assert_eq!(listed.len(), 5, "{listed:?}");
    for l in &listed {
        assert!(l.header.is_ok(), "{}: {:?}", l.path.display(), l.header);
    }
    for k in &keys {
        assert!(c.load(Kind::Cubin, k).is_some());
    }
    assert!(
        warnings.lock().unwrap().is_empty(),
        "{:?}",
        warnings.lock().unwrap()
    );
    assert_eq!(c.clear().unwrap(), 5);
    assert!(c.list().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cubins_are_kept_per_arch_and_tuned_configs_per_gpu_and_bucket() {
    let dir = scratch("artifacts");
    let (c, warnings) = cache(&dir);
    let h200 = GpuId {
        name: "NVIDIA H200".into(),
        capability: (9, 0),
        driver: 12080,
    };
    assert_eq!(c.lookup_cubin("ptx", "sm_90a"), None);
    c.store_cubin("ptx", "sm_90a", "gemm", b"\x7fELF cubin")
        .unwrap();
    assert_eq!(
        c.lookup_cubin("ptx", "sm_90a").as_deref(),
        Some(&b"\x7fELF cubin"[..])
    );
    assert_eq!(c.lookup_cubin("ptx", "sm_90"), None, "another arch");
    assert_eq!(c.lookup_cubin("other ptx", "sm_90a"), None, "another PTX");

    let s = src("gemm");
    let dims = |m: u64| {
        vec![
            ("M".to_string(), m),
            ("N".to_string(), 4096),
            ("K".to_string(), 4096),
        ]
    };
    let bucket = ShapeBucket::from_dims(&dims(1000));
    let tuned = TunedConfig {
        defines: vec![
            ("BLOCK_M".into(), "128".into()),
            ("BLOCK_N".into(), "128".into()),
        ],
        warps: Some(8),
        stages: Some(3),
        warp_specialize: Some(true),
        persistent: None,
        overlap: Some(false),
        swap_operands: Some(true),
        cluster: Some(false),
        stream_k: Some(true),
    };
    let d = vec![("TRANS_B".to_string(), "1".to_string())];
    c.store_tuned(s, "gemm", &d, Target::Sm90a, &bucket, Some(&h200), &tuned)
        .unwrap();
    let same_bucket = ShapeBucket::from_dims(&dims(1024));
    assert_eq!(
        c.lookup_tuned(s, &d, Target::Sm90a, &same_bucket, Some(&h200)),
        Some(tuned.clone())
    );
    let other_bucket = ShapeBucket::from_dims(&dims(2048));
    assert_eq!(
        c.lookup_tuned(s, &d, Target::Sm90a, &other_bucket, Some(&h200)),
        None
    );
    assert_eq!(
        c.lookup_tuned(s, &d, Target::Sm80, &bucket, Some(&h200)),
        None
    );
    assert_eq!(c.lookup_tuned(s, &d, Target::Sm90a, &bucket, None), None);
    assert_eq!(
        c.lookup_tuned(s, &[], Target::Sm90a, &bucket, Some(&h200)),
        None
    );
    // The tuned flags make a valid plan.
    let mut defines = d.clone();
    defines.extend(tuned.defines.iter().cloned());
    CompilePlan::resolve(s, &defines, Target::Sm90a, Emit::Ptx, tuned.flags()).unwrap();
    assert!(warnings.lock().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_location_follows_the_environment() {
    use cache::{location, Location};
    use std::ffi::OsString;
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    };
    let dir = |p: &str| Location::Dir(PathBuf::from(p));
    assert_eq!(
        location(env(&[("KIR_CACHE_DIR", "/c"), ("HOME", "/h")])),
        dir("/c")
    );
    assert!(matches!(
        location(env(&[("KIR_CACHE_DIR", "off"), ("HOME", "/h")])),
        Location::Off(_)
    ));
    // Empty is unset.
    assert_eq!(
        location(env(&[("KIR_CACHE_DIR", ""), ("HOME", "/h")])),
        dir("/h/.cache/kir")
    );
    assert_eq!(
        location(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
        dir("/x/kir")
    );
    // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
    assert_eq!(
        location(env(&[("XDG_CACHE_HOME", "x"), ("HOME", "/h")])),
        dir("/h/.cache/kir")
    );
    assert!(matches!(location(env(&[])), Location::Off(_)));
}

#[test]
fn a_prebuilt_directory_serves_misses_read_only() {
    let (pre_dir, dir) = (scratch("prebuilt-src"), scratch("prebuilt-user"));
    let (pre, _) = cache(&pre_dir);
    pre.store_cubin("ptx", "sm_90a", "attention_fwd", b"\x7fELF prebuilt")
        .unwrap();
    pre.store_cubin("bad", "sm_90a", "gemm", b"\x7fELF")
        .unwrap();
    let bad = pre.path(
        Kind::Cubin,
        &cache::cubin_key(pre.version(), "bad", "sm_90a"),
    );
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&bad, bytes).unwrap();
    let (c, warnings) = cache(&dir);
    let c = c.with_prebuilt(Some(pre_dir.clone()));
    assert_eq!(
        c.lookup_cubin("ptx", "sm_90a").as_deref(),
        Some(&b"\x7fELF prebuilt"[..])
    );
    assert_eq!(c.lookup_cubin("ptx", "sm_100a"), None);
    assert!(warnings.lock().unwrap().is_empty());
    // A damaged prebuilt entry is a miss with a warning naming it, never a crash.
    assert_eq!(c.lookup_cubin("bad", "sm_90a"), None);
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.len() == 1 && w[0].contains(&*bad.to_string_lossy()),
        "{w:?}"
    );
    // The cache's own entry comes first; stores, lists and clears touch only the cache.
    c.store_cubin("ptx", "sm_90a", "attention_fwd", b"\x7fELF own")
        .unwrap();
    assert_eq!(
        c.lookup_cubin("ptx", "sm_90a").as_deref(),
        Some(&b"\x7fELF own"[..])
    );
    assert_eq!(c.list().unwrap().len(), 1);
    assert_eq!(c.clear().unwrap(), 1);
    assert_eq!(
        pre.list().unwrap().len(),
        2,
        "the prebuilt directory is untouched"
    );
    // Another kir version finds nothing there (its keys differ), without warnings.
    let other = c.clone().with_version("0.0.0+other/f1");
    assert_eq!(other.lookup_cubin("ptx", "sm_90a"), None);
    let _ = std::fs::remove_dir_all(&pre_dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_prebuilt_location_follows_the_environment() {
    use cache::prebuilt_location;
    use std::ffi::OsString;
    let exe = scratch("prebuilt-exe");
    let var = |v: Option<&'static str>| {
        move |k: &str| {
            (k == "KIR_CACHE_PREBUILT")
                .then(|| v.map(OsString::from))
                .flatten()
        }
    };
    assert_eq!(
        prebuilt_location(var(Some("/p")), Some(&exe)),
        Some(PathBuf::from("/p"))
    );
    assert_eq!(prebuilt_location(var(Some("off")), Some(&exe)), None);
    // Unset (or empty): `kir-prebuilt` beside the executable, when it exists.
    assert_eq!(prebuilt_location(var(None), Some(&exe)), None);
    std::fs::create_dir_all(exe.join("kir-prebuilt")).unwrap();
    assert_eq!(
        prebuilt_location(var(Some("")), Some(&exe)),
        Some(exe.join("kir-prebuilt"))
    );
    assert_eq!(prebuilt_location(var(None), None), None);
    let _ = std::fs::remove_dir_all(&exe);
}
