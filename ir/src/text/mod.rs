//! The text format: lexer, parser (with spans) and canonical printer.

pub mod lexer;
pub mod parser;
pub mod printer;

pub use parser::parse;
pub use printer::print;
