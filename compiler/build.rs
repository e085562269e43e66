//! Embeds the op library: generates `$OUT_DIR/oplib_gen.rs`, a table of every `ops/*.kir` file
//! (name without extension, contents via `include_str!`), sorted by name. Adding a file is enough.
//!
//! It also sets `KIR_BUILD_ID`, a fingerprint of the compiler's sources (the SHA-256 of every
//! file under `ir/src`, `backends/src`, `compiler/src` and `compiler/ops`, path and contents, in
//! path order; its first 16 hex digits): the on-disk cache (compiler/src/cache/) puts it in every
//! key, so a kir built from changed sources never reuses what another build compiled, even at
//! the same version number. A directory that is missing (a packaged crate) is left out.
//! The directory comes from the build's `CARGO_MANIFEST_DIR` (read when the script runs, not when
//! it was compiled: a build script compiled for one checkout may run for another), and an
//! unreadable `ops/` fails the build instead of embedding an empty library.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    build_id(Path::new(&manifest));
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

/// Sets `KIR_BUILD_ID` from the sources of the three kir crates (see the module doc).
fn build_id(manifest: &Path) {
    let root = manifest.parent().unwrap_or(manifest);
    let dirs = [
        root.join("ir/src"),
        root.join("backends/src"),
        manifest.join("src"),
        manifest.join("ops"),
    ];
    let mut files = Vec::new();
    for d in &dirs {
        if d.is_dir() {
            println!("cargo:rerun-if-changed={}", d.display());
            walk(d, &mut files);
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in &files {
        let rel = f
            .strip_prefix(root)
            .unwrap_or(f)
            .to_string_lossy()
            .into_owned();
        let body = std::fs::read(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        h.update((rel.len() as u64).to_le_bytes());
        h.update(rel.as_bytes());
        h.update((body.len() as u64).to_le_bytes());
        h.update(&body);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=KIR_BUILD_ID={}", &hex[..16]);
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}
