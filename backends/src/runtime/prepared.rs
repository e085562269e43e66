//! A binding prepared once and launched many times on new addresses: the fast path of a
//! framework's launcher (kir's PyTorch ops call the same kernels with tensors of the same
//! shapes over and over, in fresh allocations).
//!
//! [`Program::prepare`] binds a first set of tensors with every check of
//! [`Program::bind_device`] (dtypes, shapes, strides, `requires`, grids, tensor maps) and
//! records, for each launch argument that holds a tensor's address, which tensor it is.
//! [`Program::launch_prepared`] then takes only the tensors' addresses, in the order given at
//! preparation, rewrites those arguments (a pointer, or a tensor map encoded again from its
//! kept geometry with the new address, and only when the address changed) and launches. The
//! caller guarantees that the tensors have the dtypes, shapes and strides they had at
//! preparation (a launcher keys its prepared bindings by them); each address is still checked
//! (not null for a non-empty tensor; a tensor map's alignment rules, with the kernel's own
//! fallback where it has one).

use super::driver::{CUstream, KernelArg};
use super::maps::encode_tensor_map;
use super::program::{map_spec, Bound, Ready};
use super::{DeviceArg, Program, RuntimeError};
use crate::interp::InterpError;
use crate::tensor_map::TENSOR_MAP_BYTES;
use std::collections::BTreeMap;

/// Where one address-dependent argument is: the launch, the patch of that launch, and the
/// index of its tensor in the caller's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    ready: usize,
    patch: usize,
    tensor: usize,
}

/// A binding ready to launch again with new addresses ([`Program::prepare`]).
pub struct Prepared {
    bound: Bound,
    /// The tensors' names, in the order [`Program::launch_prepared`] takes their addresses.
    names: Vec<String>,
    /// Whether each tensor has no element (a null address is then allowed).
    empty: Vec<bool>,
    slots: Vec<Slot>,
    /// The addresses the arguments hold now, per tensor.
    last: Vec<u64>,
}

// SAFETY: the launches hold driver function handles (valid on any thread with the program's
// context current, which `launch_prepared` makes current) and plain argument bytes; the
// device memory a binding may own is freed once, on drop.
unsafe impl Send for Prepared {}

impl Prepared {
    /// The tensors' names, in the order [`Program::launch_prepared`] takes their addresses.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The binding itself (its dims, its bytes moved).
    pub fn bound(&self) -> &Bound {
        &self.bound
    }
}

/// The caller's index of every address-dependent argument of the launches `ready`, by the name of the tensor
/// it was bound from; fails naming a bound tensor that `names` does not list.
fn slots(ready: &[Ready], names: &[String]) -> Result<Vec<Slot>, String> {
    let mut out = Vec::new();
    for (ready, r) in ready.iter().enumerate() {
        for (patch, p) in r.patches.iter().enumerate() {
            let tensor = names
                .iter()
                .position(|n| *n == p.buf.name)
                .ok_or_else(|| format!("`{}` is bound but not among the tensors", p.buf.name))?;
            out.push(Slot {
                ready,
                patch,
                tensor,
            });
        }
    }
    Ok(out)
}

fn bind_err(message: String) -> RuntimeError {
    RuntimeError::Bind(InterpError {
        message,
        span: None,
        kernel: None,
    })
}

impl Program<'_> {
    /// Binds `args` as [`Program::bind_device`] does (every check) and keeps the binding for
    /// [`Program::launch_prepared`], which takes the addresses of the tensors named in `order`
    /// (every tensor of `args`, each once), in that order.
    pub fn prepare(
        &self,
        args: &BTreeMap<String, DeviceArg>,
        order: &[String],
    ) -> Result<Prepared, RuntimeError> {
        let mut last = Vec::with_capacity(order.len());
        let mut empty = Vec::with_capacity(order.len());
        for (i, name) in order.iter().enumerate() {
            if order[..i].contains(name) {
                return Err(bind_err(format!("`{name}` is given twice")));
            }
            match args.get(name) {
                Some(DeviceArg::Tensor(t)) => {
                    last.push(t.ptr);
                    empty.push(t.shape.contains(&0));
                }
                _ => return Err(bind_err(format!("`{name}` is not a tensor argument"))),
            }
        }
        let tensors = args
            .values()
            .filter(|a| matches!(a, DeviceArg::Tensor(_)))
            .count();
        if tensors != order.len() {
            return Err(bind_err(format!(
                "{tensors} tensors are bound but {} are ordered",
                order.len()
            )));
        }
        let bound = self.bind_device(args)?;
        let slots = slots(&bound.ready, order).map_err(bind_err)?;
        Ok(Prepared {
            bound,
            names: order.to_vec(),
            empty,
            slots,
            last,
        })
    }

    /// Launches the prepared binding `p` on `stream` with the tensors at `ptrs` (one address
    /// per name of [`Prepared::names`], in that order), after making the GPU's primary context
    /// current on this thread. Arguments are rewritten only where an address changed; a tensor
    /// map that breaks an alignment rule at its new address is an error naming it (or 128 zero
    /// bytes for a kernel that copies without the map), and nothing is launched.
    pub fn launch_prepared(
        &self,
        p: &mut Prepared,
        ptrs: &[u64],
        stream: CUstream,
    ) -> Result<(), RuntimeError> {
        if ptrs.len() != p.names.len() {
            return Err(bind_err(format!(
                "{} addresses for {} tensors ({})",
                ptrs.len(),
                p.names.len(),
                p.names.join(", ")
            )));
        }
        if ptrs != p.last.as_slice() {
            for (i, &ptr) in ptrs.iter().enumerate() {
                if ptr == 0 && !p.empty[i] {
                    return Err(bind_err(format!(
                        "`{}` has a null device address",
                        p.names[i]
                    )));
                }
            }
            // The stale maps are encoded into new storage first, so that an error leaves the
            // binding as it was.
            let mut new = Vec::new();
            for s in &p.slots {
                let ptr = ptrs[s.tensor];
                if ptr == p.last[s.tensor] {
                    continue;
                }
                let patch = &p.bound.ready[s.ready].patches[s.patch];
                let arg = match &patch.map {
                    None => KernelArg::Word(ptr),
                    Some((param, boxes, fallback)) => {
                        let mut zeros = None;
                        let bytes =
                            match map_spec(param, &patch.buf, ptr, boxes, &mut zeros, *fallback)? {
                                Some(spec) => encode_tensor_map(&spec)?,
                                None => super::driver::TensorMapBytes([0; TENSOR_MAP_BYTES]),
                            };
                        KernelArg::Map(Box::new(bytes))
                    }
                };
                new.push((s.ready, patch.arg, arg));
            }
            for (ready, at, arg) in new {
                p.bound.ready[ready].args[at] = arg;
            }
            for (name, &ptr) in p.names.iter().zip(ptrs) {
                p.bound.addrs.insert(name.clone(), ptr);
            }
            p.last.copy_from_slice(ptrs);
        }
        self.launch_on(&mut p.bound, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::super::program::{DevBuf, Patch, Ready};
    use super::{slots, Slot};
    use kir_ir::Dtype;
    use std::sync::Arc;

    fn buf(name: &str) -> Arc<DevBuf> {
        Arc::new(DevBuf {
            name: name.into(),
            dtype: Dtype::F32,
            shape: vec![4],
            strides: vec![1],
            ptr: 0x1000,
            mem: None,
        })
    }

    fn ready(patches: Vec<Patch>) -> Ready {
        Ready {
            func: std::ptr::null_mut(),
            symbol: "k".into(),
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_bytes: 0,
            args: Vec::new(),
            patches,
            touches: Vec::new(),
        }
    }

    #[test]
    fn every_address_argument_finds_its_tensor() {
        let r = vec![
            ready(vec![
                Patch {
                    arg: 0,
                    buf: buf("y"),
                    map: None,
                },
                Patch {
                    arg: 2,
                    buf: buf("x"),
                    map: Some(("x".into(), vec![64], false)),
                },
            ]),
            ready(vec![Patch {
                arg: 1,
                buf: buf("tmp"),
                map: None,
            }]),
        ];
        let names: Vec<String> = ["x", "tmp", "y"].iter().map(|s| s.to_string()).collect();
        let got = slots(&r, &names).unwrap();
        let slot = |ready, patch, tensor| Slot {
            ready,
            patch,
            tensor,
        };
        assert_eq!(got, vec![slot(0, 0, 2), slot(0, 1, 0), slot(1, 0, 1)]);
        let err = slots(&r, &names[..2]).unwrap_err();
        assert!(err.contains("`y`"), "{err}");
    }
}
