//! `kirc tune` and `kirc ops NAME` from the command line: the space `--list` prints without a
//! GPU, the errors (exit code 2, located in the source where they have a place), and the
//! clear error of a kirc without the CUDA runtime or without a driver.

mod common;

use common::{kirc, s, scratch, stderr, stdout};

#[test]
fn list_prints_the_space_and_the_check_shapes() {
    let o = kirc(&[
        "tune",
        "gemm",
        "--list",
        "--target",
        "sm_80",
        "-D",
        "BLOCK_M=64",
        "-D",
        "BLOCK_N=64",
        "-D",
        "BLOCK_K=32",
        "--warps",
        "4",
        "--shape",
        "a=1x4096x4096",
        "--shape",
        "b=1x4096x1000",
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.starts_with("gemm.kir: 9 candidates on sm_80 (GROUP_M {1, 8, 16} × stages {2, 3, 4})"),
        "{out}"
    );
    assert!(out.contains("check shape: a=1x160x160"), "{out}");
    assert!(out.contains("check shape: b=1x160x168"), "{out}");
    assert!(out.contains("\nGROUP_M=8 warps=4 stages=4\n"), "{out}");
    // sm_90a searches warp specialization too.
    let o = kirc(&[
        "tune",
        "gemm",
        "--list",
        "--target",
        "sm_90a",
        "-D",
        "BLOCK_M=64",
        "-D",
        "BLOCK_N=64",
        "-D",
        "BLOCK_K=32",
        "--warps",
        "4",
    ]);
    // GROUP_M {1, 8, 16} × stages {2, 3, 4} × warp-specialize {off, on} × swap-operands {off, on}.
    assert!(
        stdout(&o).contains("36 candidates"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

#[test]
fn tune_errors_exit_2_with_a_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["tune", "gemm", "--list"], "--list needs --target"),
        (
            &["tune", "nosuchop", "--list", "--target", "sm_80"],
            "nosuchop",
        ),
        (&["tune", "gemm", "--list", "--target", "sm_81"], "sm_81"),
        (
            &[
                "tune", "gemm", "--list", "--target", "sm_80", "-D", "NOPE=1",
            ],
            "unknown constant `NOPE`",
        ),
        (
            &[
                "tune", "gemm", "--list", "--target", "sm_80", "--limit", "10",
            ],
            "more than the limit of 10",
        ),
        (
            &["tune", "gemm", "--target", "sm_80"],
            "needs the timed shapes",
        ),
        (
            &["tune", "gemm", "--target", "sm_80", "--shape", "a=1x64x64"],
            "input tensor(s) b",
        ),
        (
            &[
                "tune",
                "gemm",
                "--list",
                "--target",
                "sm_80",
                "--warp-specialize",
                "on",
            ],
            "--warp-specialize on",
        ),
    ];
    for (args, want) in cases {
        let o = kirc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    // A clap usage error (a malformed shape) is exit code 2 too.
    let o = kirc(&["tune", "gemm", "--shape", "a=4by4"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_bad_tune_set_is_located_with_a_caret() {
    let d = scratch("tune", "bad_set");
    let f = d.join("bad.kir");
    std::fs::write(
        &f,
        "module bad\n\nconst A: int = 4 tune {4, 8, 4} where A >= 1\n\nkernel @k(x: in tensor<f32>[N]) grid [1, 1, 1] {\n  yield\n}\n",
    )
    .expect("write");
    let o = kirc(&["tune", s(&f), "--list", "--target", "sm_80"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("bad.kir:3:30: error: tune value 4 of constant `A` is listed more than once"),
        "{e}"
    );
    assert!(e.contains("^"), "{e}");
    let o = kirc(&["check", s(&f)]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn timing_without_the_runtime_or_a_driver_is_a_clear_error() {
    let o = kirc(&[
        "tune",
        "gemm",
        "--target",
        "sm_80",
        "-D",
        "BLOCK_M=64",
        "-D",
        "BLOCK_N=64",
        "-D",
        "BLOCK_K=32",
        "--shape",
        "a=1x256x256",
        "--shape",
        "b=1x256x256",
    ]);
    let e = stderr(&o);
    if o.status.success() {
        // A GPU is present (feature `cuda`): the table and the winner were printed.
        assert!(stdout(&o).contains("winner: -D GROUP_M="), "{}", stdout(&o));
        return;
    }
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("CUDA") || e.contains("driver"), "{e}");
}

#[test]
fn ops_name_lists_constants_with_their_tune_sets() {
    let o = kirc(&["ops", "gemm"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.contains(
            "  BLOCK_M: int = 64  tune {32, 64, 128, 256}  where BLOCK_M >= 1 && BLOCK_M <= 256\n"
        ),
        "{out}"
    );
    assert!(out.contains("  DTYPE: {f32, f16, bf16} = bf16\n"), "{out}");
    let o = kirc(&["ops", "nosuch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no built-in op `nosuch`"));
}
