//! `kirc cache dir|list|clear`: the on-disk cache (docs/cache.md).
//!
//! - `dir` prints the cache directory (`$KIR_CACHE_DIR`, else `$XDG_CACHE_HOME/kir`, else
//!   `$HOME/.cache/kir`), whether or not it exists yet.
//! - `list` prints one line per entry file: its key (first 16 hex digits), kind, module (and
//!   kernel), target, size and age, newest first, then a total; a file that is not a valid
//!   entry of this kir is listed as `invalid` with why (the next store overwrites it).
//! - `clear` removes every entry (and any temporary file a store left) and says how many.
//!
//! - `prebuild` compiles a module and stores its cubins for each target (prebuild.rs).
//!
//! With the cache off (`KIR_CACHE_DIR=off`, or no directory can be chosen) each of them is an
//! error saying so (exit code 2).

use crate::common::{self, CliError};
use kir_compiler::internal::cache::{self, Cache, Location};
use std::process::ExitCode;
use std::time::SystemTime;

/// Arguments of `kirc cache`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

/// What `kirc cache` does.
#[derive(clap::Subcommand)]
enum Action {
    /// Print the cache directory.
    Dir,
    /// List the entries: key, kind, module, target, size, age.
    List,
    /// Remove every entry.
    Clear,
    /// Compile a module and store its cubins, assembled by ptxas for each target (no GPU
    /// needed): what a shipped `kir-prebuilt` directory holds.
    Prebuild(crate::prebuild::Args),
}

/// Runs `kirc cache`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    match a.action {
        Action::Dir => common::out(&format!("{}\n", dir()?.display()))?,
        Action::List => common::out(&list(&Cache::new(dir()?))?)?,
        Action::Clear => {
            let dir = dir()?;
            let n = Cache::new(&dir).clear().map_err(CliError::Plain)?;
            common::out(&format!(
                "removed {n} file{} from {}\n",
                if n == 1 { "" } else { "s" },
                dir.display()
            ))?;
        }
        Action::Prebuild(p) => return crate::prebuild::main(p, dir()?),
    }
    Ok(ExitCode::SUCCESS)
}

/// The cache directory, or an error saying why the cache is off.
fn dir() -> Result<std::path::PathBuf, CliError> {
    match cache::location_from_env() {
        Location::Dir(d) => Ok(d),
        Location::Off(why) => Err(CliError::Plain(format!("the kir cache is off ({why})"))),
    }
}

/// The text of `kirc cache list`.
fn list(c: &Cache) -> Result<String, CliError> {
    let mut files = c.list().map_err(CliError::Plain)?;
    files.sort_by(|a, b| b.modified.cmp(&a.modified).then(a.path.cmp(&b.path)));
    let now = SystemTime::now();
    let mut rows = vec![[
        "KEY".to_string(),
        "KIND".into(),
        "MODULE".into(),
        "TARGET".into(),
        "SIZE".into(),
        "AGE".into(),
    ]];
    let mut invalid = Vec::new();
    let mut total = 0u64;
    for f in &files {
        total += f.bytes;
        let name = f
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let age = f
            .modified
            .and_then(|m| now.duration_since(m).ok())
            .map_or("?".to_string(), |d| age(d.as_secs()));
        match &f.header {
            Ok(h) => rows.push([
                h.key.get(..16).unwrap_or(&h.key).to_string(),
                h.kind.name().to_string(),
                h.name.clone(),
                h.target.clone(),
                size(f.bytes),
                age,
            ]),
            Err(why) => invalid.push(format!(
                "invalid {name} ({}, {age}): {why}\n",
                size(f.bytes)
            )),
        }
    }
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    if rows.len() > 1 {
        for r in &rows {
            let cells: Vec<String> = r
                .iter()
                .zip(widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out += cells.join("  ").trim_end();
            out += "\n";
        }
    }
    for line in invalid {
        out += &line;
    }
    out += &format!(
        "{} entr{}, {} in {}\n",
        files.len(),
        if files.len() == 1 { "y" } else { "ies" },
        size(total),
        c.dir().display()
    );
    Ok(out)
}

/// A size in B, KiB or MiB.
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

/// An age in seconds, minutes, hours or days.
fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::{age, size};

    #[test]
    fn sizes_and_ages_read_well() {
        assert_eq!(size(10), "10 B");
        assert_eq!(size(2048), "2.0 KiB");
        assert_eq!(size(3 << 20), "3.0 MiB");
        assert_eq!(age(5), "5s");
        assert_eq!(age(120), "2m");
        assert_eq!(age(7200), "2h");
        assert_eq!(age(172800), "2d");
    }
}
