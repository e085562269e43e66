//! The launch ABI shared by every GPU backend (PTX and CUDA C): the order and types of a
//! kernel's parameters. docs/backends.md documents it for outside launchers.
//!
//! A kernel's parameters are, in this order:
//! 1. one 64-bit global pointer per tensor param, in declaration order;
//! 2. one value per scalar param, in declaration order (f32 as `.f32`, f16/bf16 as their 16 bits,
//!    i32 as `.s32`, i64 as `.s64`, u8 and i1 as `.u8`);
//! 3. one `.s32` per symbolic dim, in order of first appearance in the tensor params' dims;
//! 4. one 128-byte, 64-byte aligned tensor map (`CUtensorMap`, `.param .align 64 .b8 [128]`) per
//!    distinct (tensor param, box) that the kernel's `async_copy … bar` ops copy with TMA, in
//!    order of first appearance (only scheduled IR for targets with TMA has them; the launcher
//!    encodes each from the tensor's buffer and dims, docs/backends.md "Tensor maps"; for a
//!    warp-specialized kernel, 128 zero bytes when the tensor's alignment rules out a map, and
//!    the kernel then copies without it).
//!
//! Tensors are addressed with their declared strides (C order when none are declared), computed
//! in the kernel from the dims, so no stride is passed.

use kir_ir::{Dtype, ExprKind, Kernel, ParamKind};

/// One kernel parameter of the launch ABI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbiArg {
    /// A global pointer to the tensor param `param`.
    Tensor { param: String, dtype: Dtype },
    /// The value of scalar param `param`.
    Scalar { param: String, dtype: Dtype },
    /// The runtime value of symbolic dim `name`.
    Dim { name: String },
    /// A tensor map of tensor param `param` (C-contiguous, every stride a multiple of 16 bytes)
    /// whose box is `boxes` elements per dim, outermost first (the last dim contiguous), with
    /// the 128-byte swizzle and zero fill out of bounds.
    TensorMap {
        param: String,
        dtype: Dtype,
        boxes: Vec<u32>,
        /// The kernel checks the tensor's alignment itself (a warp-specialized kernel, ws.rs):
        /// when the address is not 16-byte aligned, a byte stride is not a multiple of 16 or the
        /// innermost dim is not contiguous, the launcher passes 128 zero bytes and the kernel
        /// copies without the map. Otherwise such a tensor is a launch error.
        fallback: bool,
    },
}

impl AbiArg {
    /// The name of the param or dim this argument carries.
    pub fn name(&self) -> &str {
        match self {
            AbiArg::Tensor { param, .. }
            | AbiArg::Scalar { param, .. }
            | AbiArg::TensorMap { param, .. } => param,
            AbiArg::Dim { name } => name,
        }
    }
}

/// The ordered ABI of one specialized kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelAbi {
    pub args: Vec<AbiArg>,
}

impl KernelAbi {
    /// The position of the pointer of tensor `param`.
    pub fn tensor_index(&self, param: &str) -> Option<usize> {
        self.args
            .iter()
            .position(|a| matches!(a, AbiArg::Tensor { param: p, .. } if p == param))
    }

    /// The position of the tensor map of `param` with box `boxes`.
    pub fn tensor_map_index(&self, param: &str, boxes: &[u32]) -> Option<usize> {
        self.args.iter().position(
            |a| matches!(a, AbiArg::TensorMap { param: p, boxes: b, .. } if p == param && b == boxes),
        )
    }

    /// The position of dim `name`.
    pub fn dim_index(&self, name: &str) -> Option<usize> {
        self.args
            .iter()
            .position(|a| matches!(a, AbiArg::Dim { name: n } if n == name))
    }

    /// The position of scalar `param`.
    pub fn scalar_index(&self, param: &str) -> Option<usize> {
        self.args
            .iter()
            .position(|a| matches!(a, AbiArg::Scalar { param: p, .. } if p == param))
    }
}

/// Computes the ABI of a specialized kernel. Fails (naming the param) if a dtype is not known.
pub fn kernel_abi(k: &Kernel) -> Result<KernelAbi, String> {
    let mut tensors = Vec::new();
    let mut scalars = Vec::new();
    let mut dims: Vec<String> = Vec::new();
    for p in &k.params {
        match &p.kind {
            ParamKind::Tensor(_, t) => {
                let dtype = t.elem.known().ok_or_else(|| {
                    format!("param `{}` has no known dtype (specialize first)", p.name)
                })?;
                tensors.push(AbiArg::Tensor {
                    param: p.name.clone(),
                    dtype,
                });
                for d in &t.dims {
                    if let ExprKind::Ident(n) = &d.kind {
                        if !dims.contains(n) {
                            dims.push(n.clone());
                        }
                    }
                }
            }
            ParamKind::Scalar(e) => {
                let dtype = e.known().ok_or_else(|| {
                    format!("param `{}` has no known dtype (specialize first)", p.name)
                })?;
                scalars.push(AbiArg::Scalar {
                    param: p.name.clone(),
                    dtype,
                });
            }
        }
    }
    let mut args = tensors;
    args.extend(scalars);
    args.extend(dims.into_iter().map(|name| AbiArg::Dim { name }));
    let fallback = k.dfg.blocks[k.body]
        .ops
        .iter()
        .any(|&o| k.dfg.ops[o].opcode == kir_ir::Opcode::WarpSpecialize);
    for (param, dtype, boxes) in tma_copies(k) {
        if !args
            .iter()
            .any(|a| matches!(a, AbiArg::TensorMap { param: p, boxes: b, .. } if *p == param && *b == boxes))
        {
            args.push(AbiArg::TensorMap {
                param,
                dtype,
                boxes,
                fallback,
            });
        }
    }
    Ok(KernelAbi { args })
}

/// Columns of one tensor-copy box: one 128-byte swizzle span of 16-bit elements.
pub const TMA_BOX_COLS: u32 = 64;

/// The (tensor param, dtype, box) of every `async_copy … bar` of `k` in program order: a copy
/// completing on an mbarrier is a tensor copy of boxes [1, …, 1, rows, 64] (outermost first),
/// one per 64 columns of its [rows, cols] stage tile.
pub fn tma_copies(k: &Kernel) -> Vec<(String, Dtype, Vec<u32>)> {
    fn walk(k: &Kernel, b: kir_ir::Block, out: &mut Vec<(String, Dtype, Vec<u32>)>) {
        for &o in &k.dfg.blocks[b].ops {
            let od = &k.dfg.ops[o];
            for &r in &od.regions {
                walk(k, r, out);
            }
            if od.opcode != kir_ir::Opcode::AsyncCopy || od.attr("bar").is_none() {
                continue;
            }
            let (Some(tr), Some(&buf)) = (&od.tensor, od.operands.first()) else {
                continue;
            };
            let Some(ParamKind::Tensor(_, t)) = k.param(&tr.param).map(|p| &p.kind) else {
                continue;
            };
            let (Some(dtype), Some(shape)) = (t.elem.known(), k.dfg.ty(buf).shape()) else {
                continue;
            };
            let (n, Some(&rows)) = (t.dims.len(), shape.get(1)) else {
                continue;
            };
            let mut boxes = vec![1u32; n];
            if n >= 2 {
                boxes[n - 2] = rows as u32;
                boxes[n - 1] = TMA_BOX_COLS;
            }
            out.push((tr.param.clone(), dtype, boxes));
        }
    }
    let mut out = vec![];
    walk(k, k.body, &mut out);
    out
}
