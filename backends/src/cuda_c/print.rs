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

#[cfg(test)]
mod tests {
    use super::c_string;
    use crate::target::Target;

    #[test]
    fn c_strings_escape_quotes_backslashes_and_question_marks() {
        assert_eq!(
            c_string("a \"b\" \\ c??=\n"),
            "a \\\"b\\\" \\\\ c\\?\\?=\\n"
        );
        assert_eq!(c_string("100%% done"), "100%% done");
    }

    /// A scalar and a rank-2 tile: thread 0 prints, every coordinate is declared, the values
    /// pass as `double` and `long long`, and a barrier follows.
    #[test]
    fn prints_are_thread_0_loops_with_a_barrier() {
        let src = "module m\n\
            kernel @k(x: in tensor<f32>[2, 3]) grid [1, 1, 1] {\n\
            \x20 %t = load x[0, 0] : tile<2x3xf32>\n\
            \x20 %n = const 7 : i64\n\
            \x20 print \"t \\\"q\\\" 5%\" %t, %n\n\
            }\n";
        let m = kir_ir::text::parse(src).expect("parse");
        kir_ir::verifier::verify(&m).expect("verify");
        let cu = crate::cuda_c::lower(&m, Target::Sm80, "")
            .expect("lower")
            .source;
        let at = cu.find("if (threadIdx.x == 0) {").expect("thread 0 prints");
        let body = &cu[at..];
        for want in [
            "for (int e = 0; e < 6; ++e) {",
            "const int e0 = e / 3, e1 = e % 3;",
            "printf(\"(%d, %d, %d) t \\\"q\\\" 5%%#0[%d, %d]: %.9g\\n\", (int)blockIdx.x, \
             (int)blockIdx.y, (int)blockIdx.z, e0, e1, (double)",
            "printf(\"(%d, %d, %d) t \\\"q\\\" 5%%#1: %lld\\n\", (int)blockIdx.x, \
             (int)blockIdx.y, (int)blockIdx.z, (long long)",
            "__syncthreads();",
        ] {
            assert!(body.contains(want), "no `{want}` in:\n{body}");
        }
    }
}
