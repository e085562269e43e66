//! Lexer: turns source text into tokens with byte spans. Never panics; bad characters are errors.

use crate::error::Diagnostic;
use crate::span::Span;

/// A token kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident(String),
    /// `%name`: an SSA value.
    Value(String),
    /// `@name`: a kernel.
    At(String),
    Int(i64),
    Float(f64),
    /// `"text"`: a string of printable ASCII, unescaped (`\"` is `"`, `\\` is `\`).
    Str(String),
    /// The `x` between tile dims when glued to an integer (`64x128xbf16`).
    X,
    /// `// text` (the text after the slashes, trailing space trimmed).
    Comment(String),
    /// Punctuation and operators: `( ) [ ] { } < > , : = + - * / % ! == != <= >= && ||`.
    Punct(&'static str),
    Eof,
}

impl Tok {
    /// A short human description for error messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Value(s) => format!("`%{s}`"),
            Tok::At(s) => format!("`@{s}`"),
            Tok::Int(i) => format!("`{i}`"),
            Tok::Float(x) => format!("`{x}`"),
            Tok::Str(s) => format!("`{}`", quote(s)),
            Tok::X => "`x`".into(),
            Tok::Comment(_) => "a comment".into(),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "end of file".into(),
        }
    }
}

/// A token and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
    /// True if whitespace or a comment separates it from the previous token.
    pub spaced: bool,
}

const PUNCT2: [&str; 6] = ["==", "!=", "<=", ">=", "&&", "||"];
const PUNCT1: [&str; 17] = [
    "(", ")", "[", "]", "{", "}", "<", ">", ",", ":", "=", "+", "-", "*", "/", "%", "!",
];

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Splits `src` into tokens, ending with `Eof`.
pub fn lex(src: &str) -> Result<Vec<Token>, Diagnostic> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut spaced = true;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            spaced = true;
            continue;
        }
        let start = i;
        let tok = if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            let text = src[start + 2..i].trim_end();
            Tok::Comment(text.strip_prefix(' ').unwrap_or(text).to_string())
        } else if c == b'"' {
            lex_string(src, &mut i)?
        } else if c.is_ascii_digit() {
            lex_number(src, &mut i)?
        } else if c == b'x'
            && !spaced
            && matches!(
                out.last(),
                Some(Token {
                    tok: Tok::Int(_),
                    ..
                })
            )
        {
            i += 1;
            Tok::X
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && is_ident_char(b[i]) {
                i += 1;
            }
            match &src[start..i] {
                "inf" => Tok::Float(f64::INFINITY),
                "nan" => Tok::Float(f64::NAN),
                s => Tok::Ident(s.to_string()),
            }
        } else if (c == b'%' || c == b'@') && b.get(i + 1).is_some_and(|&d| is_ident_char(d)) {
            i += 1;
            while i < b.len() && is_ident_char(b[i]) {
                i += 1;
            }
            let name = src[start + 1..i].to_string();
            if c == b'%' {
                Tok::Value(name)
            } else {
                Tok::At(name)
            }
        } else if let Some(p) = PUNCT2.iter().find(|p| src[i..].starts_with(**p)) {
            i += 2;
            Tok::Punct(p)
        } else if let Some(p) = PUNCT1.iter().find(|p| p.as_bytes()[0] == c) {
            i += 1;
            Tok::Punct(p)
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(Diagnostic::new(
                Span::new(i, i + ch.len_utf8()),
                format!("unexpected character `{}`", ch.escape_default()),
            ));
        };
        out.push(Token {
            tok,
            span: Span::new(start, i),
            spaced,
        });
        spaced = false;
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span::new(b.len(), b.len()),
        spaced: true,
    });
    Ok(out)
}

/// `s` as a string literal: in double quotes, with `"` and `\` escaped by a backslash (the
/// printer's form, which [`lex`] reads back).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        if ch == '"' || ch == '\\' {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('"');
    out
}

/// A string literal starting at the `"` at `*i`: printable ASCII up to the closing `"`, with
/// the escapes `\"` and `\\`. A line break, another escape or a character outside printable
/// ASCII is an error (strings name things in messages; they are not data).
fn lex_string(src: &str, i: &mut usize) -> Result<Tok, Diagnostic> {
    let b = src.as_bytes();
    let start = *i;
    *i += 1;
    let mut text = String::new();
    loop {
        let Some(&c) = b.get(*i) else {
            return Err(Diagnostic::new(
                Span::new(start, *i),
                "unterminated string (a string ends with `\"` on the same line)",
            ));
        };
        match c {
            b'"' => {
                *i += 1;
                return Ok(Tok::Str(text));
            }
            b'\\' => match b.get(*i + 1) {
                Some(&e @ (b'"' | b'\\')) => {
                    text.push(e as char);
                    *i += 2;
                }
                _ => {
                    let next = src[*i + 1..].chars().next().map_or(0, char::len_utf8);
                    return Err(Diagnostic::new(
                        Span::new(*i, *i + 1 + next),
                        "unknown escape in a string (only `\\\"` and `\\\\` are escapes)",
                    ));
                }
            },
            b' '..=b'~' => {
                text.push(c as char);
                *i += 1;
            }
            b'\n' | b'\r' => {
                return Err(Diagnostic::new(
                    Span::new(start, *i),
                    "unterminated string (a string ends with `\"` on the same line)",
                ))
            }
            _ => {
                let ch = src[*i..].chars().next().unwrap_or('?');
                return Err(Diagnostic::new(
                    Span::new(*i, *i + ch.len_utf8()),
                    format!(
                        "character `{}` in a string: strings hold printable ASCII only",
                        ch.escape_default()
                    ),
                ));
            }
        }
    }
}

fn lex_number(src: &str, i: &mut usize) -> Result<Tok, Diagnostic> {
    let b = src.as_bytes();
    let start = *i;
    while *i < b.len() && b[*i].is_ascii_digit() {
        *i += 1;
    }
    let mut float = false;
    if *i + 1 < b.len() && b[*i] == b'.' && b[*i + 1].is_ascii_digit() {
        float = true;
        *i += 1;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
    }
    if *i < b.len() && (b[*i] == b'e' || b[*i] == b'E') {
        let mut j = *i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            float = true;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            *i = j;
        }
    }
    let text = &src[start..*i];
    let span = Span::new(start, *i);
    if float {
        match text.parse::<f64>() {
            // Out of range is an error, as for integers, not a silent infinity.
            Ok(x) if x.is_infinite() => Err(Diagnostic::new(
                span,
                format!(
                    "float literal `{text}` is out of range (the largest finite value is {:e}; \
                     write `inf` for infinity)",
                    f64::MAX
                ),
            )),
            Ok(x) => Ok(Tok::Float(x)),
            Err(_) => Err(Diagnostic::new(span, format!("bad float literal `{text}`"))),
        }
    } else {
        text.parse::<i64>()
            .map(Tok::Int)
            .map_err(|_| Diagnostic::new(span, format!("integer literal `{text}` is too large")))
    }
}
