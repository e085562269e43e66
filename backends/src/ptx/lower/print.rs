//! `print` in PTX: each element's line is one call of the CUDA runtime's
//! `vprintf(format, args)`, made by the thread that holds the element, with the interpreter's
//! text (`crate::printf`). A scalar is printed by thread 0 (of the partition, in a
//! warp-specialized kernel, as a scalar store is); a register tile by the owner of each slot
//! (the quad leader where a layout replicates a row over a quad); a shared-memory tile through
//! the blocked layout. The arguments go through a `.local` buffer (the program id and the
//! indices as `int`, the value as `double`, `int` or `long long`, each at its natural
//! alignment); the format strings are `.global` bytes named after the kernel ([`declarations`]),
//! which the module's head declares with one `vprintf` prototype ([`VPRINTF`]), before every
//! entry: a module cut into one module per entry (the runtime JIT-compiles a program's kernels
//! apart) keeps them. Lines of one block come in any order, as CUDA's `printf` gives them.

use super::ctx::{dtype, Ctx, PrintState, Val};
use super::PtxError;
use crate::printf::{label, line_format, print_arg, PrintArg};
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{rows_cols, Layout};
use kir_ir::{Attr, Dtype, OpData};

/// The `.local` argument buffer of `vprintf`.
const ARGS: &str = "kir_print_args";

/// The symbol of format string `i` of the kernel whose symbol is `symbol`.
fn format_symbol(symbol: &str, i: usize) -> String {
    format!("kir_fmt_{symbol}_{i}")
}

/// The prototype of the CUDA runtime's `vprintf`, declared once in the head of a module whose
/// kernels print.
pub(crate) const VPRINTF: &str =
    ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 fmt, .param .b64 args);\n";

/// What a kernel's prints add: the module-scope declarations of its format strings (for the
/// module's head, after [`VPRINTF`]) and the argument buffer inside its entry; both empty for a
/// kernel without `print`.
pub(super) fn declarations(p: &PrintState) -> (String, String) {
    if p.formats.is_empty() {
        return (String::new(), String::new());
    }
    let mut decls = String::new();
    for (i, f) in p.formats.iter().enumerate() {
        let bytes: Vec<String> = f.bytes().chain([0]).map(|b| b.to_string()).collect();
        decls += &format!(
            ".global .align 1 .b8 {}[{}] = {{{}}};\n",
            format_symbol(&p.symbol, i),
            bytes.len(),
            bytes.join(", ")
        );
    }
    let locals = format!("\t.local .align 8 .b8 {ARGS}[{}];\n", p.args_bytes.max(8));
    (decls, locals)
}

/// The generic address of format string `f` (declared once per kernel).
fn format_addr(c: &mut Ctx, f: String) -> Reg {
    let i = match c.prints.formats.iter().position(|g| *g == f) {
        Some(i) => i,
        None => {
            c.prints.formats.push(f);
            c.prints.formats.len() - 1
        }
    };
    let (raw, r) = (c.b.reg(RegClass::B64), c.b.reg(RegClass::B64));
    let sym = format_symbol(&c.prints.symbol, i);
    c.b.ins(PtxInst::new("mov.u64").op(raw).op(Operand::sym(sym)));
    c.b.ins(PtxInst::new("cvta.global.u64").op(r).op(raw));
    r
}

/// The generic address of the argument buffer, computed once in the prologue.
fn args_addr(c: &mut Ctx) -> Reg {
    if let Some(r) = c.prints.args {
        return r;
    }
    let (raw, r) = (c.b.reg(RegClass::B64), c.b.reg(RegClass::B64));
    c.b.in_prologue(|b| {
        b.ins(PtxInst::new("mov.u64").op(raw).op(Operand::sym(ARGS)));
        b.ins(PtxInst::new("cvta.local.u64").op(r).op(raw));
    });
    c.prints.args = Some(r);
    r
}

/// One line: where `guard` holds (every thread when `None`), the program id, the indices `idx`
/// and the value `val` (a register of dtype `d`, passed as `arg`) with format string `f`.
fn line(c: &mut Ctx, f: &str, idx: &[Reg], val: Option<(Reg, Dtype)>, guard: Option<Reg>) {
    let skip = c.b.label("print");
    if let Some(p) = guard {
        c.b.ins_if(p, true, PtxInst::new("bra").op(&skip));
    }
    let mut off = 0u32;
    for axis in ["%ctaid.x", "%ctaid.y", "%ctaid.z"] {
        let r = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("mov.u32").op(r).op(Operand::Special(axis)));
        c.b.ins(
            PtxInst::new("st.local.b32")
                .op(Operand::addr_off(ARGS, off))
                .op(r),
        );
        off += 4;
    }
    for &i in idx {
        c.b.ins(
            PtxInst::new("st.local.b32")
                .op(Operand::addr_off(ARGS, off))
                .op(i),
        );
        off += 4;
    }
    if let Some((r, d)) = val {
        match print_arg(d) {
            PrintArg::F64 => {
                off = off.div_ceil(8) * 8;
                let w = c.b.reg(RegClass::B64);
                c.b.ins(PtxInst::new("cvt.f64.f32").op(w).op(r));
                c.b.ins(
                    PtxInst::new("st.local.b64")
                        .op(Operand::addr_off(ARGS, off))
                        .op(w),
                );
                off += 8;
            }
            PrintArg::I64 => {
                off = off.div_ceil(8) * 8;
                c.b.ins(
                    PtxInst::new("st.local.b64")
                        .op(Operand::addr_off(ARGS, off))
                        .op(r),
                );
                off += 8;
            }
            PrintArg::I32 => {
                let w = if d == Dtype::I1 {
                    let w = c.b.reg(RegClass::B32);
                    c.b.ins(PtxInst::new("selp.b32").op(w).op(1).op(0).op(r));
                    w
                } else {
                    r
                };
                c.b.ins(
                    PtxInst::new("st.local.b32")
                        .op(Operand::addr_off(ARGS, off))
                        .op(w),
                );
                off += 4;
            }
        }
    }
    c.prints.args_bytes = c.prints.args_bytes.max(off);
    let fmt = format_addr(c, f.to_string());
    let args = args_addr(c);
    c.b.call_vprintf(fmt, args);
    c.b.place(&skip);
}

/// `tid == 0`: the thread that prints scalars.
fn first_thread(c: &mut Ctx) -> Reg {
    let p = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(c.thread.tid).op(0));
    p
}

/// `p ∧ q` for optional predicates.
fn both(c: &mut Ctx, p: Option<Reg>, q: Option<Reg>) -> Option<Reg> {
    match (p, q) {
        (Some(p), Some(q)) => {
            let r = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("and.pred").op(r).op(p).op(q));
            Some(r)
        }
        (p, q) => p.or(q),
    }
}

/// Lowers `print "PREFIX" %v…` (see the module doc).
pub(super) fn lower_print(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let Some(Attr::Str(prefix)) = &op.lead else {
        return Err(PtxError::at(sp, "`print` needs a prefix string"));
    };
    if op.operands.is_empty() {
        let first = first_thread(c);
        line(c, &line_format(prefix, 0, None), &[], None, Some(first));
    }
    let n = op.operands.len();
    for (k, &v) in op.operands.iter().enumerate() {
        let d = dtype(c, v);
        let lab = label(prefix, k, n);
        let val = match c.val(v, sp)? {
            s @ Val::Shared { .. } => super::convert::convert(c, &s, Layout::Blocked, sp)?,
            val => val,
        };
        match val {
            Val::Scalar(r) => {
                let f = line_format(&lab, 0, Some(print_arg(d)));
                let first = first_thread(c);
                line(c, &f, &[], Some((r, d)), Some(first));
            }
            Val::Tile {
                layout,
                shape,
                regs,
                ..
            } => {
                let f = line_format(&lab, shape.len(), Some(print_arg(d)));
                let owner = (layout == Layout::RowMma && rows_cols(&shape).1 == 1)
                    .then_some(c.thread.quad_leader);
                let coords = c.coords(layout, &shape);
                for (i, sc) in coords.iter().enumerate() {
                    if !super::convert::slot_live(c, layout, &shape, i) {
                        continue;
                    }
                    let guard = both(c, sc.valid, owner);
                    line(c, &f, &sc.idx, Some((regs[i], d)), guard);
                }
            }
            Val::Shared { .. } => {
                return Err(PtxError::at(sp, "internal: a shared tile after conversion"))
            }
        }
    }
    Ok(())
}
