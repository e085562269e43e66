//! Tests of the op table: its columns agree with each other, the pattern macros cover the sets
//! the columns name, keyword enums round-trip, and the effects of the authoring ops (`print` is
//! never pure; `erf`, `pow` and `fma` are float elementwise ops).

use super::*;

/// The effect and elementwise columns agree with the class column.
#[test]
fn columns_agree_with_class() {
    for &op in Opcode::ALL {
        let (class, effect, elem) = (op.class(), op.effect(), op.elementwise());
        assert_eq!(
            class == OpClass::Schedule,
            effect == Effect::Schedule,
            "{}",
            op.name()
        );
        assert_eq!(
            class == OpClass::Debug,
            effect == Effect::Output,
            "{}",
            op.name()
        );
        assert_eq!(
            class == OpClass::Unary,
            matches!(elem, Some(Elementwise::Unary(_))),
            "{}",
            op.name()
        );
        assert_eq!(
            class == OpClass::Binary,
            matches!(elem, Some(Elementwise::Binary(_))),
            "{}",
            op.name()
        );
        assert_eq!(
            op.unary().map(UnaryOp::opcode),
            elem.and_then(|e| matches!(e, Elementwise::Unary(_)).then_some(op))
        );
        assert_eq!(
            op.binary().map(BinaryOp::opcode),
            elem.and_then(|e| matches!(e, Elementwise::Binary(_)).then_some(op))
        );
        if op.is_elementwise() {
            assert!(op.is_pure(), "{}", op.name());
            assert_eq!(op.info().regions, 0);
            assert!(!op.info().tensor);
        }
        // Scheduled-IR ops are never pure and always side-effecting.
        if class == OpClass::Schedule {
            assert!(!op.is_pure() && op.has_side_effects(), "{}", op.name());
        }
    }
    let se: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| o.has_side_effects())
        .collect();
    assert!(
        se.contains(&Opcode::Store)
            && se.contains(&Opcode::AtomicAdd)
            && se.contains(&Opcode::Yield)
    );
    assert!(!Opcode::Load.has_side_effects() && !Opcode::Load.is_pure());
    assert!(!Opcode::For.has_side_effects() && !Opcode::For.is_pure());
}

/// The pattern macros cover exactly the sets the columns name.
#[test]
fn pattern_macros() {
    for &op in Opcode::ALL {
        assert_eq!(matches!(op, unary_ops!()), op.unary().is_some());
        assert_eq!(matches!(op, binary_ops!()), op.binary().is_some());
        assert_eq!(matches!(op, elementwise_ops!()), op.is_elementwise());
        assert_eq!(matches!(op, non_elementwise_ops!()), !op.is_elementwise());
    }
}

/// Names round-trip.
#[test]
fn named_enums() {
    for &p in CmpPred::ALL {
        assert_eq!(CmpPred::from_name(p.name()), Some(p));
    }
    for &k in ReduceKind::ALL {
        assert_eq!(ReduceKind::from_name(k.name()), Some(k));
    }
    assert_eq!(CmpPred::from_name("less"), None);
    assert_eq!(ReduceKind::from_name("prod"), None);
    assert_eq!(CmpPred::ALL.len(), 6);
    assert_eq!(ReduceKind::ALL.len(), 3);
}

/// The authoring ops: `erf` and `pow` take floats only, `fma` is a three-operand elementwise
/// op, and `print` is an effect that nothing may merge, move or remove.
#[test]
fn authoring_ops() {
    assert_eq!(
        Opcode::Erf.elementwise(),
        Some(Elementwise::Unary(ElemTypes::Float))
    );
    assert_eq!(
        Opcode::Pow.elementwise(),
        Some(Elementwise::Binary(ElemTypes::Float))
    );
    assert_eq!(Opcode::Fma.elementwise(), Some(Elementwise::Other));
    assert_eq!(Opcode::Fma.info().operands, Arity::Fixed(3));
    assert!(Opcode::Fma.is_pure() && Opcode::Erf.is_pure() && Opcode::Pow.is_pure());
    let p = Opcode::Print;
    assert!(!p.is_pure() && p.has_side_effects() && !p.is_elementwise());
    assert_eq!(p.info().lead, Some(AttrKind::Str));
    assert_eq!(p.info().operands, Arity::Variadic);
    assert_eq!(p.info().results, Arity::Fixed(0));
    for name in ["erf", "pow", "fma", "print"] {
        assert_eq!(Opcode::from_name(name).map(Opcode::name), Some(name));
    }
}
