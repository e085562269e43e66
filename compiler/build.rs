//! Embeds the op library: generates `$OUT_DIR/oplib_gen.rs`, a table of every `ops/*.kir` file
//! (name without extension, contents via `include_str!`), sorted by name. Adding a file is enough.
//! The directory comes from the build's `CARGO_MANIFEST_DIR` (read when the script runs, not when
//! it was compiled: a build script compiled for one checkout may run for another), and an
//! unreadable `ops/` fails the build instead of embedding an empty library.

use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&manifest).join("ops");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut ops: Vec<(String, String)> = Vec::new();
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the op library {}: {e}", dir.display()));
    for e in entries.flatten() {
        let path = e.path();
        let is_kir = path.extension().is_some_and(|x| x == "kir");
        if let (true, Some(stem)) = (is_kir, path.file_stem().and_then(|s| s.to_str())) {
            println!("cargo:rerun-if-changed={}", path.display());
            ops.push((stem.to_string(), path.display().to_string()));
        }
    }
    ops.sort();
    let mut out = String::from("/// Built-in ops: (name, source), sorted by name.\npub(crate) static BUILTINS: &[(&str, &str)] = &[\n");
    for (name, path) in &ops {
        out += &format!("    ({name:?}, include_str!({path:?})),\n");
    }
    out += "];\n";
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let dest = Path::new(&out_dir).join("oplib_gen.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}
