//! The builder of one `.entry` body: fresh registers and labels, and the lines of the body (typed
//! instructions, labels, comments) in two sections, the prologue and the body. The kernel's
//! [`Requirements`] and its instruction count are read from the instructions it holds.

use super::inst::{Label, Operand, Placed, PtxInst, Reg, RegClass};
use super::isa::{Isa, Requirements};
use kir_ir::Span;
use std::fmt::Write;

/// One line of a body.
#[derive(Clone, Debug)]
enum Line {
    /// An instruction, its indentation depth, and the op being lowered when it was emitted.
    Inst(usize, PtxInst, Option<Span>),
    /// A label placed here.
    Label(Label),
    /// A comment line at an indentation depth.
    Comment(usize, String),
    /// A directive or brace line (not an instruction) at an indentation depth.
    Directive(usize, &'static str),
}

/// Accumulates the body of one `.entry`.
#[derive(Default)]
pub struct Builder {
    counts: [u32; 5],
    body: Vec<Line>,
    prologue: Vec<Line>,
    labels: u32,
    indent: usize,
    /// Families stated with [`Builder::need`] that the next instruction takes.
    pending: Vec<Isa>,
    /// The op being lowered (recorded with each instruction, for errors).
    site: Option<Span>,
}

impl Builder {
    /// A fresh register of `class`.
    pub fn reg(&mut self, class: RegClass) -> Reg {
        let i = RegClass::ALL.iter().position(|c| *c == class).unwrap_or(0);
        let id = self.counts[i];
        self.counts[i] += 1;
        Reg { class, id }
    }

    /// A fresh label (`$L_<hint>_<n>`).
    pub fn label(&mut self, hint: &str) -> Label {
        self.labels += 1;
        Label(format!("$L_{hint}_{}", self.labels))
    }

    /// States that the next instruction is of family `isa` (for a family stated on a group of
    /// instructions: the group's first one carries it). Returns the builder so the statement
    /// sits on the instruction: `b.need(Isa::LDMATRIX).ins(…)`; the same as
    /// [`PtxInst::need`] on that instruction.
    pub fn need(&mut self, isa: Isa) -> &mut Builder {
        self.pending.push(isa);
        self
    }

    /// Names the op whose instructions follow (recorded with the features they need).
    pub fn at(&mut self, span: Span) {
        self.site = Some(span);
    }

    /// What the instructions emitted so far need: the families they carry, prologue first,
    /// then the body in order (and any family stated with [`Builder::need`] that no
    /// instruction has taken yet).
    pub fn requirements(&self) -> Requirements {
        let mut r = Requirements::default();
        for line in self.prologue.iter().chain(&self.body) {
            if let Line::Inst(_, i, at) = line {
                for isa in i.isa() {
                    r.note(*isa, *at);
                }
            }
        }
        for isa in &self.pending {
            r.note(*isa, self.site);
        }
        r
    }

    /// The number of instructions emitted so far (both sections).
    pub fn instructions(&self) -> usize {
        self.prologue
            .iter()
            .chain(&self.body)
            .filter(|l| matches!(l, Line::Inst(..)))
            .count()
    }

    /// Appends one instruction; it takes the families stated with [`Builder::need`] since the
    /// last instruction.
    pub fn ins(&mut self, mut inst: PtxInst) {
        for isa in std::mem::take(&mut self.pending) {
            inst = inst.need(isa);
        }
        self.body.push(Line::Inst(self.indent + 1, inst, self.site));
    }

    /// Appends `inst` guarded by `@p` (or `@!p` when `negate`).
    pub fn ins_if(&mut self, p: Reg, negate: bool, inst: PtxInst) {
        self.ins(inst.guard(p, negate));
    }

    /// `ins_if` when `p` is given, else `ins`.
    pub fn ins_if_opt(&mut self, p: Option<Reg>, inst: PtxInst) {
        self.ins(inst.guard_opt(p));
    }

    /// Places a label.
    pub fn place(&mut self, label: &Label) {
        self.body.push(Line::Label(label.clone()));
    }

    /// Appends a comment (one line per line of `text`).
    pub fn comment(&mut self, text: impl AsRef<str>) {
        for line in text.as_ref().lines() {
            self.body
                .push(Line::Comment(self.indent + 1, line.to_string()));
        }
    }

    /// Calls the CUDA runtime's `vprintf(fmt, args)` (both generic addresses; the module
    /// declares it, see `lower/print.rs`) in a scope of its own that declares the call's
    /// parameters, as the PTX ABI wants.
    pub fn call_vprintf(&mut self, fmt: Reg, args: Reg) {
        let d = self.indent + 1;
        self.body.push(Line::Directive(d, "{"));
        self.body.push(Line::Directive(d, ".param .b64 param0;"));
        self.ins(
            PtxInst::new("st.param.b64")
                .op(Operand::addr("param0"))
                .op(fmt),
        );
        self.body.push(Line::Directive(d, ".param .b64 param1;"));
        self.ins(
            PtxInst::new("st.param.b64")
                .op(Operand::addr("param1"))
                .op(args),
        );
        self.body.push(Line::Directive(d, ".param .b32 retval0;"));
        self.ins(
            PtxInst::new("call.uni")
                .op("(retval0)")
                .op("vprintf")
                .op("(param0, param1)"),
        );
        self.body.push(Line::Directive(d, "}"));
    }

    /// Runs `f` with instructions going to the prologue (code at the kernel's start, before any
    /// control flow), e.g. thread coordinates that every later op may reuse.
    pub fn in_prologue<T>(&mut self, f: impl FnOnce(&mut Builder) -> T) -> T {
        std::mem::swap(&mut self.body, &mut self.prologue);
        let saved = self.indent;
        self.indent = 0;
        let r = f(self);
        self.indent = saved;
        std::mem::swap(&mut self.body, &mut self.prologue);
        r
    }

    /// Swaps the body and prologue sections (so a caller can emit into the prologue across
    /// several calls); call again to swap back.
    pub fn swap_sections(&mut self) {
        std::mem::swap(&mut self.body, &mut self.prologue);
    }

    /// Register declarations, then the prologue, then the body, with every placeholder
    /// resolved: each scratch offset ([`Operand::Scratch`]) placed at `at.scratch_at`, the arena
    /// stride ([`Operand::ArenaStride`]) `at.arena_stride`.
    pub fn finish(self, at: Placed) -> String {
        let mut s = String::new();
        for (i, c) in RegClass::ALL.iter().enumerate() {
            if self.counts[i] > 0 {
                let _ = writeln!(
                    s,
                    "\t.reg {} %{}<{}>;",
                    c.decl(),
                    c.prefix(),
                    self.counts[i]
                );
            }
        }
        for line in self.prologue.into_iter().chain(self.body) {
            match line {
                Line::Inst(depth, mut inst, _) => {
                    inst.resolve(at);
                    let _ = writeln!(s, "{}{inst};", "\t".repeat(depth));
                }
                Line::Label(l) => {
                    let _ = writeln!(s, "{l}:");
                }
                Line::Comment(depth, text) => {
                    let _ = writeln!(s, "{}// {text}", "\t".repeat(depth));
                }
                Line::Directive(depth, text) => {
                    let _ = writeln!(s, "{}{text}", "\t".repeat(depth));
                }
            }
        }
        s
    }

    // ---- small helpers -----------------------------------------------------------------
    /// A b32 register holding an immediate.
    pub fn imm32(&mut self, v: i64) -> Reg {
        let r = self.reg(RegClass::B32);
        self.ins(PtxInst::new("mov.b32").op(r).op(v as i32));
        r
    }

    /// An f32 register holding `v`.
    pub fn immf(&mut self, v: f32) -> Reg {
        let r = self.reg(RegClass::F32);
        self.ins(PtxInst::new("mov.b32").op(r).op(Operand::f32(v)));
        r
    }
}

/// The PTX literal for an f32 value (`0f3F800000`), as an operand.
pub fn f32_lit(v: f32) -> Operand {
    Operand::f32(v)
}
