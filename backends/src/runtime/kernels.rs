//! META.json's kernel list read against the module it was compiled from: each kernel's symbol,
//! block and dynamic shared memory, and its params checked to be the launch ABI of the module's
//! kernel (`abi.rs`). [`super::Program::load`] loads from this; [`check_meta`] runs the same
//! checks without a GPU, for a loader that pairs PTX, META.json and a module from files (a
//! stale META.json, or one of another compilation, is an error before anything is loaded).
//! [`split_entries`] cuts a module's PTX into one module per kernel, so that the driver can
//! JIT-compile a program's kernels on threads of their own.

use super::RuntimeError;
use crate::abi::{kernel_abi, AbiArg, KernelAbi};
use crate::interp::runner::check_specialized;
use kir_ir::Module;
use serde_json::Value;

/// One kernel of META.json, checked against its module.
pub(super) struct MetaKernel {
    /// The kernel's name in the module.
    pub(super) name: String,
    /// Its `.entry` symbol.
    pub(super) symbol: String,
    /// Threads per block.
    pub(super) block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub(super) shared_bytes: u32,
    /// The kernel's launch ABI, from the module.
    pub(super) abi: KernelAbi,
}

/// An error about META.json.
pub(super) fn meta_err(what: impl Into<String>) -> RuntimeError {
    RuntimeError::Cuda(format!("META.json: {}", what.into()))
}

fn u32_field(k: &Value, key: &str) -> Result<u32, RuntimeError> {
    k.get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| meta_err(format!("kernel field `{key}` is missing or not a count")))
}

/// The kernels META.json `meta` lists, each checked against its kernel in `module` (present,
/// with params in the order and of the kinds of its launch ABI, tensor-map boxes included).
pub(super) fn meta_kernels(meta: &Value, module: &Module) -> Result<Vec<MetaKernel>, RuntimeError> {
    let list = meta
        .get("kernels")
        .and_then(Value::as_array)
        .ok_or_else(|| meta_err("no `kernels` list"))?;
    let mut kernels = Vec::with_capacity(list.len());
    for k in list {
        let name = k
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| meta_err("a kernel has no name"))?;
        let symbol = k
            .get("symbol")
            .and_then(Value::as_str)
            .ok_or_else(|| meta_err(format!("kernel `{name}` has no symbol")))?;
        let block = k
            .get("block")
            .and_then(Value::as_array)
            .filter(|b| b.len() == 3)
            .ok_or_else(|| meta_err(format!("kernel `{name}`: `block` is not [x, y, z]")))?;
        let mut b = [0u32; 3];
        for (d, v) in b.iter_mut().zip(block) {
            *d = v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .filter(|&x| x > 0)
                .ok_or_else(|| meta_err(format!("kernel `{name}`: bad block")))?;
        }
        let shared_bytes = u32_field(k, "shared_bytes")?;
        let (_, ir) = module
            .kernel(name)
            .ok_or_else(|| meta_err(format!("kernel `{name}` is not in the module")))?;
        let abi = kernel_abi(ir).map_err(RuntimeError::Cuda)?;
        let params = k
            .get("params")
            .and_then(Value::as_array)
            .ok_or_else(|| meta_err(format!("kernel `{name}` has no params")))?;
        let listed: Vec<(&str, &str, Option<Vec<u64>>)> = params
            .iter()
            .map(|p| {
                (
                    p.get("kind").and_then(Value::as_str).unwrap_or(""),
                    p.get("name").and_then(Value::as_str).unwrap_or(""),
                    p.get("box")
                        .and_then(Value::as_array)
                        .map(|b| b.iter().map(|v| v.as_u64().unwrap_or(0)).collect()),
                )
            })
            .collect();
        let want: Vec<(&str, &str, Option<Vec<u64>>)> = abi
            .args
            .iter()
            .map(|a| match a {
                AbiArg::Tensor { .. } => ("tensor", a.name(), None),
                AbiArg::Scalar { .. } => ("scalar", a.name(), None),
                AbiArg::Dim { .. } => ("dim", a.name(), None),
                AbiArg::TensorMap { boxes, .. } => (
                    "tensor_map",
                    a.name(),
                    Some(boxes.iter().map(|&b| u64::from(b)).collect()),
                ),
            })
            .collect();
        if listed != want {
            return Err(meta_err(format!(
                "kernel `{name}` lists params {listed:?}, but its launch ABI is {want:?} (stale META?)"
            )));
        }
        kernels.push(MetaKernel {
            name: name.to_string(),
            symbol: symbol.to_string(),
            block: b,
            shared_bytes,
            abi,
        });
    }
    Ok(kernels)
}

/// Checks, without a GPU, that `meta` (META.json) describes `module` (the specialized module
/// that was lowered to the code it goes with): the module is fully specialized, every kernel
/// META.json lists is the module's with the params of its launch ABI, and every kernel the
/// module launches (its program's launches, or its one kernel) is listed. What
/// [`super::Program::load`] checks before loading, minus the driver.
pub fn check_meta(meta: &Value, module: &Module) -> Result<(), RuntimeError> {
    check_specialized(module).map_err(RuntimeError::Bind)?;
    let kernels = meta_kernels(meta, module)?;
    let listed = |name: &str| kernels.iter().any(|k| k.name == name);
    let launched: Vec<&str> = match &module.program {
        Some(p) => p.launches.iter().map(|l| l.kernel.as_str()).collect(),
        None => module.kernels.values().map(|k| k.name.as_str()).collect(),
    };
    match launched.iter().find(|k| !listed(k)) {
        Some(k) => Err(meta_err(format!(
            "the module launches kernel `{k}`, which META.json does not list"
        ))),
        None => Ok(()),
    }
}

/// The PTX module `ptx` cut into one module per `.entry`: each is the declarations before the
/// first entry (version, target, the shared and constant declarations every kernel may use, and
/// every kernel's `print` format strings with the `vprintf` prototype: the PTX backend puts all
/// module-scope declarations there) followed by that entry's text, paired with the entry's
/// symbol. kir's PTX defines no `.func`, so each part is a whole module. A module of one entry
/// (or none found) comes back as it is.
pub fn split_entries(ptx: &str) -> Vec<(Option<String>, String)> {
    let starts: Vec<usize> = ptx
        .match_indices(".visible .entry ")
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || ptx.as_bytes()[i - 1] == b'\n')
        .collect();
    if starts.len() < 2 {
        return vec![(None, ptx.to_string())];
    }
    let head = &ptx[..starts[0]];
    starts
        .iter()
        .enumerate()
        .map(|(n, &at)| {
            let end = starts.get(n + 1).copied().unwrap_or(ptx.len());
            let text = &ptx[at..end];
            let symbol = text[".visible .entry ".len()..]
                .split(|c: char| c == '(' || c.is_whitespace())
                .next()
                .map(str::to_string);
            (symbol, format!("{head}{text}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::split_entries;

    #[test]
    fn a_module_of_three_entries_splits_into_three_whole_modules() {
        let head = ".version 8.0\n.target sm_90a\n.address_size 64\n\n.extern .shared .align 1024 .b8 kir_smem[];\n\n";
        let entry = |n: &str| {
            format!(".visible .entry {n}(\n\t.param .u64 {n}_param_0\n)\n{{\n\tret;\n}}\n\n")
        };
        let ptx = format!("{head}{}{}{}", entry("pre"), entry("dkdv"), entry("dq"));
        let parts = split_entries(&ptx);
        let symbols: Vec<_> = parts.iter().map(|(s, _)| s.as_deref()).collect();
        assert_eq!(symbols, [Some("pre"), Some("dkdv"), Some("dq")]);
        for ((_, text), n) in parts.iter().zip(["pre", "dkdv", "dq"]) {
            assert_eq!(*text, format!("{head}{}", entry(n)));
        }
        // One entry: the module as it is.
        let one = format!("{head}{}", entry("k"));
        assert_eq!(split_entries(&one), vec![(None, one.clone())]);
    }
}
