//! Keeps docs/ir.md true: every op in the op table is documented there.

#[test]
fn every_op_is_documented_in_ir_md() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ir.md"))
        .expect("docs/ir.md");
    for op in kir_ir::Opcode::ALL {
        let name = op.name();
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/ir.md does not document `{name}`"
        );
    }
}
