//! Keeps README.md's "kirc" section true to the binary: its table of built-in ops is exactly
//! what `kirc ops` lists, in the same order, and its synopsis (the fenced block of that section,
//! the same as docs/cli.md's) names every subcommand of `kirc --help` and every flag of each
//! subcommand's `--help`.

mod common;
use common::{kirc, stderr, stdout};

/// The text of a repository file.
fn read(path: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The text of the section headed `## NAME` of a Markdown document, up to the next `## `.
fn section<'a>(doc: &'a str, name: &str) -> &'a str {
    let head = format!("\n## {name}\n");
    let start = doc
        .find(&head)
        .unwrap_or_else(|| panic!("no section `{name}`"))
        + head.len();
    let rest = &doc[start..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The first fenced block of `text`.
fn fenced(text: &str) -> &str {
    let start = text.find("```\n").expect("a fenced block") + 4;
    let len = text[start..].find("```").expect("the block's end");
    &text[start..start + len]
}

/// The first cells of the Markdown table whose header row is `header`, backticks removed.
fn table_names(text: &str, header: &str) -> Vec<String> {
    let start = text
        .find(header)
        .unwrap_or_else(|| panic!("no table `{header}`"));
    text[start..]
        .lines()
        .skip(2) // the header and the |---| row
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect()
}

/// The names `kirc ops` lists, in order.
fn kirc_ops() -> Vec<String> {
    let o = kirc(&["ops"]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn the_readme_lists_exactly_the_builtin_ops() {
    let readme = read("README.md");
    let listed = table_names(section(&readme, "kirc"), "| op | what it computes |");
    let ops = kirc_ops();
    assert!(ops.len() >= 9, "{ops:?}");
    assert_eq!(listed, ops, "README.md's op table against `kirc ops`");
}

#[test]
fn the_table_reader_sees_a_difference() {
    // The comparison above fails when an op is missing, added or renamed.
    let doc = "## kirc\n| op | what it computes |\n|---|---|\n| `gemm` | x |\n| `swiglu` | y \
               |\n\nafter\n";
    assert_eq!(
        table_names(section(&format!("\n{doc}"), "kirc"), "| op |"),
        ["gemm", "swiglu"]
    );
    assert_ne!(
        table_names(doc, "| op |"),
        ["gemm".to_string(), "rmsnorm_fwd".to_string()]
    );
}

/// The subcommands of `kirc --help`, `help` aside.
fn subcommands() -> Vec<String> {
    let help = stdout(&kirc(&["--help"]));
    let block = &help[help.find("Commands:\n").expect("a command list") + 10..];
    block
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|c| c != "help")
        .collect()
}

/// Each flag of `kirc SUB --help` as the spellings it has (`-o` and `--output`), `--help` and
/// the global `--message-format` aside.
fn flags(sub: &str) -> Vec<Vec<String>> {
    let help = stdout(&kirc(&[sub, "--help"]));
    let mut out = Vec::new();
    for l in help.lines() {
        let t = l.trim_start();
        if !t.starts_with('-') || l.len() - t.len() < 2 || l.len() - t.len() > 6 {
            continue;
        }
        let names: Vec<String> = t
            .split([',', ' ', '=', '['])
            .take_while(|w| w.starts_with('-') || w.is_empty())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect();
        if names
            .iter()
            .any(|n| n == "--help" || n == "--message-format")
        {
            continue;
        }
        out.push(names);
    }
    out
}

#[test]
fn the_synopses_name_every_subcommand_and_flag() {
    let readme = read("README.md");
    let synopsis = fenced(section(&readme, "kirc"));
    let cli = read("docs/cli.md");
    assert_eq!(
        fenced(section(&cli, "Synopsis")),
        synopsis,
        "docs/cli.md's synopsis and README.md's differ"
    );
    let subs = subcommands();
    assert!(subs.len() >= 11, "{subs:?}");
    for sub in &subs {
        assert!(
            synopsis.contains(&format!("kirc {sub} ")),
            "no `kirc {sub}` in the synopsis"
        );
        for names in flags(sub) {
            assert!(
                names.iter().any(|n| synopsis.contains(&format!("{n} "))
                    || synopsis.contains(&format!("{n}]"))
                    || synopsis.contains(&format!("{n}["))
                    || synopsis.contains(&format!("{n}\n"))),
                "`kirc {sub}` flag {names:?} is not in the synopsis"
            );
        }
    }
    for word in ["--message-format", "-arch", "--version"] {
        assert!(synopsis.contains(word), "{word}");
    }
    // The flag reader finds flags: `kirc run` has a dozen and more.
    assert!(flags("run").len() > 12, "{:?}", flags("run"));
    assert!(
        flags("randn").iter().any(|f| f == &["-o", "--output"]),
        "{:?}",
        flags("randn")
    );
}
