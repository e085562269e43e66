//! [`Error`]: every failure of the public API, typed. A failure in the source keeps its place
//! ([`Location`]: file, 1-based line and column) and the message `kirc` prints for it, source
//! line and caret included ([`Error::render`] is byte for byte kirc's standard error); a grid
//! that cannot be evaluated says which kernel, axis, formula and dim.

use crate::compiled::CompileError;
use crate::source::Source;
use kir_ir::Diagnostic;
use std::fmt;

/// Where an error is in a source: the name the source goes by (its path, or `<op>.kir` for a
/// built-in op), and the 1-based line and column (in characters).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The path as given, `<op>.kir`, or the name given with [`crate::Kernel::source`].
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    /// `file:line:column`, as compilers print a place.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A grid axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// x.
    X,
    /// y.
    Y,
    /// z.
    Z,
}

impl Axis {
    /// x, y, z in order.
    pub const ALL: [Axis; 3] = [Axis::X, Axis::Y, Axis::Z];
}

impl fmt::Display for Axis {
    /// `x`, `y` or `z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Axis::X => "x",
            Axis::Y => "y",
            Axis::Z => "z",
        })
    }
}

/// Why compiling, or evaluating launch metadata, failed. The `Display` text is the message
/// `kirc` prints without its `error: ` prefix (for [`Error::Source`], the whole located
/// report); [`Error::render`] is kirc's standard error exactly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source could not be read: no such file or built-in op, unreadable, or over the size
    /// limit. The message names the path or op.
    #[error("{0}")]
    Load(String),
    /// Errors in the source: it does not parse, verify or specialize (an unknown or out-of-range
    /// constant), or a backend refuses an op of it.
    #[error("{}", .rendered.trim_end())]
    Source {
        /// The first error's own message (no place, no source line).
        message: String,
        /// Where the first error with a place is; `None` when none has one (an unknown
        /// constant given to [`crate::Kernel::define`]).
        location: Option<Location>,
        /// Every error as kirc prints it: `file:line:col: error: ...`, the source line and a
        /// caret under the span, and notes.
        rendered: String,
    },
    /// A failure with no place in the source: a setting out of its range or not valid for the
    /// target or backend (the message names the `kirc` flag), an unknown kernel name, or a
    /// kernel no candidate schedule fits.
    #[error("{0}")]
    Compile(String),
    /// A grid formula names a dim the caller did not give.
    #[error(
        "kernel `{kernel}`: grid `{expr}` (axis {axis}) needs the dim `{dim}`, which was not given (given: {})",
        if .given.is_empty() { "none".to_string() } else { .given.join(", ") }
    )]
    MissingDim {
        /// The kernel.
        kernel: String,
        /// The axis whose formula needs it.
        axis: Axis,
        /// The formula.
        expr: String,
        /// The dim missing.
        dim: String,
        /// The dims the caller gave.
        given: Vec<String>,
    },
    /// A grid formula overflows 64-bit integers for the dims given.
    #[error("kernel `{kernel}`: grid `{expr}` (axis {axis}) overflows 64-bit integers")]
    GridOverflow {
        /// The kernel.
        kernel: String,
        /// The axis.
        axis: Axis,
        /// The formula.
        expr: String,
    },
    /// A grid axis falls outside CUDA's limits (x in [0, 2^31 − 1], y and z in [0, 65535]).
    #[error("kernel `{kernel}`: grid `{expr}` (axis {axis}) is {value}, outside [0, {max}]")]
    GridOutOfRange {
        /// The kernel.
        kernel: String,
        /// The axis.
        axis: Axis,
        /// The formula.
        expr: String,
        /// Its value.
        value: i64,
        /// The axis's limit.
        max: i64,
    },
    /// A grid formula does not evaluate: a division by zero, or text that is not a formula.
    #[error("kernel `{kernel}`: grid `{expr}` (axis {axis}): {message}")]
    GridExpr {
        /// The kernel.
        kernel: String,
        /// The axis.
        axis: Axis,
        /// The formula.
        expr: String,
        /// Why.
        message: String,
    },
    /// A grid was asked of a module with no kernel.
    #[error("module `{module}` has no kernel to take a grid from")]
    NoKernel {
        /// The module.
        module: String,
    },
}

impl Error {
    /// The text `kirc` writes to standard error for this failure: the located report of
    /// [`Error::Source`], `error: MESSAGE` for the others; every line ends with a newline.
    pub fn render(&self) -> String {
        match self {
            Error::Source { rendered, .. } => rendered.clone(),
            other => format!("error: {other}\n"),
        }
    }

    /// Where the error is in the source, when it has a place.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Source { location, .. } => location.as_ref(),
            Error::Load(_)
            | Error::Compile(_)
            | Error::MissingDim { .. }
            | Error::GridOverflow { .. }
            | Error::GridOutOfRange { .. }
            | Error::GridExpr { .. }
            | Error::NoKernel { .. } => None,
        }
    }

    /// A compile error of `src`, located there when it has a place (what kirc prints for it).
    pub(crate) fn compile(src: &Source, e: CompileError) -> Error {
        match e {
            CompileError::Plain(m) => Error::Compile(m),
            CompileError::Source(diags) => {
                let mut sorted: Vec<&Diagnostic> = diags.0.iter().collect();
                sorted.sort_by_key(|d| d.span.start);
                let located = sorted
                    .iter()
                    .find_map(|d| src.line_col(d.span).map(|lc| (*d, lc)));
                let message = match (located, sorted.first()) {
                    (Some((d, _)), _) => d.message.clone(),
                    (None, Some(d)) => d.message.clone(),
                    (None, None) => String::new(),
                };
                Error::Source {
                    message,
                    location: located.map(|(_, (line, column))| Location {
                        file: src.name.clone(),
                        line,
                        column,
                    }),
                    rendered: src.render(&diags),
                }
            }
        }
    }
}
