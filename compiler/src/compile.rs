//! The shorthands of the compile driver: [`compile`] and [`compile_stage`] resolve a
//! [`CompilePlan`] from the common arguments and run [`crate::pipeline::compile`]. What a
//! compilation produces and how it fails live in [`crate::compiled`] and are re-exported here.

use crate::pipeline;
use crate::plan::{CompilePlan, Flags};
use kir_backends::ptx::PtxOptions;
use kir_backends::Target;

pub use crate::compiled::{
    ptx_instructions, specialization_suffix, CompileError, Compiled, Emit, Stage,
    MAX_PTX_INSTRUCTIONS,
};

/// Compiles `src` with `defines` for `target`, emitting `emit`; with `kernel`, only that kernel
/// of the module (as the entry).
pub fn compile(
    src: &str,
    defines: &pipeline::Defines,
    kernel: Option<&str>,
    target: Target,
    emit: Emit,
) -> Result<Compiled, CompileError> {
    compile_stage(
        src,
        defines,
        kernel,
        target,
        emit,
        Stage::Output,
        &PtxOptions::default(),
    )
}

/// Like [`compile`], lowering the module of `stage` with the lowering flags `opts` (a
/// [`CompilePlan`] resolved from them: see [`CompilePlan::resolve`] for what is checked).
pub fn compile_stage(
    src: &str,
    defines: &pipeline::Defines,
    kernel: Option<&str>,
    target: Target,
    emit: Emit,
    stage: Stage,
    opts: &PtxOptions,
) -> Result<Compiled, CompileError> {
    let flags = Flags {
        warps: opts.warps,
        stages: opts.stages,
        warp_specialize: opts.warp_specialize,
        persistent: opts.persistent,
        overlap: opts.overlap,
        swap_operands: None,
        ws_plan: None,
        ws_ptx: None,
        fusion: Default::default(),
        cluster: None,
        stream_k: None,
    };
    let plan = CompilePlan::resolve(src, defines, target, emit, flags)?
        .with_kernel(kernel)
        .with_stage(stage);
    pipeline::compile(src, &plan)
}
