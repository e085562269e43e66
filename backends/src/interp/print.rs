//! The `print` op in the interpreter: the lines it writes (docs/ir.md, "print") and where they go.
//!
//! Each program instance collects its lines in order (the partitions of a `warp_specialize`
//! append to their instance's buffer as the scheduler runs them); the runner writes the buffers of
//! one launch to the caller's sink in program order (x fastest, then y, then z), whether the
//! instances ran in parallel or not, so the output is deterministic. A line is
//! `(x, y, z) LABEL: V` for a scalar and `(x, y, z) LABEL[i, j]: V` for each element of a tile, in
//! row-major order; LABEL is the prefix, followed by `#k` when the op prints several values (k is
//! the value's position). Floats print as C's `%.9g` does (which every f32 value round-trips
//! through), integers in decimal, i1 as 0 or 1: the GPU backends write the same text with `printf`
//! (`crate::printf` has what they share).

use super::exec::{Flow, Instance};
use super::tile::{Data, Tile};
use super::InterpError;
use crate::printf::{fmt_g9, label};
use kir_ir::{Attr, OpData};
use std::fmt::Write;

/// Element `i` of `t` as `print` writes it.
fn element(t: &Tile, i: usize) -> String {
    match &t.data {
        Data::F(v) => fmt_g9(v[i] as f64),
        Data::I(v) => v[i].to_string(),
        Data::B(v) => (v[i] as u8).to_string(),
    }
}

/// The lines one `print` writes for program `pid` (each ending in a newline).
pub(crate) fn lines(pid: [i64; 3], prefix: &str, values: &[&Tile]) -> String {
    let [x, y, z] = pid;
    let mut out = String::new();
    if values.is_empty() {
        let _ = writeln!(out, "({x}, {y}, {z}) {prefix}");
    }
    for (k, t) in values.iter().enumerate() {
        let label = label(prefix, k, values.len());
        for i in 0..t.len() {
            let mut rest = i;
            let mut idx = vec![0; t.shape.len()];
            for (d, &n) in t.shape.iter().enumerate().rev() {
                idx[d] = rest % n.max(1);
                rest /= n.max(1);
            }
            let at = if idx.is_empty() {
                String::new()
            } else {
                let shown: Vec<String> = idx.iter().map(usize::to_string).collect();
                format!("[{}]", shown.join(", "))
            };
            let _ = writeln!(out, "({x}, {y}, {z}) {label}{at}: {}", element(t, i));
        }
    }
    out
}

impl Instance<'_> {
    /// What `print` ops wrote in this program instance so far (taken: the buffer is left empty).
    pub(crate) fn take_output(&mut self) -> String {
        self.out
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    /// `print "PREFIX" %v…`: appends its lines to this program instance's output.
    pub(super) fn exec_print(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let Some(Attr::Str(prefix)) = &o.lead else {
            return Err(self.fail(o.span, "`print` needs a prefix string"));
        };
        let mut vals = Vec::with_capacity(o.operands.len());
        for i in 0..o.operands.len() {
            vals.push(self.operand(o, i)?);
        }
        let refs: Vec<&Tile> = vals.iter().map(|t| t.as_ref()).collect();
        let text = lines(self.pid, prefix, &refs);
        match self.out.lock() {
            Ok(mut out) => out.push_str(&text),
            Err(_) => return Err(self.fail(o.span, "the output of `print` is unavailable")),
        }
        Ok(Flow::Next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::tile::Scalar;
    use kir_ir::Dtype;

    #[test]
    fn lines_of_scalars_and_tiles() {
        let s = Tile::scalar(Dtype::I32, Scalar::I(-7));
        let t = Tile {
            dtype: Dtype::F32,
            shape: vec![2, 2],
            data: Data::F(vec![0.5, 1.0, -3.0, 2.5e10]),
        };
        let b = Tile::scalar(Dtype::I1, Scalar::B(true));
        assert_eq!(lines([1, 0, 2], "n", &[&s]), "(1, 0, 2) n: -7\n");
        assert_eq!(
            lines([0, 0, 0], "acc", &[&t, &b]),
            "(0, 0, 0) acc#0[0, 0]: 0.5\n(0, 0, 0) acc#0[0, 1]: 1\n(0, 0, 0) acc#0[1, 0]: -3\n\
             (0, 0, 0) acc#0[1, 1]: 2.49999995e+10\n(0, 0, 0) acc#1: 1\n"
        );
        assert_eq!(lines([3, 4, 5], "here", &[]), "(3, 4, 5) here\n");
    }
}
