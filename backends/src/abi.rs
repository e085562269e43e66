//! The launch ABI shared by every GPU backend (PTX and CUDA C): the order and types of a
//! kernel's parameters. docs/backends.md documents it for outside launchers.
//!
//! A kernel's parameters are, in this order:
//! 1. one 64-bit global pointer per tensor param, in declaration order;
//! 2. one value per scalar param, in declaration order (f32 as `.f32`, f16/bf16 as their 16 bits,
//!    i32 as `.s32`, i64 as `.s64`, u8 and i1 as `.u8`);
//! 3. one `.s32` per symbolic dim, in order of first appearance in the tensor params' dims.
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
}

impl AbiArg {
    /// The name of the param or dim this argument carries.
    pub fn name(&self) -> &str {
        match self {
            AbiArg::Tensor { param, .. } | AbiArg::Scalar { param, .. } => param,
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
    Ok(KernelAbi { args })
}
