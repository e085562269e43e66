//! A module's source and how its errors read: [`Source::load`] takes a path or the name of a
//! built-in op (a path that exists wins; `attention_fwd` and `attention_fwd.kir` both name the
//! op), and [`render`] writes located errors as `file:line:col: error: ...` with the source line
//! and a caret under the span. `kirc` and the Python package both go through here, so a
//! framework's error reads exactly as the command line's.

use crate::oplib;
use kir_ir::{Diagnostic, Diagnostics, Span};
use std::path::Path;

/// A module's source text and the name its errors show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The path as given, or `<name>.kir` for a built-in op.
    pub name: String,
    pub text: String,
}

impl Source {
    /// Reads `file` (at most [`crate::limits::MAX_SOURCE_BYTES`]); if no such file exists, takes
    /// the built-in op of that name. The error is the whole message: the name, then why.
    pub fn load(file: &str) -> Result<Source, String> {
        let path = Path::new(file);
        if path.exists() {
            let text = crate::limits::read_source(path).map_err(|e| format!("{file}: {e}"))?;
            return Ok(Source {
                name: file.to_string(),
                text,
            });
        }
        let op = file.strip_suffix(".kir").unwrap_or(file);
        match oplib::builtin(op) {
            Some(text) => Ok(Source {
                name: format!("{op}.kir"),
                text: text.to_string(),
            }),
            None => {
                let names: Vec<&str> = oplib::builtins().map(|(n, _)| n).collect();
                Err(format!(
                    "{file}: no such file, and no built-in op of that name{} (built-in ops: {})",
                    crate::suggest::did_you_mean(op, names.iter().copied()),
                    names.join(", ")
                ))
            }
        }
    }

    /// Every error of `diags` as [`render`] writes it for this source.
    pub fn render(&self, diags: &Diagnostics) -> String {
        render(&self.name, &self.text, diags)
    }

    /// The 1-based line and column (in characters) where `span` starts, or `None` for an error
    /// with no place in the source (the empty span at 0, e.g. an unknown `-D` name).
    pub fn line_col(&self, span: Span) -> Option<(usize, usize)> {
        if span.start == 0 && span.end == 0 {
            return None;
        }
        Some(on_char_boundaries(span, &self.text).line_col(&self.text))
    }
}

/// The text of `diags` in source order: `file:line:col: error: ...`, the source line and a caret
/// for each located error, `error: ...` for one with no place (the empty span at 0), and each
/// note as `      = note: ...` under its error. Every line ends with a newline.
pub fn render(file: &str, src: &str, diags: &Diagnostics) -> String {
    let mut ds: Vec<&Diagnostic> = diags.0.iter().collect();
    ds.sort_by_key(|d| d.span.start);
    let mut out = String::new();
    for d in ds {
        if d.span.start == 0 && d.span.end == 0 {
            out += &format!("error: {}\n", d.message);
            if let Some(n) = &d.note {
                out += &format!("      = note: {n}\n");
            }
        } else {
            let mut d = d.clone();
            d.span = on_char_boundaries(d.span, src);
            out += &d.render(file, src);
        }
    }
    out
}

/// `span` moved onto char boundaries of `src`, within it (rendering slices the text there).
fn on_char_boundaries(span: Span, src: &str) -> Span {
    let fix = |mut i: usize| {
        i = i.min(src.len());
        while !src.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    Span::new(fix(span.start as usize), fix(span.end as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_builtin_loads_by_name_with_or_without_the_extension() {
        let a = Source::load("rmsnorm_fwd").unwrap();
        let b = Source::load("rmsnorm_fwd.kir").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.name, "rmsnorm_fwd.kir");
        assert_eq!(a.text, oplib::builtin("rmsnorm_fwd").unwrap());
    }

    #[test]
    fn an_unknown_name_lists_the_builtins() {
        let e = Source::load("no_such_op").unwrap_err();
        assert!(e.starts_with("no_such_op: no such file"), "{e}");
        assert!(e.contains("attention_fwd"), "{e}");
    }

    #[test]
    fn located_errors_show_the_line_and_a_caret() {
        let src = Source {
            name: "m.kir".into(),
            text: "module m\nconst X: int = 1 where X > 2\n".into(),
        };
        let start = src.text.find("X > 2").unwrap();
        let d = Diagnostic::new(Span::new(start, start + 5), "bad X");
        assert_eq!(src.line_col(d.span), Some((2, 24)));
        let text = src.render(&d.into());
        assert_eq!(
            text,
            "m.kir:2:24: error: bad X\n    2 | const X: int = 1 where X > 2\n      |                        ^^^^^\n"
        );
    }

    #[test]
    fn an_error_with_no_place_has_no_location() {
        let src = Source {
            name: "m.kir".into(),
            text: "module m\n".into(),
        };
        let d = Diagnostic::new(Span::default(), "-D Y: unknown constant `Y`").with_note("none");
        assert_eq!(src.line_col(d.span), None);
        assert_eq!(
            src.render(&d.into()),
            "error: -D Y: unknown constant `Y`\n      = note: none\n"
        );
    }

    #[test]
    fn spans_inside_a_character_or_past_the_end_do_not_panic() {
        let src = Source {
            name: "u.kir".into(),
            text: "module é\n".into(),
        };
        // Byte 8 is inside `é`; byte 99 is past the end.
        for span in [Span::new(8, 9), Span::new(99, 120)] {
            assert!(src.line_col(span).is_some());
            let text = src.render(&Diagnostic::new(span, "here").into());
            assert!(text.starts_with("u.kir:"), "{text}");
        }
    }
}
