//! `print` in CUDA C: thread 0 of the block walks each value's elements in row-major order and
//! `printf`s one line per element with the interpreter's text (`crate::printf`), so a block's
//! lines come in the interpreter's order (blocks print in any order). A barrier follows, since
//! the tiles it reads live in shared memory that later statements may reuse.

use super::kernel::Emitter;
use super::plan::shape_dtype;
use super::CudaError;
use crate::printf::{label, line_format, print_arg, PrintArg};
use kir_ir::{Attr, OpData};

/// `s` as the body of a C string literal (printable ASCII in, so only `\`, `"` and `?` need
/// escaping; `?` to keep `??` from forming a trigraph under older dialects).
fn c_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '?' => out.push_str("\\?"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl Emitter<'_> {
    /// `print "PREFIX" %v…` (see the module doc).
    pub(crate) fn print(&mut self, op: &OpData) -> Result<(), CudaError> {
        let Some(Attr::Str(prefix)) = &op.lead else {
            return Err(self.err_op(op, "needs a prefix string"));
        };
        let pid = "(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z";
        self.line("if (threadIdx.x == 0) {");
        self.depth += 1;
        if op.operands.is_empty() {
            let f = c_string(&line_format(prefix, 0, None));
            self.line(format!("printf(\"{f}\", {pid});"));
        }
        let n = op.operands.len();
        for (k, &v) in op.operands.iter().enumerate() {
            let (shape, d) = shape_dtype(self.k, v)?;
            let arg = print_arg(d);
            let f = c_string(&line_format(&label(prefix, k, n), shape.len(), Some(arg)));
            let pass = |x: String| match arg {
                PrintArg::F64 => format!("(double){x}"),
                PrintArg::I32 => format!("(int){x}"),
                PrintArg::I64 => format!("(long long){x}"),
            };
            if shape.is_empty() {
                let x = self.read(v, &[], None)?;
                self.line(format!("printf(\"{f}\", {pid}, {});", pass(x)));
                continue;
            }
            // Every coordinate is printed, so each is declared (a size-1 dim's is 0).
            let coords: Vec<String> = if shape.len() == 1 {
                vec!["e".into()]
            } else {
                (0..shape.len()).map(|d| format!("e{d}")).collect()
            };
            let x = self.read(v, &coords, Some("e"))?;
            let total: usize = shape.iter().product();
            self.line(format!("for (int e = 0; e < {total}; ++e) {{"));
            self.depth += 1;
            if let Some(c) = Self::coord_decl(&shape, &coords.join(" ")) {
                self.line(c);
            }
            self.line(format!(
                "printf(\"{f}\", {pid}, {}, {});",
                coords.join(", "),
                pass(x)
            ));
            self.depth -= 1;
            self.line("}");
        }
        self.depth -= 1;
        self.line("}");
        self.sync();
        Ok(())
    }
}
