//! Virtual registers: the five PTX register classes and the numbered registers of each.

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
