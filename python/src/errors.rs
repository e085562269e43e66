//! Failures and the Python exceptions they become. Work done without the GIL returns a
//! [`Failure`] (plain data, `Send`); [`Failure::into_py`] turns it into an instance of one of the
//! exception classes of `kir/_errors.py`: `CompileError`, `RunError`, or `InputError` (also a
//! `ValueError`) for an argument kir cannot take.
//!
//! The text of an exception (`str(e)`) is the message `kirc` prints for the same failure: for a
//! located error `file:line:col: error: ...`, the source line and a caret (rendered by
//! `kir_compiler::internal::source`, the code kirc uses); for one with no place, the message alone
//! (kirc prefixes it with `error: `). The attributes `message`, `file`, `line`, `column` and
//! (for `InputError`) `argument` carry the parts.

use kir_backends::interp::InterpError;
use kir_compiler::internal::compile::CompileError;
use kir_compiler::internal::source::Source;
use kir_ir::{Diagnostic, Diagnostics};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Which exception class a failure raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `kir.CompileError`: parsing, verification, specialization, the compile plan or a backend.
    Compile,
    /// `kir.RunError`: the interpreter stopped while running the kernels.
    Run,
    /// `kir.InputError` (a `ValueError`): an argument kir cannot take.
    Input,
}

impl Class {
    /// The class's name in `kir._errors`.
    fn name(self) -> &'static str {
        match self {
            Class::Compile => "CompileError",
            Class::Run => "RunError",
            Class::Input => "InputError",
        }
    }
}

/// A failure, ready to become a Python exception.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub class: Class,
    /// The whole text (`str(e)`), without a trailing newline.
    pub text: String,
    /// The first error's own message (no location, no source line).
    pub message: String,
    /// Where the first located error is: the source's name, its line and column (1-based).
    pub place: Option<(String, usize, usize)>,
    /// For an [`Class::Input`] failure, the argument at fault when one is known: an input's
    /// name, a constant's, or `source`, `target`, `emit`, `kernel`.
    pub argument: Option<String>,
}

impl Failure {
    /// A failure with no place in a source.
    pub fn plain(class: Class, message: impl Into<String>) -> Failure {
        let message = message.into();
        Failure {
            class,
            text: message.clone(),
            message,
            place: None,
            argument: None,
        }
    }

    /// An [`Class::Input`] failure naming `argument`.
    pub fn input(argument: &str, message: impl Into<String>) -> Failure {
        Failure::plain(Class::Input, message).for_argument(Some(argument.to_string()))
    }

    /// The errors `diags` located in `src`.
    pub fn located(class: Class, src: &Source, diags: &Diagnostics) -> Failure {
        let mut sorted: Vec<&Diagnostic> = diags.0.iter().collect();
        sorted.sort_by_key(|d| d.span.start);
        let first_located = sorted
            .iter()
            .find_map(|d| src.line_col(d.span).map(|lc| (d, lc)));
        let (message, place) = match first_located {
            Some((d, (line, col))) => (d.message.clone(), Some((src.name.clone(), line, col))),
            None => (
                sorted.first().map_or(String::new(), |d| d.message.clone()),
                None,
            ),
        };
        let text = src.render(diags);
        // kirc's `error: ` before an error with no place is the command line's; the exception
        // class says it here.
        let text = match (diags.0.len(), place.is_none()) {
            (1, true) => text.strip_prefix("error: ").unwrap_or(&text).to_string(),
            _ => text,
        };
        Failure {
            class,
            text: text.trim_end().to_string(),
            message,
            place,
            argument: None,
        }
    }

    /// A compile error as kirc reports it: located in `src`, or plain.
    pub fn compile(src: &Source, e: CompileError) -> Failure {
        match e {
            CompileError::Source(d) => Failure::located(Class::Compile, src, &d),
            CompileError::Plain(m) => Failure::plain(Class::Compile, m),
        }
    }

    /// An interpreter error of `class` as `kirc run` reports it: the kernel named when the
    /// message does not name it, located at the op, param or expression at fault.
    pub fn interp(class: Class, src: &Source, e: &InterpError) -> Failure {
        let message = match &e.kernel {
            Some(k) if !e.message.contains(k.as_str()) => format!("in kernel @{k}: {}", e.message),
            _ => e.message.clone(),
        };
        match e.span {
            Some(span) => Failure::located(class, src, &Diagnostic::new(span, message).into()),
            None => Failure::plain(class, message),
        }
    }

    /// The same failure naming `argument`.
    pub fn for_argument(mut self, argument: Option<String>) -> Failure {
        self.argument = argument;
        self
    }

    /// The Python exception: an instance of the class of `kir._errors` built with the text
    /// and the parts as keyword arguments.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        match self.build(py) {
            Ok(e) => e,
            // `kir._errors` cannot be imported (the package is broken): say so, with the text.
            Err(import) => PyErr::new::<pyo3::exceptions::PyImportError, _>(format!(
                "kir: cannot raise kir.{}: {import}\n{}",
                self.class.name(),
                self.text
            )),
        }
    }

    fn build(&self, py: Python<'_>) -> PyResult<PyErr> {
        let class = py.import("kir._errors")?.getattr(self.class.name())?;
        let kw = PyDict::new(py);
        kw.set_item("message", &self.message)?;
        if let Some((file, line, col)) = &self.place {
            kw.set_item("file", file)?;
            kw.set_item("line", line)?;
            kw.set_item("column", col)?;
        }
        if self.class == Class::Input {
            kw.set_item("argument", &self.argument)?;
        }
        let e = class.call((&self.text,), Some(&kw))?;
        Ok(PyErr::from_value(e))
    }
}

/// `Result<T, Failure>` as a Python result.
pub fn py_result<T>(py: Python<'_>, r: Result<T, Failure>) -> PyResult<T> {
    r.map_err(|f| f.into_py(py))
}
