//! Launching on a caller's tensors and stream: what a framework (kir's PyTorch ops, a Rust
//! program with its own allocator) needs from the runtime.
//!
//! - [`buffer_specs`] (and [`Program::buffer_specs`]) says, for the shapes of the entry's inputs, which tensors the
//!   caller must provide besides them: every `out` param and every temp of the program, each
//!   with its dtype, shape and element strides (the interpreter's own binding code computes
//!   them, so the dims and the errors are the interpreter's).
//! - [`Program::bind_device`] binds caller-owned device memory ([`DeviceTensor`]: an address,
//!   a dtype, a shape, element strides) for every tensor param and temp. Nothing is allocated,
//!   copied or poisoned; each tensor is checked against what the entry expects (dtype, shape,
//!   strides), an input's dims bind the entry's dims as in the interpreter, the launches'
//!   `requires` are evaluated, grids computed and tensor maps encoded from the caller's
//!   addresses. A tensor that breaks a rule is an error naming it, before anything launches.
//! - [`Program::launch_on`] launches every kernel of the program in order on the caller's
//!   stream (a `CUstream`, e.g. `torch.cuda.current_stream().cuda_stream` or a cudarc stream's
//!   `cu_stream()`), after making the device's primary context current on the calling thread.
//!
//! The caller keeps every tensor alive and unchanged in size until the launches have run on its
//! stream: the [`Bound`] holds only addresses.

use super::driver::{launch, CUstream};
use super::fork::{conflict, touches, Fork};
use super::program::{entry_of, Bound, DevBuf, Ready};
use super::{Program, RuntimeError};
use crate::interp::bind::{alloc, bind_entry, bind_launch, EntryEnv, NewBuf};
use crate::interp::memory::contiguous_strides;
use crate::interp::{HostArg, HostData, HostTensor, InterpError};
use kir_ir::{Dtype, Module, ParamKind};
use std::collections::BTreeMap;

/// A tensor in the caller's device memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceTensor {
    /// The device address of element 0 (in the primary context of the program's GPU).
    pub ptr: u64,
    /// The element type; must be the param's.
    pub dtype: Dtype,
    /// The dims, outermost first.
    pub shape: Vec<usize>,
    /// Element strides, one per dim; must be the ones the param declares (C order when it
    /// declares none). A dim of size 1 may have any stride.
    pub strides: Vec<usize>,
}

/// An argument of the entry for [`Program::bind_device`].
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceArg {
    /// A tensor param's or temp's device memory.
    Tensor(DeviceTensor),
    /// A scalar param's value, converted as the interpreter converts it.
    Scalar(f64),
    /// A scalar param's exact integer value.
    Int(i64),
}

/// What a buffer the caller provides is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferRole {
    /// An `out` param of the entry: the caller's result.
    Out,
    /// A temp of the program: scratch the caller allocates and may free (or reuse) once the
    /// launches have run.
    Temp,
}

/// A tensor the caller must provide, as [`Program::buffer_specs`] computes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferSpec {
    /// The param's or temp's name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its dims.
    pub shape: Vec<usize>,
    /// Its element strides (C order unless the param declares strides).
    pub strides: Vec<usize>,
    /// Out param or temp.
    pub role: BufferRole,
}

/// The shape-only host arguments the interpreter's binding takes for `args`' tensors (no data
/// is read: the buffer maker below never looks at it).
fn shape_args(args: &BTreeMap<String, DeviceArg>) -> BTreeMap<String, HostArg> {
    args.iter()
        .map(|(name, a)| {
            let h = match a {
                DeviceArg::Tensor(t) => HostArg::Tensor(HostTensor {
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    data: HostData::F64(Vec::new()),
                }),
                DeviceArg::Scalar(x) => HostArg::Scalar(*x),
                DeviceArg::Int(x) => HostArg::Int(*x),
            };
            (name.clone(), h)
        })
        .collect()
}

/// Whether `got` strides fit `want` for `shape`: equal wherever the dim is larger than 1, and
/// any strides for a tensor with no elements (none is ever addressed; torch gives a `(34, 0)`
/// tensor the strides `(1, 1)` where the contiguous ones are `(0, 1)`).
fn strides_fit(shape: &[usize], got: &[usize], want: &[usize]) -> bool {
    got.len() == want.len()
        && (shape.contains(&0)
            || shape
                .iter()
                .zip(got.iter().zip(want))
                .all(|(&n, (g, w))| n <= 1 || g == w))
}

/// The `out` params and temps the caller provides for [`Program::bind_device`] when the entry
/// of `module` (specialized) gets `inputs` (its `in`/`inout` tensors and scalars): their
/// dtypes, shapes and strides, `out` params first in signature order, then temps in program
/// order. Fails as the interpreter's binding fails (a missing input, dims that disagree),
/// naming the param. Needs no GPU.
pub fn buffer_specs(
    module: &Module,
    inputs: &BTreeMap<String, DeviceArg>,
) -> Result<Vec<BufferSpec>, RuntimeError> {
    let (params, span) = entry_of(module)?;
    let outs: Vec<&str> = params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Tensor(kir_ir::Access::Out, _)))
        .map(|p| p.name.as_str())
        .collect();
    let mut specs = Vec::new();
    let mut record = |n: NewBuf<'_>| -> Result<(), String> {
        if n.data.is_none() {
            let strides = n.strides.unwrap_or_else(|| contiguous_strides(&n.shape));
            let role = if outs.contains(&n.name) {
                BufferRole::Out
            } else {
                BufferRole::Temp
            };
            specs.push(BufferSpec {
                name: n.name.to_string(),
                dtype: n.dtype,
                shape: n.shape,
                strides,
                role,
            });
        }
        Ok(())
    };
    let env: EntryEnv<Unit> = bind_entry(params, &shape_args(inputs), span, &mut |n| {
        record(n).map(|()| Unit)
    })
    .map_err(RuntimeError::Bind)?;
    if let Some(p) = &module.program {
        for t in &p.temps {
            alloc(&t.name, &t.ty, &env.dims, t.span, &mut |n| {
                record(n).map(|()| Unit)
            })
            .map_err(RuntimeError::Bind)?;
        }
    }
    Ok(specs)
}

/// The consecutive launches of `module`'s program (specialized) that run together when the
/// entry gets `inputs` (shapes only), by kernel name, as [`Program::launch_on`] pairs them when
/// no two of the caller's tensors share memory: from the first launch on, a launch and the next
/// one that touch no common buffer (one that either may write, empty buffers aside) form a pair,
/// and the launch after a pair starts afresh. Fails as [`buffer_specs`] does. Needs no GPU.
pub fn launch_pairs(
    module: &Module,
    inputs: &BTreeMap<String, DeviceArg>,
) -> Result<Vec<(String, String)>, RuntimeError> {
    let (params, span) = entry_of(module)?;
    // Shapes only: no memory, no address.
    let mut make = |n: NewBuf<'_>| -> Result<DevBuf, String> {
        Ok(DevBuf {
            name: n.name.to_string(),
            dtype: n.dtype,
            strides: n.strides.unwrap_or_else(|| contiguous_strides(&n.shape)),
            shape: n.shape,
            ptr: 0,
            mem: None,
        })
    };
    let mut env =
        bind_entry(params, &shape_args(inputs), span, &mut make).map_err(RuntimeError::Bind)?;
    let Some(p) = &module.program else {
        return Ok(vec![]);
    };
    for t in &p.temps {
        let b = alloc(&t.name, &t.ty, &env.dims, t.span, &mut make).map_err(RuntimeError::Bind)?;
        env.buffers.insert(t.name.clone(), std::sync::Arc::new(b));
    }
    let mut each = vec![];
    for l in &p.launches {
        let (_, k) = module
            .kernel(&l.kernel)
            .ok_or_else(|| RuntimeError::Cuda(format!("no kernel `@{}`", l.kernel)))?;
        let (tensors, _, _) = bind_launch(k, l, &env).map_err(RuntimeError::Bind)?;
        each.push((k.name.clone(), touches(k, &tensors)));
    }
    // Buffers of distinct names never share memory here: each its own far-apart address.
    let addrs: BTreeMap<String, u64> = env
        .buffers
        .keys()
        .enumerate()
        .map(|(i, n)| (n.clone(), (i as u64 + 1) << 44))
        .collect();
    let mut pairs = vec![];
    let mut i = 0;
    while i + 1 < each.len() {
        if conflict(&each[i].1, &each[i + 1].1, &addrs) {
            i += 1;
        } else {
            pairs.push((each[i].0.clone(), each[i + 1].0.clone()));
            i += 2;
        }
    }
    Ok(pairs)
}

impl Program<'_> {
    /// [`buffer_specs`] of the loaded module.
    pub fn buffer_specs(
        &self,
        inputs: &BTreeMap<String, DeviceArg>,
    ) -> Result<Vec<BufferSpec>, RuntimeError> {
        buffer_specs(&self.module, inputs)
    }

    /// Binds the caller's device memory: `args` holds every tensor param (`in`, `inout` and
    /// `out`), every temp of the program ([`Program::buffer_specs`] lists the last two) and
    /// every scalar param. Checks each tensor's dtype, shape and strides against the entry
    /// (errors name the tensor), then readies every launch as [`Program::bind`] does. Nothing
    /// is allocated, copied or written.
    pub fn bind_device(&self, args: &BTreeMap<String, DeviceArg>) -> Result<Bound, RuntimeError> {
        let (params, span) = self.entry()?;
        // The entry's own binding takes its inputs and scalars; `out` params and temps are
        // looked up by name when the binding asks for them.
        let inputs: BTreeMap<String, DeviceArg> = args
            .iter()
            .filter(|(name, _)| {
                params.iter().any(|p| {
                    &p.name == *name && !matches!(p.kind, ParamKind::Tensor(kir_ir::Access::Out, _))
                })
            })
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect();
        let temps: Vec<&str> = self
            .module
            .program
            .as_ref()
            .map(|p| p.temps.iter().map(|t| t.name.as_str()).collect())
            .unwrap_or_default();
        if let Some(name) = args
            .keys()
            .find(|a| !params.iter().any(|p| &p.name == *a) && !temps.contains(&a.as_str()))
        {
            let mut names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            names.extend(&temps);
            return Err(RuntimeError::Bind(InterpError::at(
                span,
                format!(
                    "unknown argument `{name}` (the entry's params and temps are: {})",
                    names.join(", ")
                ),
            )));
        }
        let mut make = |n: NewBuf<'_>| -> Result<DevBuf, String> {
            let t = match args.get(n.name) {
                Some(DeviceArg::Tensor(t)) => t,
                Some(_) => return Err(format!("`{}` needs a tensor, not a scalar", n.name)),
                None => return Err(format!("no device tensor for `{}`", n.name)),
            };
            if t.dtype != n.dtype {
                return Err(format!(
                    "`{}` must be {}, but the tensor given is {}",
                    n.name,
                    n.dtype.name(),
                    t.dtype.name()
                ));
            }
            if t.shape != n.shape {
                return Err(format!(
                    "`{}` must have shape {:?}, but the tensor given has {:?}",
                    n.name, n.shape, t.shape
                ));
            }
            let want = n.strides.unwrap_or_else(|| contiguous_strides(&n.shape));
            if !strides_fit(&t.shape, &t.strides, &want) {
                return Err(format!(
                    "`{}` must have element strides {want:?}, but the tensor given has {:?}",
                    n.name, t.strides
                ));
            }
            if t.ptr == 0 && t.shape.iter().product::<usize>() > 0 {
                return Err(format!("`{}` has a null device address", n.name));
            }
            Ok(DevBuf {
                name: n.name.to_string(),
                dtype: n.dtype,
                shape: n.shape,
                strides: want,
                ptr: t.ptr,
                mem: None,
            })
        };
        let env = bind_entry(params, &shape_args(&inputs), span, &mut make)
            .map_err(RuntimeError::Bind)?;
        self.finish(env, &mut make)
    }

    /// Launches every kernel of the program bound in `b`, in order, on `stream` (null: the
    /// default stream), asynchronously, after making the GPU's primary context current on this
    /// thread. Launches with an empty grid are skipped. Two consecutive launches that touch no
    /// common memory at the buffers' current addresses run together (`fork.rs`): the first on
    /// the program's own stream (one for all its bindings), both after the work already on
    /// `stream`, and the work put on `stream` afterwards waits for both.
    pub fn launch_on(&self, b: &mut Bound, stream: CUstream) -> Result<(), RuntimeError> {
        self.gpu.make_current()?;
        let runs = |r: &Ready| !r.grid.contains(&0);
        let mut i = 0;
        while i < b.ready.len() {
            let pair = i + 1 < b.ready.len()
                && runs(&b.ready[i])
                && runs(&b.ready[i + 1])
                && !conflict(&b.ready[i].touches, &b.ready[i + 1].touches, &b.addrs);
            if pair {
                // A thread that panicked while holding the lock left the fork whole (its
                // handles change only in `new` and `drop`), so a poisoned lock is taken as is.
                let mut held = self.fork.lock().unwrap_or_else(|e| e.into_inner());
                if held.is_none() {
                    *held = Some(Fork::new()?);
                }
                let fork = held.as_ref().expect("made above");
                let (first, rest) = b.ready[i..].split_at_mut(1);
                fork.around(stream, |s| go(&mut first[0], s), |s| go(&mut rest[0], s))?;
                i += 2;
                continue;
            }
            if runs(&b.ready[i]) {
                go(&mut b.ready[i], stream)?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Launches `r` on `stream`.
fn go(r: &mut Ready, stream: CUstream) -> Result<(), RuntimeError> {
    launch(
        r.func,
        r.grid,
        r.block,
        r.shared_bytes,
        &mut r.args,
        stream,
        &r.symbol,
    )
}

/// The buffer type of a binding that only records shapes.
struct Unit;

impl crate::interp::bind::Shaped for Unit {
    fn name(&self) -> &str {
        ""
    }
    fn dtype(&self) -> Dtype {
        Dtype::I1
    }
    fn shape(&self) -> &[usize] {
        &[]
    }
    fn strides(&self) -> &[usize] {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::strides_fit;

    #[test]
    fn strides_of_unit_dims_are_free() {
        assert!(strides_fit(&[2, 1, 3], &[3, 99, 1], &[3, 3, 1]));
        assert!(!strides_fit(&[2, 2, 3], &[3, 99, 1], &[6, 3, 1]));
        assert!(!strides_fit(&[2, 3], &[3, 1, 1], &[3, 1]));
    }

    #[test]
    fn empty_tensors_fit_any_strides() {
        assert!(strides_fit(&[34, 0], &[1, 1], &[0, 1]));
        assert!(strides_fit(&[0], &[7], &[1]));
        assert!(!strides_fit(&[34, 0], &[1], &[0, 1]));
        assert!(!strides_fit(&[34, 2], &[1, 1], &[2, 1]));
    }
}
