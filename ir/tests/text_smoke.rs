//! Smoke test: an op file parses, prints, reparses equal, and printing is idempotent.
#[test]
fn rmsnorm_roundtrip() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../compiler/ops/rmsnorm_fwd.kir"
    ))
    .unwrap();
    let m = kir_ir::text::parse(&src)
        .unwrap_or_else(|e| panic!("{}", e.render("rmsnorm_fwd.kir", &src)));
    let t = kir_ir::text::print(&m);
    println!("{t}");
    let m2 = kir_ir::text::parse(&t).unwrap_or_else(|e| panic!("{}", e.render("printed", &t)));
    assert_eq!(m, m2);
    assert_eq!(t, kir_ir::text::print(&m2));
}
