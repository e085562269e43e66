//! Build script of `kirc`: records the commit it is built from, for `kirc --version`, in the
//! environment variable `KIRC_COMMIT`: `commit ` and a 12-digit abbreviated hash, or
//! `unknown commit`.
//!
//! The commit comes from git when this crate's sources are tracked by the repository around
//! them; else from `.cargo_vcs_info.json`, which `cargo package` writes into a packaged crate;
//! else it is unknown (a copy of the sources with neither, or no `git` on the machine). Nothing
//! here fails the build.

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    println!("cargo:rerun-if-changed=build.rs");
    watch(&dir.join(".cargo_vcs_info.json"));
    let commit = match from_git(dir).or_else(|| from_vcs_info(dir)) {
        Some(hash) => format!("commit {hash}"),
        None => "unknown commit".to_string(),
    };
    println!("cargo:rustc-env=KIRC_COMMIT={commit}");
}

/// Asks cargo to rerun this script when `path` changes, if it exists (cargo takes a missing
/// path as always changed, which would rebuild kirc on every build). Returns whether it does.
fn watch(path: &Path) -> bool {
    let exists = path.exists();
    if exists {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    exists
}

/// Runs `git -C dir ARGS` and returns its trimmed output, or `None` if it fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    Some(String::from_utf8(o.stdout).ok()?.trim().to_string())
}

/// The commit of HEAD when this file is tracked by the enclosing git repository (a packaged copy
/// under an ignored `target/` is not), and asks to be rerun when HEAD or its branch moves.
fn from_git(dir: &Path) -> Option<String> {
    git(dir, &["ls-files", "--error-unmatch", "build.rs"])?;
    let hash = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    let abs = |p: String| {
        let p = Path::new(&p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        }
    };
    if let Some(git_dir) = git(dir, &["rev-parse", "--git-dir"]) {
        watch(&abs(git_dir).join("HEAD"));
    }
    if let (Some(common), Some(head_ref)) = (
        git(dir, &["rev-parse", "--git-common-dir"]),
        git(dir, &["rev-parse", "--symbolic-full-name", "HEAD"]),
    ) {
        let common = abs(common);
        // The branch's loose ref, or while it is packed, the folder a new commit writes it to.
        let loose = common.join(&head_ref);
        if head_ref.starts_with("refs/") && !watch(&loose) {
            loose.parent().map(watch);
        }
        watch(&common.join("packed-refs"));
    }
    Some(hash)
}

/// The commit `cargo package` recorded (`"sha1": "…"` in `.cargo_vcs_info.json`), abbreviated.
fn from_vcs_info(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let rest = &text[text.find("\"sha1\"")? + "\"sha1\"".len()..];
    let rest = rest
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    let hash: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    (hash.len() >= 12).then(|| hash[..12].to_string())
}
