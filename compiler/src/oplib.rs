//! The built-in op library: every `compiler/ops/*.kir` file, embedded at build time.
//!
//! `build.rs` lists the directory, so adding a `.kir` file there is all it takes to add an op.
//! Ops are addressed by file name without the extension (`attention_fwd`).

include!(concat!(env!("OUT_DIR"), "/oplib_gen.rs"));

/// The source of the built-in op `name` (`attention_fwd`), if there is one.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

/// Every built-in op as `(name, source)`, sorted by name.
pub fn builtins() -> impl Iterator<Item = (&'static str, &'static str)> {
    BUILTINS.iter().copied()
}

/// The first line of an op's header comment (`attention_fwd: flash attention forward ...`),
/// without the `//`; empty if the file starts with no comment.
pub fn summary(src: &str) -> &str {
    src.lines()
        .map(str::trim)
        .take_while(|l| l.starts_with("//"))
        .map(|l| l.trim_start_matches('/').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_sorted_and_addressable() {
        let names: Vec<&str> = builtins().map(|(n, _)| n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for (name, src) in builtins() {
            assert_eq!(builtin(name), Some(src));
            assert!(
                src.contains(&format!("module {name}")),
                "{name}.kir should declare `module {name}`"
            );
        }
        assert_eq!(builtin("no_such_op"), None);
    }

    #[test]
    fn summary_is_the_first_comment_line() {
        assert_eq!(
            summary("// gemm: batched matmul.\n//\n// more\nmodule gemm\n"),
            "gemm: batched matmul."
        );
        assert_eq!(summary("//\n// second\nmodule m\n"), "second");
        assert_eq!(summary("module m\n// late\n"), "");
    }
}
