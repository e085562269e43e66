//! A PTX text builder: typed virtual registers, labels, and instruction lines, and the
//! [`Requirements`] of the instructions emitted (each family beyond PTX's first versions states
//! its [`Isa`] with [`Builder::need`]; nothing is inferred from the text).

use super::isa::{Isa, Requirements};
use kir_ir::Span;
use std::fmt::Write;

/// A PTX register class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegClass {
    /// `.pred`
    Pred,
    /// `.b16` (f16/bf16 bits)
    B16,
    /// `.b32` (s32/u32/b32 values)
    B32,
    /// `.b64` (addresses, s64)
    B64,
    /// `.f32`
    F32,
}

impl RegClass {
    fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "p",
            RegClass::B16 => "h",
            RegClass::B32 => "r",
            RegClass::B64 => "rd",
            RegClass::F32 => "f",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
        }
    }

    const ALL: [RegClass; 5] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::B64,
        RegClass::F32,
    ];
}

/// A virtual register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    pub class: RegClass,
    pub id: u32,
}

impl std::fmt::Display for Reg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "%{}{}", self.class.prefix(), self.id)
    }
}

/// Accumulates the body of one `.entry`.
#[derive(Default)]
pub struct Builder {
    counts: [u32; 5],
    body: String,
    prologue: String,
    labels: u32,
    indent: usize,
    /// What the emitted instructions need: PTX ISA version and target features.
    isa: Requirements,
    /// The op being lowered (recorded with each feature, for errors).
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

    /// A fresh label name.
    pub fn label(&mut self, hint: &str) -> String {
        self.labels += 1;
        format!("$L_{hint}_{}", self.labels)
    }

    /// Records that the next instruction (or group of instructions) is of family `isa`: its PTX
    /// ISA version and target feature join the kernel's [`Requirements`]. Returns the builder
    /// so the statement sits on the instruction: `b.need(Isa::LDMATRIX).ins(…)`.
    pub fn need(&mut self, isa: Isa) -> &mut Builder {
        self.isa.note(isa, self.site);
        self
    }

    /// Names the op whose instructions follow (recorded with the features they need).
    pub fn at(&mut self, span: Span) {
        self.site = Some(span);
    }

    /// What the instructions emitted so far need.
    pub fn requirements(&self) -> &Requirements {
        &self.isa
    }

    /// Appends one instruction (a `;` is added).
    pub fn ins(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(
            self.body,
            "{}{};",
            "\t".repeat(self.indent + 1),
            text.as_ref()
        );
    }

    /// Appends a predicated instruction: `@p ins` (or `@!p` when `negate`).
    pub fn ins_if(&mut self, p: Reg, negate: bool, text: impl AsRef<str>) {
        let bang = if negate { "!" } else { "" };
        let _ = writeln!(
            self.body,
            "{}@{bang}{p} {};",
            "\t".repeat(self.indent + 1),
            text.as_ref()
        );
    }

    /// `ins_if` when `p` is given, else `ins`.
    pub fn ins_if_opt(&mut self, p: Option<Reg>, text: impl AsRef<str>) {
        match p {
            Some(p) => self.ins_if(p, false, text),
            None => self.ins(text),
        }
    }

    /// Places a label.
    pub fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// Appends a comment line.
    pub fn comment(&mut self, text: impl AsRef<str>) {
        for line in text.as_ref().lines() {
            let _ = writeln!(self.body, "{}// {line}", "\t".repeat(self.indent + 1));
        }
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

    /// Register declarations, then the prologue, then the body (see [`Builder::requirements`]
    /// for what they need).
    pub fn finish(self) -> String {
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
        s + &self.prologue + &self.body
    }

    // ---- small helpers -----------------------------------------------------------------
    /// A b32 register holding an immediate.
    pub fn imm32(&mut self, v: i64) -> Reg {
        let r = self.reg(RegClass::B32);
        self.ins(format!("mov.b32 {r}, {}", v as i32));
        r
    }

    /// An f32 register holding `v`.
    pub fn immf(&mut self, v: f32) -> Reg {
        let r = self.reg(RegClass::F32);
        self.ins(format!("mov.b32 {r}, 0f{:08X}", v.to_bits()));
        r
    }
}

/// The PTX literal for an f32 value (`0f3F800000`).
pub fn f32_lit(v: f32) -> String {
    format!("0f{:08X}", v.to_bits())
}
