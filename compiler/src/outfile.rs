//! Output files, written atomically and all or nothing: what `kirc compile`, `kirc run`, `kirc
//! randn` and [`crate::internal::npy::write`] write goes through here.
//!
//! - [`check_paths`] validates a command's output paths before anything is computed or written:
//!   no path is a directory, no parent is a file, and no two paths name the same file.
//! - [`Staged`] writes every file to a temporary file in its destination folder (creating
//!   missing folders), and only [`Staged::commit`] renames them into place. A staged set that is
//!   dropped without a commit (an error, a closed stdout) removes its temporary files and the
//!   folders it created, so a failed command leaves no new file.
//! - [`atomic_write`] is one file of that; [`stage_replacements`] stages new contents for files
//!   that exist, keeping their permissions.
//!
//! A rename within one folder replaces the destination atomically, so a reader never sees a
//! half-written file. Renames of several files are done one after another; only a failure of
//! the operating system between two of them (not a full disk: every byte is written before the
//! first rename) could leave a set half-committed.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an output could not be written: the path and what went wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct OutputError {
    /// The path as given.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

fn out_err(path: &Path, message: impl Into<String>) -> OutputError {
    OutputError {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// The absolute, lexically normalized form of `p` (`.` and `..` resolved, symlinks of existing
/// folders followed), used to tell whether two output paths name one file.
fn identity(p: &Path) -> PathBuf {
    let abs = match std::env::current_dir() {
        Ok(cwd) if p.is_relative() => cwd.join(p),
        _ => p.to_path_buf(),
    };
    // The existing part resolves through symlinks; the rest is appended as written.
    if let Ok(c) = fs::canonicalize(&abs) {
        return c;
    }
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    match (out.parent(), out.file_name()) {
        (Some(dir), Some(name)) => match fs::canonicalize(dir) {
            Ok(d) => d.join(name),
            Err(_) => out,
        },
        _ => out,
    }
}

/// Checks output paths before anything is written: each names a file (not an existing
/// directory, not a path ending in `/` or `..`), its nearest existing ancestor is a directory,
/// and no two of them name the same file (`-o x --meta ./x`). `what` gives each path's flag
/// for the message.
pub fn check_paths(paths: &[(&str, &Path)]) -> Result<(), OutputError> {
    let mut seen: Vec<(PathBuf, &str, &Path)> = Vec::new();
    for &(what, p) in paths {
        let text = p.as_os_str().to_string_lossy();
        if p.as_os_str().is_empty() || p.file_name().is_none() || text.ends_with('/') {
            return Err(out_err(p, format!("{what} needs a file name")));
        }
        if p.is_dir() {
            return Err(out_err(p, format!("{what} names a directory, not a file")));
        }
        let mut anc = p.parent();
        while let Some(a) = anc.filter(|a| !a.as_os_str().is_empty()) {
            if a.exists() {
                if !a.is_dir() {
                    return Err(out_err(
                        p,
                        format!("{what}: `{}` is not a directory", a.display()),
                    ));
                }
                break;
            }
            anc = a.parent();
        }
        let id = identity(p);
        if let Some((_, w, q)) = seen.iter().find(|(i, _, _)| *i == id) {
            return Err(out_err(
                p,
                format!(
                    "{what} and {w} name the same file (`{}` and `{}`); each output needs its own",
                    p.display(),
                    q.display()
                ),
            ));
        }
        seen.push((id, what, p));
    }
    Ok(())
}

/// A set of output files written to temporary files beside their destinations, not yet in
/// place. [`Staged::commit`] renames them; dropping the set instead removes every temporary
/// file and every folder it created.
#[must_use = "a staged set writes nothing until it is committed"]
pub struct Staged {
    /// (temporary file, destination), in the order given.
    files: Vec<(PathBuf, PathBuf)>,
    /// Folders created for the destinations, outermost first.
    created: Vec<PathBuf>,
    committed: bool,
}

/// Distinguishes the temporary files of one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Staged {
    /// Writes each `(destination, bytes)` to a new temporary file in the destination's folder
    /// (created with its missing parents). On any failure everything written so far is removed
    /// and the error names the destination.
    pub fn write(files: Vec<(PathBuf, Vec<u8>)>) -> Result<Staged, OutputError> {
        let mut st = Staged {
            files: Vec::new(),
            created: Vec::new(),
            committed: false,
        };
        for (dest, bytes) in files {
            let dir = match dest.parent().filter(|d| !d.as_os_str().is_empty()) {
                Some(d) => d.to_path_buf(),
                None => PathBuf::from("."),
            };
            st.create_dir(&dir, &dest)?;
            let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.ok_or_else(|| out_err(&dest, "needs a file name"))?;
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let tmp = dir.join(format!(".{name}.kir-tmp-{}-{n}", std::process::id()));
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| out_err(&dest, format!("cannot write: {e}")))?;
            st.files.push((tmp, dest.clone()));
            f.write_all(&bytes)
                .and_then(|_| f.flush())
                .map_err(|e| out_err(&dest, format!("cannot write: {e}")))?;
        }
        Ok(st)
    }

    /// Creates `dir` and its missing parents, remembering the ones it made.
    fn create_dir(&mut self, dir: &Path, dest: &Path) -> Result<(), OutputError> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            missing.push(p.to_path_buf());
            d = p.parent();
        }
        for p in missing.into_iter().rev() {
            fs::create_dir(&p).map_err(|e| {
                out_err(
                    dest,
                    format!("cannot create the folder `{}`: {e}", p.display()),
                )
            })?;
            self.created.push(p);
        }
        Ok(())
    }

    /// The destinations, in the order given.
    pub fn destinations(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(_, d)| d.as_path())
    }

    /// Renames every temporary file onto its destination. On a failure the files not yet
    /// renamed are removed and the error names the destination.
    pub fn commit(mut self) -> Result<(), OutputError> {
        self.committed = true;
        let files = std::mem::take(&mut self.files);
        for (i, (tmp, dest)) in files.iter().enumerate() {
            if let Err(e) = fs::rename(tmp, dest) {
                for (t, _) in &files[i..] {
                    let _ = fs::remove_file(t);
                }
                return Err(out_err(dest, format!("cannot write: {e}")));
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for (tmp, _) in &self.files {
            let _ = fs::remove_file(tmp);
        }
        for d in self.created.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, then a rename.
/// Missing parent folders are created. On failure nothing new is left behind.
pub fn atomic_write(path: &Path, bytes: Vec<u8>) -> Result<(), OutputError> {
    check_paths(&[("the output", path)])?;
    Staged::write(vec![(path.to_path_buf(), bytes)])?.commit()
}

/// New contents for existing files, staged as [`Staged::write`] does: [`Staged::commit`]
/// replaces the files atomically (a rename onto each); what `kirc fmt --write` does. Each file
/// keeps its permissions, and a symbolic link is followed, so the file it points to is replaced
/// and the link stays. Every path must be an existing regular file (after links); on any
/// failure nothing is staged.
pub fn stage_replacements(files: Vec<(PathBuf, Vec<u8>)>) -> Result<Staged, OutputError> {
    let mut real = Vec::with_capacity(files.len());
    let mut perms = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        let target = fs::canonicalize(&path).map_err(|e| out_err(&path, format!("{e}")))?;
        let meta = fs::metadata(&target).map_err(|e| out_err(&path, format!("{e}")))?;
        if !meta.is_file() {
            return Err(out_err(&path, "not a regular file"));
        }
        perms.push(meta.permissions());
        real.push((target, bytes));
    }
    let staged = Staged::write(real)?;
    for ((tmp, dest), p) in staged.files.iter().zip(perms) {
        fs::set_permissions(tmp, p)
            .map_err(|e| out_err(dest, format!("cannot keep its permissions: {e}")))?;
    }
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh scratch folder for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kir-outfile-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// Every entry under `d`, relative, sorted.
    fn listing(d: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![d.to_path_buf()];
        while let Some(p) = stack.pop() {
            for e in fs::read_dir(&p).unwrap() {
                let path = e.unwrap().path();
                out.push(path.strip_prefix(d).unwrap().display().to_string());
                if path.is_dir() {
                    stack.push(path);
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_failed_set_leaves_nothing() {
        let d = scratch("failed");
        fs::write(d.join("file"), b"x").unwrap();
        // The second destination's parent is a file: staging fails after the first file was
        // written to its temporary, in a folder staging created.
        let r = Staged::write(vec![
            (d.join("new/a.txt"), b"a".to_vec()),
            (d.join("file/b.txt"), b"b".to_vec()),
        ]);
        assert!(r.is_err());
        assert_eq!(listing(&d), vec!["file".to_string()]);
        // Dropped without a commit: the temporary files and the created folders go too.
        let st = Staged::write(vec![(d.join("n2/x/c.txt"), b"c".to_vec())]).unwrap();
        assert_eq!(listing(&d).len(), 4, "{:?}", listing(&d));
        drop(st);
        assert_eq!(listing(&d), vec!["file".to_string()]);
    }

    #[test]
    fn a_committed_set_replaces_atomically() {
        let d = scratch("commit");
        fs::write(d.join("a.txt"), b"old").unwrap();
        let st = Staged::write(vec![
            (d.join("a.txt"), b"new".to_vec()),
            (d.join("sub/b.txt"), b"b".to_vec()),
        ])
        .unwrap();
        // Until the commit the old content stays.
        assert_eq!(fs::read(d.join("a.txt")).unwrap(), b"old");
        assert!(!d.join("sub/b.txt").exists());
        let dests: Vec<&Path> = st.destinations().collect();
        assert_eq!(dests.len(), 2);
        st.commit().unwrap();
        assert_eq!(fs::read(d.join("a.txt")).unwrap(), b"new");
        assert_eq!(fs::read(d.join("sub/b.txt")).unwrap(), b"b");
        assert_eq!(listing(&d), vec!["a.txt", "sub", "sub/b.txt"]);
        atomic_write(&d.join("c.txt"), b"c".to_vec()).unwrap();
        assert_eq!(fs::read(d.join("c.txt")).unwrap(), b"c");
    }

    #[test]
    fn paths_are_checked_before_writing() {
        let d = scratch("check");
        fs::create_dir_all(d.join("dir")).unwrap();
        fs::write(d.join("file"), b"x").unwrap();
        let x = d.join("x.ptx");
        let same = d.join("dir/../x.ptx");
        let e = check_paths(&[("-o", &x), ("--meta", &same)]).unwrap_err();
        assert!(e.message.contains("name the same file"), "{e}");
        let e = check_paths(&[("--meta", &d.join("dir"))]).unwrap_err();
        assert!(e.message.contains("directory"), "{e}");
        let e = check_paths(&[("-o", &d.join("file/y"))]).unwrap_err();
        assert!(e.message.contains("not a directory"), "{e}");
        let e = check_paths(&[("-o", Path::new(""))]).unwrap_err();
        assert!(e.message.contains("file name"), "{e}");
        assert!(check_paths(&[("-o", &x), ("--meta", &d.join("new/m.json"))]).is_ok());
        assert_eq!(listing(&d), vec!["dir", "file"]);
    }

    #[cfg(unix)]
    #[test]
    fn replacing_keeps_permissions_and_links_and_is_all_or_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("replace");
        fs::write(d.join("a.kir"), b"old a").unwrap();
        fs::set_permissions(d.join("a.kir"), fs::Permissions::from_mode(0o750)).unwrap();
        fs::write(d.join("b.kir"), b"old b").unwrap();
        std::os::unix::fs::symlink("b.kir", d.join("link.kir")).unwrap();
        fs::create_dir(d.join("dir")).unwrap();
        // A directory among the files: nothing changes.
        let e = stage_replacements(vec![
            (d.join("a.kir"), b"new a".to_vec()),
            (d.join("dir"), b"x".to_vec()),
        ])
        .err()
        .unwrap();
        assert!(e.message.contains("not a regular file"), "{e}");
        let e = stage_replacements(vec![(d.join("none.kir"), b"x".to_vec())])
            .err()
            .unwrap();
        assert!(e.path.ends_with("none.kir"), "{e}");
        assert_eq!(fs::read(d.join("a.kir")).unwrap(), b"old a");
        assert_eq!(listing(&d), vec!["a.kir", "b.kir", "dir", "link.kir"]);
        let st = stage_replacements(vec![
            (d.join("a.kir"), b"new a".to_vec()),
            (d.join("link.kir"), b"new b".to_vec()),
        ])
        .unwrap();
        assert_eq!(fs::read(d.join("a.kir")).unwrap(), b"old a");
        st.commit().unwrap();
        assert_eq!(fs::read(d.join("a.kir")).unwrap(), b"new a");
        let mode = fs::metadata(d.join("a.kir")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o750);
        assert!(fs::symlink_metadata(d.join("link.kir"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(d.join("b.kir")).unwrap(), b"new b");
        assert_eq!(listing(&d), vec!["a.kir", "b.kir", "dir", "link.kir"]);
    }
}
