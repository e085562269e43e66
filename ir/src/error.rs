//! Located diagnostics shared by the parser, the verifier and specialization.

use crate::span::Span;

/// One error with the span it points at.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    /// Extra explanation shown under the caret.
    pub note: Option<String>,
}

impl Diagnostic {
    /// An error at `span`.
    pub fn new(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            note: None,
        }
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.note = Some(note.into());
        self
    }

    /// `file:line:col: error: message` followed by the source line and a caret.
    pub fn render(&self, file: &str, src: &str) -> String {
        let (line, col) = self.span.line_col(src);
        let text = src.lines().nth(line - 1).unwrap_or("");
        let width = (self.span.end.saturating_sub(self.span.start) as usize)
            .clamp(1, text.chars().count().saturating_sub(col - 1).max(1));
        let mut s = format!("{file}:{line}:{col}: error: {}\n", self.message);
        s += &format!(
            "{:>5} | {text}\n      | {}{}\n",
            line,
            " ".repeat(col - 1),
            "^".repeat(width)
        );
        if let Some(n) = &self.note {
            s += &format!("      = note: {n}\n");
        }
        s
    }
}

/// Every error found in one pass over the input (the verifier does not stop at the first).
#[derive(Clone, Debug, Default, PartialEq, thiserror::Error)]
#[error("{} error(s), first: {}", .0.len(), .0.first().map(|d| d.message.as_str()).unwrap_or(""))]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Renders all, in source order.
    pub fn render(&self, file: &str, src: &str) -> String {
        let mut v: Vec<&Diagnostic> = self.0.iter().collect();
        v.sort_by_key(|d| d.span.start);
        v.iter().map(|d| d.render(file, src)).collect()
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics(vec![d])
    }
}
