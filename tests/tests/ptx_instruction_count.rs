//! The PTX backend counts each kernel's instructions from its instruction list
//! (`PtxModule::instructions`); the count equals what `compile::ptx_instructions` reads back from
//! the text, for the op library's kernels on every target.

use kir_backends::ptx::{compile_module_with, PtxOptions};
use kir_backends::Target;
use kir_compiler::internal::compile::{compile_stage, ptx_instructions, Emit, Stage};

#[test]
fn counted_instructions_match_the_text() {
    for target in [Target::Sm80, Target::Sm90a, Target::Sm100a, Target::Sm120a] {
        for op in ["attention_fwd", "gemm", "layernorm_bwd", "swiglu"] {
            let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
            let opts = PtxOptions::default();
            let c = compile_stage(src, &[], None, target, Emit::Ptx, Stage::Output, &opts)
                .unwrap_or_else(|e| panic!("{op} on {target}: {e}"));
            let m = compile_module_with(&c.module, target, "", &opts)
                .unwrap_or_else(|e| panic!("{op} on {target}: {e}"));
            let parsed: Vec<usize> = ptx_instructions(&m.text).into_iter().map(|p| p.1).collect();
            assert_eq!(m.instructions, parsed, "{op} on {target}");
            assert_eq!(m.instructions.len(), m.kernels.len(), "{op} on {target}");
            assert!(m.instructions.iter().all(|&n| n > 1), "{op} on {target}");
        }
    }
}
