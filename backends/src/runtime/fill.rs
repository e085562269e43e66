//! Random device inputs for `kirc bench`: a small hand-written PTX module with one grid-stride
//! kernel per dtype that fills a buffer from a hash of (element index, seed), so large inputs
//! never cross the PCIe bus.
//!
//! Values: floats uniform in [-1, 1) (24 random bits, rounded to nearest even to f16/bf16), u8
//! uniform bytes, i32/i64/i1 0 or 1. The same seed gives the same values.

use super::driver::{launch, CuModule, DevMem, Gpu, KernelArg};
use super::RuntimeError;
use cudarc::driver::sys::CUfunction;
use kir_ir::Dtype;

/// Threads per block of the fill kernels.
const THREADS: u32 = 256;
/// Most blocks of one fill launch (the kernels loop over the rest).
const MAX_BLOCKS: u64 = 1 << 16;

/// The kernel body's head: `%rd3` = element index, `%rd5` = grid stride, `%r7` = hash.
const HEAD: &str = r#"
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<10>;
  .reg .f32 %f<3>;
  .reg .b16 %h<2>;
  ld.param.u64 %rd1, [ptr];
  ld.param.u64 %rd2, [n];
  ld.param.u32 %r1, [seed];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mul.wide.u32 %rd3, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  add.u64 %rd3, %rd3, %rd4;
  mov.u32 %r5, %nctaid.x;
  mul.wide.u32 %rd5, %r5, %r3;
LOOP:
  setp.ge.u64 %p1, %rd3, %rd2;
  @%p1 bra DONE;
  cvt.u32.u64 %r6, %rd3;
  shr.u64 %rd6, %rd3, 32;
  cvt.u32.u64 %r10, %rd6;
  mul.lo.u32 %r7, %r6, 0x9E3779B9;
  xor.b32 %r7, %r7, %r1;
  add.u32 %r7, %r7, %r10;
  shr.u32 %r8, %r7, 16;
  xor.b32 %r7, %r7, %r8;
  mul.lo.u32 %r7, %r7, 0x85EBCA6B;
  shr.u32 %r8, %r7, 13;
  xor.b32 %r7, %r7, %r8;
  mul.lo.u32 %r7, %r7, 0xC2B2AE35;
  shr.u32 %r8, %r7, 16;
  xor.b32 %r7, %r7, %r8;
  shr.u32 %r9, %r7, 8;
  cvt.rn.f32.u32 %f1, %r9;
  fma.rn.f32 %f1, %f1, 0f34000000, 0fBF800000;
  and.b32 %r11, %r7, 1;
"#;

/// The kernel body's tail: advance and loop.
const TAIL: &str = r#"
  add.u64 %rd3, %rd3, %rd5;
  bra LOOP;
DONE:
  ret;
"#;

/// Every dtype with its kernel name, element width and store code.
fn kernels() -> [(Dtype, &'static str, u32, &'static str); 7] {
    [
        (Dtype::F32, "kir_fill_f32", 4, "st.global.f32 [%rd7], %f1;"),
        (
            Dtype::F16,
            "kir_fill_f16",
            2,
            "cvt.rn.f16.f32 %h1, %f1;\n  st.global.b16 [%rd7], %h1;",
        ),
        (
            Dtype::Bf16,
            "kir_fill_bf16",
            2,
            "cvt.rn.bf16.f32 %h1, %f1;\n  st.global.b16 [%rd7], %h1;",
        ),
        (Dtype::U8, "kir_fill_u8", 1, "st.global.u8 [%rd7], %r7;"),
        (Dtype::I1, "kir_fill_i1", 1, "st.global.u8 [%rd7], %r11;"),
        (Dtype::I32, "kir_fill_i32", 4, "st.global.u32 [%rd7], %r11;"),
        (
            Dtype::I64,
            "kir_fill_i64",
            8,
            "cvt.u64.u32 %rd8, %r11;\n  st.global.u64 [%rd7], %rd8;",
        ),
    ]
}

/// The PTX of every fill kernel (PTX 7.0 for sm_80: it runs on every kir target).
pub(crate) fn ptx() -> String {
    let mut s = String::from(".version 7.0\n.target sm_80\n.address_size 64\n");
    for (_, name, width, store) in kernels() {
        s += &format!(
            "\n.visible .entry {name}(.param .u64 ptr, .param .u64 n, .param .u32 seed)\n{{{HEAD}  \
             mad.lo.u64 %rd7, %rd3, {width}, %rd1;\n  {store}{TAIL}}}\n"
        );
    }
    s
}

/// The loaded fill kernels.
pub(crate) struct Filler {
    _module: CuModule,
    funcs: Vec<(Dtype, CUfunction)>,
}

// SAFETY: function handles of a loaded module (see `CuModule`), never mutated.
unsafe impl Send for Filler {}
// SAFETY: as above.
unsafe impl Sync for Filler {}

impl Filler {
    /// Loads the fill kernels on `gpu`.
    pub(crate) fn load(gpu: &Gpu) -> Result<Filler, RuntimeError> {
        let module = CuModule::load(gpu, &ptx())?;
        let mut funcs = Vec::new();
        for (d, name, _, _) in kernels() {
            funcs.push((d, module.function(name, 0)?));
        }
        Ok(Filler {
            _module: module,
            funcs,
        })
    }

    /// Fills the `n` elements of `mem` (dtype `d`) from `seed`.
    pub(crate) fn fill(
        &self,
        mem: &DevMem,
        d: Dtype,
        n: usize,
        seed: u32,
    ) -> Result<(), RuntimeError> {
        let Some(&(_, f)) = self.funcs.iter().find(|(fd, _)| *fd == d) else {
            return Err(RuntimeError::Cuda(format!("no fill kernel for {d}")));
        };
        if n == 0 {
            return Ok(());
        }
        let blocks = (n as u64).div_ceil(THREADS as u64).min(MAX_BLOCKS) as u32;
        let mut args = [
            KernelArg::Word(mem.ptr),
            KernelArg::Word(n as u64),
            KernelArg::Word(seed as u64),
        ];
        launch(
            f,
            [blocks, 1, 1],
            [THREADS, 1, 1],
            0,
            &mut args,
            std::ptr::null_mut(),
            "random input fill",
        )
    }
}
