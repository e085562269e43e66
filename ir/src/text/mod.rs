//! The text format: lexer, parser (with spans) and canonical printer.

pub mod lexer;
pub mod parser;
pub mod printer;

pub use parser::{parse, parse_expr};
pub use printer::print;
