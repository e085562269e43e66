//! Launch metadata (META.json): everything an outside launcher needs to run a compiled module —
//! the entry params, temporaries, and per kernel its symbol, ABI, block, grid formula and shared
//! memory. The same document describes PTX and CUDA-C output. Format: docs/backends.md.

use crate::abi::{AbiArg, KernelAbi};
use crate::target::Target;
use kir_ir::{Module, Param, ParamKind};
use serde_json::{json, Value};

/// What a backend reports about one compiled kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelMeta {
    /// The kernel's name in the module.
    pub kernel: String,
    /// The symbol in the emitted code (encodes the specialization).
    pub symbol: String,
    pub abi: KernelAbi,
    /// Threads per block (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory bytes to request at launch.
    pub shared_bytes: u32,
    /// Registers per thread, when known (from ptxas).
    pub registers: Option<u32>,
}

fn param_json(p: &Param) -> Value {
    match &p.kind {
        ParamKind::Tensor(a, t) => json!({
            "name": p.name,
            "kind": "tensor",
            "access": a.name(),
            "dtype": t.elem.to_string(),
            "dims": t.dims.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            "strides": t.strides.as_ref().map(|s| s.iter().map(|d| d.to_string()).collect::<Vec<_>>()),
        }),
        ParamKind::Scalar(e) => json!({ "name": p.name, "kind": "scalar", "dtype": e.to_string() }),
    }
}

fn abi_json(abi: &KernelAbi) -> Value {
    Value::Array(
        abi.args
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                AbiArg::Tensor { param, dtype } => {
                    json!({"ptr_index": i, "name": param, "kind": "tensor", "dtype": dtype.name()})
                }
                AbiArg::Scalar { param, dtype } => {
                    json!({"ptr_index": i, "name": param, "kind": "scalar", "dtype": dtype.name()})
                }
                AbiArg::Dim { name } => {
                    json!({"ptr_index": i, "name": name, "kind": "dim", "dtype": "i32"})
                }
                AbiArg::TensorMap {
                    param,
                    dtype,
                    boxes,
                    fallback,
                } => json!({
                    "ptr_index": i, "name": param, "kind": "tensor_map", "dtype": dtype.name(),
                    "box": boxes, "swizzle": "128B", "oob_fill": "zero",
                    "unaligned": if *fallback { "zeros" } else { "error" },
                }),
            })
            .collect(),
    )
}

/// Builds META.json for a specialized module compiled for `target` (`emit` is `ptx` or `cuda`).
/// `kernels` holds one entry per kernel of the module, in module order.
pub fn module_meta(
    m: &Module,
    target: Target,
    emit: &str,
    ptx_version: (u32, u32),
    kernels: &[KernelMeta],
) -> Value {
    let entry: Vec<Value> = m
        .entry_params()
        .unwrap_or(&[])
        .iter()
        .map(param_json)
        .collect();
    let kjson: Vec<Value> = kernels
        .iter()
        .map(|km| {
            let k = m.kernel(&km.kernel).map(|(_, k)| k);
            let grid = k.map(|k| k.grid.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap_or_default();
            let requires = k.map(|k| k.requires.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap_or_default();
            json!({
                "name": km.kernel,
                "symbol": km.symbol,
                "params": abi_json(&km.abi),
                "block": km.block,
                "grid": {"x": grid.first(), "y": grid.get(1), "z": grid.get(2)},
                "requires": requires,
                "shared_bytes": km.shared_bytes,
                "registers": km.registers,
                "kernel_params": k.map(|k| k.params.iter().map(param_json).collect::<Vec<_>>()).unwrap_or_default(),
            })
        })
        .collect();
    let launches: Vec<Value> = match &m.program {
        Some(p) => p
            .launches
            .iter()
            .map(|l| {
                json!({
                    "kernel": l.kernel,
                    "args": l.args.iter().map(|a| (a.param.clone(), Value::String(a.arg.clone()))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect(),
        None => kernels
            .iter()
            .map(|km| {
                let args = km.abi.args.iter().filter(|a| !matches!(a, AbiArg::Dim { .. }));
                json!({
                    "kernel": km.kernel,
                    "args": args.map(|a| (a.name().to_string(), Value::String(a.name().to_string()))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect(),
    };
    let temps: Vec<Value> = m
        .program
        .iter()
        .flat_map(|p| &p.temps)
        .map(|t| {
            json!({"name": t.name, "dtype": t.ty.elem.to_string(), "dims": t.ty.dims.iter().map(|d| d.to_string()).collect::<Vec<_>>()})
        })
        .collect();
    let first = kjson.first().cloned().unwrap_or(Value::Null);
    json!({
        "name": m.name,
        "target": target.name(),
        "emit": emit,
        "ptx_version": format!("{}.{}", ptx_version.0, ptx_version.1),
        // The single-kernel view (the first kernel), the fields the META.json contract lists.
        "params": first.get("params").cloned().unwrap_or(Value::Null),
        "block": first.get("block").cloned().unwrap_or(Value::Null),
        "grid": first.get("grid").cloned().unwrap_or(Value::Null),
        "shared_bytes": first.get("shared_bytes").cloned().unwrap_or(Value::Null),
        "registers": first.get("registers").cloned().unwrap_or(Value::Null),
        // The whole program.
        "entry_params": entry,
        "temps": temps,
        "kernels": kjson,
        "launches": launches,
        "grid_grammar": "integers, dim names, + - * / (floor), %, cdiv(a, b), min(a, b), max(a, b), parentheses",
        "requires_grammar": "the grid grammar plus == != < <= > >= && || ! and select(c, a, b); scalar param names and float literals appear only in comparisons, compared as f64 (NaN fails all but !=); every requirement must hold at launch",
    })
}
