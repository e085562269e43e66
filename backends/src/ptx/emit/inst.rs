//! Virtual registers ([`Reg`] of a [`RegClass`]) and the typed PTX instruction: an opcode with its modifiers, an optional predicate guard, typed
//! operands, and the [`Isa`] family it belongs to when that is beyond PTX's first versions.
//! [`PtxInst`]'s one `Display` is the only place instruction text is written.

use super::isa::Isa;
use std::fmt;

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
    /// The register-name prefix (`%r3` has prefix `r`).
    pub(super) fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "p",
            RegClass::B16 => "h",
            RegClass::B32 => "r",
            RegClass::B64 => "rd",
            RegClass::F32 => "f",
        }
    }

    /// The type of the class's `.reg` declaration.
    pub(super) fn decl(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
        }
    }

    /// Every class, in declaration order.
    pub(super) const ALL: [RegClass; 5] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::B64,
        RegClass::F32,
    ];
}

/// A virtual register: displays as `%<prefix><id>`.
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

/// A branch target, made by [`super::Builder::label`] and placed with
/// [`super::Builder::place`]. Displays as its PTX name (`$L_loop_3`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label(pub(super) String);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One operand of a [`PtxInst`].
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A virtual register (`%r3`).
    Reg(Reg),
    /// An integer immediate, in decimal.
    Imm(i64),
    /// An f32 immediate by its bits (`0f3F800000`).
    F32(u32),
    /// A 32-bit mask immediate, in lower-case hex (`0xffffffff`).
    Hex(u32),
    /// A named symbol: a kernel parameter, `kir_smem`, `kir_nf4`.
    Sym(String),
    /// A branch target.
    Label(Label),
    /// A special register (`%tid.x`).
    Special(&'static str),
    /// An offset into the scratch region, whose base is known only when the kernel is finished
    /// ([`super::Builder::finish`] turns it into an immediate).
    Scratch(u32),
    /// The bytes between two consumers' copies of the shared memory a consumer partition
    /// allocates (its arena), known only when the kernel is finished
    /// ([`super::Builder::finish`] turns it into an immediate).
    ArenaStride,
    /// The sink `_` (a result nobody reads).
    Sink,
    /// `_|p`: a sunk result paired with a predicate result (`elect.sync _|p, mask`).
    SinkPred(Reg),
    /// A memory address: `[base]`, or `[base+off]` when an offset is given (even 0).
    Addr(Box<Operand>, Option<i64>),
    /// A tensor-map address with its coordinates: `[map, {c0, c1}]`.
    Tensor(Box<Operand>, Vec<Operand>),
    /// A vector of operands: `{a, b, c, d}`.
    Vec(Vec<Operand>),
}

impl Operand {
    /// The f32 immediate `v` (`0f…` with its 8 hex digits).
    pub fn f32(v: f32) -> Operand {
        Operand::F32(v.to_bits())
    }

    /// `[base]`.
    pub fn addr(base: impl Into<Operand>) -> Operand {
        Operand::Addr(Box::new(base.into()), None)
    }

    /// `[base+off]` (written even when `off` is 0).
    pub fn addr_off(base: impl Into<Operand>, off: impl TryInto<i64>) -> Operand {
        let off = off
            .try_into()
            .unwrap_or_else(|_| panic!("address offset out of range"));
        Operand::Addr(Box::new(base.into()), Some(off))
    }

    /// `{a, b, …}`.
    pub fn vec<T: Into<Operand>>(items: impl IntoIterator<Item = T>) -> Operand {
        Operand::Vec(items.into_iter().map(Into::into).collect())
    }

    /// A named symbol.
    pub fn sym(name: impl Into<String>) -> Operand {
        Operand::Sym(name.into())
    }
}

/// Where the placeholders of a finished kernel land ([`Operand::Scratch`],
/// [`Operand::ArenaStride`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// The byte offset of the scratch region in the kernel's shared memory.
    pub scratch_at: u32,
    /// The bytes between two consumers' arenas (0 in a kernel without several consumers).
    pub arena_stride: u32,
}

fn list(f: &mut fmt::Formatter<'_>, items: &[Operand]) -> fmt::Result {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{x}")?;
    }
    Ok(())
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Reg(r) => write!(f, "{r}"),
            Operand::Imm(v) => write!(f, "{v}"),
            Operand::F32(bits) => write!(f, "0f{bits:08X}"),
            Operand::Hex(v) => write!(f, "0x{v:x}"),
            Operand::Sym(s) => f.write_str(s),
            Operand::Label(l) => write!(f, "{l}"),
            Operand::Special(s) => f.write_str(s),
            Operand::Scratch(n) => write!(f, "KIRSCRATCH{n}"),
            Operand::ArenaStride => f.write_str("KIRARENASTRIDE"),
            Operand::Sink => f.write_str("_"),
            Operand::SinkPred(p) => write!(f, "_|{p}"),
            Operand::Addr(base, None) => write!(f, "[{base}]"),
            Operand::Addr(base, Some(off)) => write!(f, "[{base}+{off}]"),
            Operand::Tensor(map, coords) => {
                write!(f, "[{map}, {{")?;
                list(f, coords)?;
                f.write_str("}]")
            }
            Operand::Vec(items) => {
                f.write_str("{")?;
                list(f, items)?;
                f.write_str("}")
            }
        }
    }
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Operand {
        Operand::Reg(r)
    }
}

impl From<&Reg> for Operand {
    fn from(r: &Reg) -> Operand {
        Operand::Reg(*r)
    }
}

impl From<Label> for Operand {
    fn from(l: Label) -> Operand {
        Operand::Label(l)
    }
}

impl From<&Label> for Operand {
    fn from(l: &Label) -> Operand {
        Operand::Label(l.clone())
    }
}

impl From<&Operand> for Operand {
    fn from(o: &Operand) -> Operand {
        o.clone()
    }
}

impl From<String> for Operand {
    fn from(s: String) -> Operand {
        Operand::Sym(s)
    }
}

impl From<&String> for Operand {
    fn from(s: &String) -> Operand {
        Operand::Sym(s.clone())
    }
}

impl From<&str> for Operand {
    fn from(s: &str) -> Operand {
        Operand::Sym(s.to_string())
    }
}

macro_rules! imm_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Operand {
            fn from(v: $t) -> Operand {
                Operand::Imm(i64::try_from(v).expect("immediate out of range"))
            }
        }
        impl From<&$t> for Operand {
            fn from(v: &$t) -> Operand {
                Operand::Imm(i64::try_from(*v).expect("immediate out of range"))
            }
        }
    )*};
}
imm_from!(i32, i64, u32, u64, usize, u8, u16);

/// One PTX instruction. Built as `PtxInst::new("mul.f32").op(r).op(a).op(b)`; displays as
/// `[@p |@!p ]opcode[.mod…] op, op, …` (no `;`, no indentation: the builder adds them).
#[derive(Clone, Debug, PartialEq)]
pub struct PtxInst {
    guard: Option<(Reg, bool)>,
    opcode: String,
    operands: Vec<Operand>,
    needs: Vec<Isa>,
}

impl PtxInst {
    /// An instruction with opcode `opcode` (which may already carry modifiers: `"ld.global"`).
    pub fn new(opcode: impl Into<String>) -> PtxInst {
        PtxInst {
            guard: None,
            opcode: opcode.into(),
            operands: Vec::new(),
            needs: Vec::new(),
        }
    }

    /// An unsigned division or remainder by a power-of-two immediate above 1 as the shift or mask
    /// it equals (`div.u32 d, a, 2^k` → `shr.u32 d, a, k`; `rem.u32` → `and.b32` with `2^k - 1`);
    /// any other instruction unchanged. ptxas (13.0, sm_90a) expands both into its general
    /// reciprocal sequence (`I2F`, `MUFU.RCP`, `IMAD.HI` and fix-ups), even for an immediate.
    /// The lowering applies it where a division runs per element or per loop iteration (tile
    /// index decomposition, ring indices); the warp layout's once-per-kernel divisions stay as
    /// they are (reducing the lane's `/ 4` there moved ptxas's allocation of the 3-stage 64×64
    /// GEMM ring into a 4-byte spill).
    pub fn strength_reduced(mut self) -> PtxInst {
        let div = match self.opcode.as_str() {
            "div.u32" => true,
            "rem.u32" => false,
            _ => return self,
        };
        let Some(&Operand::Imm(v)) = self.operands.get(2) else {
            return self;
        };
        // A divisor of 1 stays: ptxas folds it itself where that pays, and folding it here moved
        // its allocation of the 255-register four-warp attention tile into a spill.
        if v <= 1 || v > i64::from(u32::MAX) || v.count_ones() != 1 {
            return self;
        }
        if div {
            self.opcode = "shr.u32".into();
            self.operands[2] = Operand::Imm(i64::from(v.trailing_zeros()));
        } else {
            self.opcode = "and.b32".into();
            self.operands[2] = Operand::Imm(v - 1);
        }
        self
    }

    /// Appends the modifier or type suffix `.m` to the opcode.
    pub fn m(mut self, m: impl fmt::Display) -> PtxInst {
        use fmt::Write;
        let _ = write!(self.opcode, ".{m}");
        self
    }

    /// Appends text to the opcode with no `.` (a suffix such as `x2` in `cvt.rn.bf16x2.f32`).
    pub fn suffix(mut self, s: impl fmt::Display) -> PtxInst {
        use fmt::Write;
        let _ = write!(self.opcode, "{s}");
        self
    }

    /// Appends an operand.
    pub fn op(mut self, o: impl Into<Operand>) -> PtxInst {
        self.operands.push(o.into());
        self
    }

    /// Appends the address `[base]`.
    pub fn addr(self, base: impl Into<Operand>) -> PtxInst {
        self.op(Operand::addr(base))
    }

    /// Appends the address `[base+off]`.
    pub fn addr_off(self, base: impl Into<Operand>, off: impl TryInto<i64>) -> PtxInst {
        self.op(Operand::addr_off(base, off))
    }

    /// Appends the vector operand `{a, b, …}`.
    pub fn vec<T: Into<Operand>>(self, items: impl IntoIterator<Item = T>) -> PtxInst {
        self.op(Operand::vec(items))
    }

    /// Guards the instruction with `@p` (or `@!p` when `negate`).
    pub fn guard(mut self, p: Reg, negate: bool) -> PtxInst {
        self.guard = Some((p, negate));
        self
    }

    /// Guards the instruction with `@p` when `p` is given.
    pub fn guard_opt(mut self, p: Option<Reg>) -> PtxInst {
        self.guard = p.map(|p| (p, false));
        self
    }

    /// States the instruction's family: its PTX ISA version and target feature join the
    /// kernel's requirements when the builder takes it.
    pub fn need(mut self, isa: Isa) -> PtxInst {
        self.needs.push(isa);
        self
    }

    /// The families stated with [`PtxInst::need`] (usually none or one).
    pub fn isa(&self) -> &[Isa] {
        &self.needs
    }

    /// The opcode with its modifiers.
    pub fn opcode(&self) -> &str {
        &self.opcode
    }

    /// The operands, in order.
    pub fn operands(&self) -> &[Operand] {
        &self.operands
    }

    /// Replaces every placeholder operand (also inside addresses and vectors) by its value:
    /// a scratch offset by `at.scratch_at + offset`, the arena stride by `at.arena_stride`.
    pub(super) fn resolve(&mut self, at: Placed) {
        fn walk(o: &mut Operand, at: Placed) {
            match o {
                Operand::Scratch(n) => *o = Operand::Imm(i64::from(at.scratch_at + *n)),
                Operand::ArenaStride => *o = Operand::Imm(i64::from(at.arena_stride)),
                Operand::Addr(b, _) => walk(b, at),
                Operand::Tensor(m, cs) => {
                    walk(m, at);
                    cs.iter_mut().for_each(|c| walk(c, at));
                }
                Operand::Vec(items) => items.iter_mut().for_each(|c| walk(c, at)),
                _ => {}
            }
        }
        self.operands.iter_mut().for_each(|o| walk(o, at));
    }
}

impl fmt::Display for PtxInst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((p, negate)) = self.guard {
            write!(f, "@{}{p} ", if negate { "!" } else { "" })?;
        }
        f.write_str(&self.opcode)?;
        if !self.operands.is_empty() {
            f.write_str(" ")?;
            list(f, &self.operands)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::RegClass;
    use super::*;

    #[test]
    fn displays_like_hand_written_ptx() {
        let r = Reg {
            class: RegClass::B32,
            id: 3,
        };
        let p = Reg {
            class: RegClass::Pred,
            id: 1,
        };
        let i = PtxInst::new("ld.shared")
            .m("b32")
            .op(r)
            .addr_off(r, 16)
            .guard(p, true);
        assert_eq!(i.to_string(), "@!%p1 ld.shared.b32 %r3, [%r3+16]");
        let v = PtxInst::new("mov.b32").op(r).vec([r, r]);
        assert_eq!(v.to_string(), "mov.b32 %r3, {%r3, %r3}");
        assert_eq!(PtxInst::new("bar.sync").op(0).to_string(), "bar.sync 0");
        let t = PtxInst::new("x").op(Operand::Tensor(Box::new("m".into()), vec![r.into()]));
        assert_eq!(t.to_string(), "x [m, {%r3}]");
        assert_eq!(Operand::f32(1.0).to_string(), "0f3F800000");
        assert_eq!(Operand::Hex(u32::MAX).to_string(), "0xffffffff");
    }

    #[test]
    fn placeholders_resolve_to_immediates_inside_addresses_and_vectors() {
        let r = Reg {
            class: RegClass::B32,
            id: 2,
        };
        let mut i = PtxInst::new("mad.lo.s32")
            .op(r)
            .op(r)
            .op(Operand::ArenaStride)
            .op(Operand::Addr(Box::new(Operand::Scratch(8)), None))
            .op(Operand::vec([Operand::ArenaStride, Operand::Scratch(0)]));
        assert_eq!(
            i.to_string(),
            "mad.lo.s32 %r2, %r2, KIRARENASTRIDE, [KIRSCRATCH8], {KIRARENASTRIDE, KIRSCRATCH0}"
        );
        i.resolve(Placed {
            scratch_at: 1024,
            arena_stride: 16384,
        });
        assert_eq!(
            i.to_string(),
            "mad.lo.s32 %r2, %r2, 16384, [1032], {16384, 1024}"
        );
    }

    #[test]
    fn unsigned_division_by_a_power_of_two_above_one_becomes_a_shift_or_mask() {
        let (d, a) = (
            Reg {
                class: RegClass::B32,
                id: 1,
            },
            Reg {
                class: RegClass::B32,
                id: 2,
            },
        );
        let red = |m: &str, b: Operand| PtxInst::new(m).op(d).op(a).op(b).strength_reduced();
        assert_eq!(red("div.u32", 64.into()).to_string(), "shr.u32 %r1, %r2, 6");
        assert_eq!(
            red("rem.u32", 64.into()).to_string(),
            "and.b32 %r1, %r2, 63"
        );
        // Left alone: a divisor of 1, one that is not a power of two, a register, signed forms.
        for (m, b) in [
            ("div.u32", Operand::Imm(1)),
            ("rem.u32", Operand::Imm(48)),
            ("div.u32", Operand::Reg(a)),
            ("div.s32", Operand::Imm(64)),
        ] {
            let i = PtxInst::new(m).op(d).op(a).op(b.clone());
            assert_eq!(red(m, b).to_string(), i.to_string());
        }
    }
}
