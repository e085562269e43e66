//! Every `.kir` file in the repository round-trips: parse(print(m)) == m, printing is
//! idempotent, and the same holds for each op specialized with its defaults.

use kir_ir::text::{parse, print};
use kir_tests::{kir_files, stem};

#[test]
fn every_file_round_trips() {
    let files = kir_files();
    assert!(
        files.len() >= 4,
        "expected the op library and test inputs, found {files:?}"
    );
    let mut parsed = 0;
    for f in &files {
        let src = std::fs::read_to_string(f).expect("read");
        let name = f.display().to_string();
        let m = match parse(&src) {
            Ok(m) => m,
            // Parse-error cases are expected not to parse; everything else must.
            Err(e) if stem(f).starts_with("parse_") => {
                assert!(!e.0.is_empty());
                continue;
            }
            Err(e) => panic!("{}", e.render(&name, &src)),
        };
        parsed += 1;
        let text = print(&m);
        let m2 = parse(&text)
            .unwrap_or_else(|e| panic!("reparse of {name}:\n{}", e.render("printed", &text)));
        assert!(m == m2, "{name}: parse(print(m)) != m");
        assert_eq!(text, print(&m2), "{name}: printing is not idempotent");
    }
    assert!(parsed >= 4);
}

#[test]
fn specialized_ops_round_trip() {
    for (name, src) in kir_compiler::internal::oplib::builtins() {
        let (_, spec) = kir_compiler::internal::pipeline::frontend(src, &[])
            .unwrap_or_else(|e| panic!("{}", e.render(name, src)));
        let text = print(&spec);
        let again = parse(&text).unwrap_or_else(|e| panic!("{}", e.render(name, &text)));
        assert!(
            spec == again,
            "{name}: specialized module does not round-trip"
        );
        assert_eq!(text, print(&again));
    }
}
