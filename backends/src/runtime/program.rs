//! A compiled program on the GPU: PTX loaded with every kernel of META.json, entry arguments
//! bound exactly as the interpreter binds them (the interpreter's own binding code, over device
//! buffers), poisoned outs and temps, the tensor maps of each launch encoded from its bound
//! buffers, and the launches of the program in order.

use super::driver::{CuModule, DevMem, Gpu, KernelArg, TensorMapBytes};
use super::fill::Filler;
use super::fork::{touches, Fork, Touch};
use super::kernels::{meta_err, meta_kernels, split_entries};
use super::maps::encode_tensor_map;
use super::{Image, RuntimeError};
use crate::abi::{AbiArg, KernelAbi};
use crate::interp::bind::{alloc, bind_entry, bind_launch, EntryEnv, NewBuf, Shaped};
use crate::interp::memory::{contiguous_strides, native_bits, native_width, storage_len, Buffer};
use crate::interp::runner::{check_specialized, launch_grid};
use crate::interp::tile::{poison, Scalar, Tile};
use crate::interp::{HostArg, HostTensor, InterpError};
use crate::tensor_map::{tensor_map_spec, TensorMapSpec, TENSOR_MAP_BYTES};
use cudarc::driver::sys::CUfunction;
use kir_ir::{Dtype, Module, Param, ParamKind, Span};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// A tensor in device memory: the binding's view of it, its address, and its allocation when
/// the runtime made it (`None` for a caller's tensor, which the caller keeps alive).
pub(crate) struct DevBuf {
    pub(super) name: String,
    pub(super) dtype: Dtype,
    pub(super) shape: Vec<usize>,
    pub(super) strides: Vec<usize>,
    pub(super) ptr: u64,
    pub(super) mem: Option<DevMem>,
}

impl Shaped for DevBuf {
    fn name(&self) -> &str {
        &self.name
    }
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn strides(&self) -> &[usize] {
        &self.strides
    }
}

/// One kernel of META.json, loaded.
struct Loaded {
    func: CUfunction,
    symbol: String,
    block: [u32; 3],
    shared_bytes: u32,
    /// The kernel's launch ABI, computed once at load (every binding uses it).
    abi: KernelAbi,
}

// SAFETY: a function handle of a loaded module, valid on any thread with the module's context
// current (see `CuModule`); never mutated.
unsafe impl Send for Loaded {}
// SAFETY: as above.
unsafe impl Sync for Loaded {}

/// One launch, ready to go: the function, its geometry and its argument values (tensor maps
/// encoded, in storage that lives as long as the launch).
pub(super) struct Ready {
    pub(super) func: CUfunction,
    pub(super) symbol: String,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) shared_bytes: u32,
    pub(super) args: Vec<KernelArg>,
    /// The arguments that hold a bound tensor's address (a pointer, or a tensor map encoded
    /// from it): what a prepared binding rewrites when it launches on new addresses
    /// (`prepared.rs`). A launch with an empty grid has none (it never runs).
    pub(super) patches: Vec<Patch>,
    /// The buffers the launch binds, for deciding whether it may run beside the next one
    /// (`fork.rs`).
    pub(super) touches: Vec<Touch>,
}

/// An argument of a [`Ready`] launch that depends on a bound tensor's address.
pub(super) struct Patch {
    /// The index of the argument in [`Ready::args`].
    pub(super) arg: usize,
    /// The buffer bound to the param (its `name` is the entry param's or temp's).
    pub(super) buf: Arc<DevBuf>,
    /// For a tensor map: the kernel param, the box and whether the kernel falls back on a
    /// misaligned tensor (`None` for a plain pointer).
    pub(super) map: Option<(String, Vec<u32>, bool)>,
}

/// Bytes of the zeroed buffer behind the tensor maps of empty tensors (one 16-byte aligned
/// element of any dtype, and more).
const ZEROS_BYTES: usize = 64;

/// A program's device buffers and its launches with their arguments, ready to run (again and
/// again: `kirc bench` launches the same [`Bound`] many times). The tensor maps its launches
/// pass hold the addresses of its buffers, which live as long as it does.
pub struct Bound {
    pub(super) env: EntryEnv<DevBuf>,
    pub(super) ready: Vec<Ready>,
    /// Zeroed device bytes that the tensor maps of empty tensors point at (allocated only when a
    /// launch with a non-empty grid copies from an empty tensor).
    _zeros: Option<DevMem>,
    /// The entry's dims, bound from the input shapes.
    pub dims: BTreeMap<String, i64>,
    /// Every bound buffer's current address by name (a prepared binding updates the caller's).
    pub(super) addrs: BTreeMap<String, u64>,
}

impl Bound {
    /// The bytes the entry's tensors move if each is touched once: every `in` and `out` tensor
    /// once, every `inout` tensor twice (read and written); temps are not counted.
    pub fn io_bytes(&self) -> u64 {
        self.env
            .buffers
            .iter()
            .filter_map(|(name, b)| {
                let times = match self.env.access.get(name)? {
                    kir_ir::Access::InOut => 2,
                    _ => 1,
                };
                let n: usize = b.shape.iter().product();
                Some(times * (n * native_width(b.dtype)) as u64)
            })
            .sum()
    }
}

/// The entry params of `m` (its program's, or its only kernel's) and the span errors about the
/// entry point at.
pub(super) fn entry_of(m: &Module) -> Result<(&[Param], Span), RuntimeError> {
    match (&m.program, m.kernels.len()) {
        (Some(p), _) => Ok((&p.params[..], p.span)),
        (None, 1) => m
            .kernels
            .values()
            .next()
            .map(|k| (&k.params[..], k.span))
            .ok_or_else(|| RuntimeError::Cuda("the module has no kernel".into())),
        (None, n) => Err(RuntimeError::Cuda(format!(
            "the module has no program and {n} kernels; it needs a program or exactly one kernel"
        ))),
    }
}

/// A module's PTX loaded on a GPU with the launch metadata of each kernel.
pub struct Program<'g> {
    pub(super) gpu: &'g Gpu,
    pub(super) module: Module,
    /// The stream and events that let two launches run together (`fork.rs`), one set for every
    /// binding of the program, made on its first fork; held while a pair is queued, so two
    /// threads launching the same program fork one after the other. Declared before the
    /// modules, so the stream goes before the code its launches run.
    pub(super) fork: Mutex<Option<Fork>>,
    _cu: Vec<CuModule>,
    kernels: BTreeMap<String, Loaded>,
    filler: Option<Filler>,
}

/// The encoding of the tensor map of kernel param `param`, bound to `buf` at address `ptr` (its
/// own, or a later call's), with box `boxes`: the
/// map of the buffer itself, or, when the tensor has a dim of 0, the stand-in over `zeros`
/// (allocated and zeroed here on first need). With `fallback` (the kernel checks alignment
/// itself, abi.rs), `None` when the address, a stride or the innermost dim's contiguity rules
/// a map out. Fails, naming the param, on any other broken rule of the driver's.
pub(super) fn map_spec(
    param: &str,
    buf: &DevBuf,
    ptr: u64,
    boxes: &[u32],
    zeros: &mut Option<DevMem>,
    fallback: bool,
) -> Result<Option<TensorMapSpec>, RuntimeError> {
    let fail = |e: crate::tensor_map::TensorMapError| RuntimeError::Cuda(e.to_string());
    if buf.shape.contains(&0) {
        if zeros.is_none() {
            let z = DevMem::alloc(ZEROS_BYTES, "the tensor maps of empty tensors")?;
            z.fill(&[0])?;
            *zeros = Some(z);
        }
        let at = zeros.as_ref().map_or(0, |z| z.ptr);
        return TensorMapSpec::empty_standin(param, buf.dtype, buf.shape.len(), boxes, at)
            .map(Some)
            .map_err(fail);
    }
    match tensor_map_spec(param, buf.dtype, &buf.shape, &buf.strides, boxes, ptr) {
        Ok(spec) => Ok(Some(spec)),
        Err(e) if fallback && e.rule.alignment() => Ok(None),
        Err(e) => Err(fail(e)),
    }
}

impl<'g> Program<'g> {
    /// Loads `ptx` on `gpu`. `meta` is the META.json of the same compilation and `module` the
    /// specialized module it was compiled from (what `kir_compiler::compile` returns). Every
    /// kernel's parameter list in `meta` must be the launch ABI of the module's kernel.
    pub fn load(
        gpu: &'g Gpu,
        ptx: &str,
        meta: &Value,
        module: &Module,
    ) -> Result<Program<'g>, RuntimeError> {
        Program::load_image(gpu, Image::Ptx(ptx), meta, module)
    }

    /// [`Program::load`] from PTX (JIT-compiled by the driver) or from a cubin ptxas assembled
    /// for this GPU's architecture ([`super::cubin`]; no JIT).
    pub fn load_image(
        gpu: &'g Gpu,
        image: Image<'_>,
        meta: &Value,
        module: &Module,
    ) -> Result<Program<'g>, RuntimeError> {
        check_specialized(module).map_err(RuntimeError::Bind)?;
        // PTX: one module per kernel, JIT-compiled at once (`split_entries`); each symbol is
        // looked up in its own part (`None`: the one module holds every kernel).
        let (cu, owners): (Vec<CuModule>, Vec<Option<String>>) = match image {
            Image::Ptx(ptx) => {
                let parts = split_entries(ptx);
                let texts: Vec<&str> = parts.iter().map(|(_, t)| t.as_str()).collect();
                let cu = CuModule::load_all(gpu, &texts)?;
                (cu, parts.into_iter().map(|(s, _)| s).collect())
            }
            Image::Cubin(bytes) => (vec![CuModule::load_cubin(gpu, bytes)?], vec![None]),
        };
        let mut kernels = BTreeMap::new();
        for k in meta_kernels(meta, module)? {
            let at = owners
                .iter()
                .position(|s| s.as_deref().is_none_or(|s| s == k.symbol))
                .unwrap_or(0);
            let func = cu[at].function(&k.symbol, k.shared_bytes)?;
            kernels.insert(
                k.name,
                Loaded {
                    func,
                    symbol: k.symbol,
                    block: k.block,
                    shared_bytes: k.shared_bytes,
                    abi: k.abi,
                },
            );
        }
        Ok(Program {
            gpu,
            module: module.clone(),
            fork: Mutex::new(None),
            _cu: cu,
            kernels,
            filler: None,
        })
    }

    /// The entry params and the span errors about the entry point at.
    pub(super) fn entry(&self) -> Result<(&[Param], Span), RuntimeError> {
        entry_of(&self.module)
    }

    /// Allocates and binds everything for one run: inputs from `args` (converted to the param
    /// dtypes exactly as the interpreter converts them), except the tensors named in `random`,
    /// which take their shape from `args` (the data may be empty) and random values generated
    /// on the device from `seed`; `out` tensors and temps poisoned (NaN / −0x5A5A5A5A / 0xA5 /
    /// true). Then checks every launch (dims, dtypes, strides, `requires`), evaluates its grid
    /// and encodes its tensor maps from the bound buffers (a map that breaks a driver rule is an
    /// error naming the tensor, before anything is launched).
    pub fn bind(
        &mut self,
        args: &BTreeMap<String, HostArg>,
        random: &BTreeSet<String>,
        seed: u32,
    ) -> Result<Bound, RuntimeError> {
        if !random.is_empty() && self.filler.is_none() {
            self.filler = Some(Filler::load(self.gpu)?);
        }
        let filler = self.filler.as_ref();
        let mut counter = seed;
        let mut make = |n: NewBuf<'_>| -> Result<DevBuf, String> {
            let strides = n.strides.unwrap_or_else(|| contiguous_strides(&n.shape));
            let len = storage_len(n.name, &n.shape, &strides)?;
            let w = native_width(n.dtype);
            let mem = DevMem::alloc(len * w, n.name).map_err(|e| e.to_string())?;
            match (n.data, filler.filter(|_| random.contains(n.name))) {
                (Some(_), Some(f)) => {
                    counter = counter.wrapping_mul(0x9E37_79B9).wrapping_add(1);
                    f.fill(&mem, n.dtype, len, counter)
                        .map_err(|e| e.to_string())?
                }
                (Some(data), None) => {
                    let host = Buffer::from_host(
                        n.name,
                        n.dtype,
                        n.shape.clone(),
                        Some(strides.clone()),
                        data,
                    )?;
                    mem.upload(&host.to_native()?).map_err(|e| e.to_string())?
                }
                (None, _) => {
                    let bits = native_bits(n.dtype, poison(n.dtype));
                    mem.fill(&bits.to_le_bytes()[..w])
                        .map_err(|e| e.to_string())?
                }
            }
            Ok(DevBuf {
                name: n.name.to_string(),
                dtype: n.dtype,
                shape: n.shape,
                strides,
                ptr: mem.ptr,
                mem: Some(mem),
            })
        };
        let (params, span) = self.entry()?;
        let env = bind_entry(params, args, span, &mut make).map_err(RuntimeError::Bind)?;
        self.finish(env, &mut make)
    }

    /// The rest of a binding once the entry is bound: the program's temps made by `make`, then
    /// every launch checked, its grid evaluated and its tensor maps encoded.
    pub(super) fn finish(
        &self,
        mut env: EntryEnv<DevBuf>,
        make: &mut dyn FnMut(NewBuf<'_>) -> Result<DevBuf, String>,
    ) -> Result<Bound, RuntimeError> {
        let mut ready = Vec::new();
        let mut zeros = None;
        match &self.module.program {
            Some(p) => {
                for t in &p.temps {
                    if env.buffers.contains_key(&t.name) || env.scalars.contains_key(&t.name) {
                        return Err(RuntimeError::Bind(InterpError::at(
                            t.span,
                            format!("temp `{}` has the name of a program param", t.name),
                        )));
                    }
                    let buf = alloc(&t.name, &t.ty, &env.dims, t.span, make)
                        .map_err(RuntimeError::Bind)?;
                    env.buffers.insert(t.name.clone(), Arc::new(buf));
                }
                for l in &p.launches {
                    let (_, k) = self.module.kernel(&l.kernel).ok_or_else(|| {
                        RuntimeError::Bind(InterpError::at(
                            l.span,
                            format!("no kernel `@{}`", l.kernel),
                        ))
                    })?;
                    let (tensors, scalars, dims) = bind_launch(k, l, &env).map_err(|mut e| {
                        e.kernel.get_or_insert_with(|| k.name.clone());
                        RuntimeError::Bind(e)
                    })?;
                    ready.push(self.ready(k, &tensors, &scalars, &dims, &mut zeros)?);
                }
            }
            None => {
                if let Some(k) = self.module.kernels.values().next() {
                    ready.push(self.ready(k, &env.buffers, &env.scalars, &env.dims, &mut zeros)?);
                }
            }
        }
        let dims = env.dims.clone();
        let addrs = env
            .buffers
            .iter()
            .map(|(n, b)| (n.clone(), b.ptr))
            .collect();
        Ok(Bound {
            env,
            ready,
            _zeros: zeros,
            dims,
            addrs,
        })
    }

    /// One launch of kernel `k` with its bound tensors, scalars and dims, in ABI order, its
    /// tensor maps encoded from the bound buffers (`tensor_map.rs`). A launch with an empty grid
    /// never runs, so its maps stay zero bytes; a running launch's map of a tensor with a dim of 0
    /// is the stand-in over `zeros` (allocated and zeroed on first need).
    fn ready(
        &self,
        k: &kir_ir::Kernel,
        tensors: &BTreeMap<String, Arc<DevBuf>>,
        scalars: &BTreeMap<String, Arc<Tile>>,
        dims: &BTreeMap<String, i64>,
        zeros: &mut Option<DevMem>,
    ) -> Result<Ready, RuntimeError> {
        let loaded = self
            .kernels
            .get(&k.name)
            .ok_or_else(|| meta_err(format!("no kernel `{}`", k.name)))?;
        let grid = launch_grid(k, dims, scalars).map_err(RuntimeError::Bind)?;
        let limits = [i32::MAX as i64, 65535, 65535];
        if let Some(axis) = (0..3).find(|&a| grid[a] > limits[a]) {
            return Err(RuntimeError::Cuda(format!(
                "kernel `{}`: grid {grid:?} exceeds the CUDA limit {} in {}",
                k.name,
                limits[axis],
                ["x", "y", "z"][axis]
            )));
        }
        let abi = &loaded.abi;
        let mut args = Vec::with_capacity(abi.args.len());
        let mut patches = Vec::new();
        let runs = !grid.contains(&0);
        for a in &abi.args {
            let missing = || {
                RuntimeError::Cuda(format!(
                    "internal error: kernel `{}` has no binding for `{}`",
                    k.name,
                    a.name()
                ))
            };
            args.push(match a {
                AbiArg::Tensor { param, .. } => {
                    let buf = tensors.get(param).ok_or_else(missing)?;
                    if runs {
                        patches.push(Patch {
                            arg: args.len(),
                            buf: Arc::clone(buf),
                            map: None,
                        });
                    }
                    KernelArg::Word(buf.ptr)
                }
                AbiArg::TensorMap {
                    param,
                    boxes,
                    fallback,
                    ..
                } => {
                    let buf = tensors.get(param).ok_or_else(missing)?;
                    // The stand-in map of an empty tensor does not depend on its address.
                    if runs && !buf.shape.contains(&0) {
                        patches.push(Patch {
                            arg: args.len(),
                            buf: Arc::clone(buf),
                            map: Some((param.clone(), boxes.clone(), *fallback)),
                        });
                    }
                    KernelArg::Map(Box::new(if !runs {
                        TensorMapBytes([0; TENSOR_MAP_BYTES])
                    } else {
                        match map_spec(param, buf, buf.ptr, boxes, zeros, *fallback)? {
                            Some(spec) => encode_tensor_map(&spec)?,
                            // The kernel sees the misalignment and copies without the map.
                            None => TensorMapBytes([0; TENSOR_MAP_BYTES]),
                        }
                    }))
                }
                AbiArg::Scalar { param, dtype } => {
                    let s: Scalar = scalars
                        .get(param)
                        .and_then(|t| t.only())
                        .ok_or_else(missing)?;
                    KernelArg::Word(native_bits(*dtype, s))
                }
                AbiArg::Dim { name } => {
                    let v = *dims.get(name).ok_or_else(missing)?;
                    let v = i32::try_from(v).map_err(|_| {
                        RuntimeError::Cuda(format!(
                            "kernel `{}`: dim `{name}` = {v} does not fit the ABI's 32-bit dims",
                            k.name
                        ))
                    })?;
                    KernelArg::Word(v as u32 as u64)
                }
            });
        }
        let touches = touches(k, tensors);
        Ok(Ready {
            func: loaded.func,
            symbol: loaded.symbol.clone(),
            grid: grid.map(|g| g as u32),
            block: loaded.block,
            shared_bytes: loaded.shared_bytes,
            args,
            patches,
            touches,
        })
    }

    /// Launches every kernel of the program in order on the default stream (asynchronously;
    /// launches with an empty grid are skipped).
    pub fn launch(&self, b: &mut Bound) -> Result<(), RuntimeError> {
        self.launch_on(b, std::ptr::null_mut())
    }

    /// Waits for every launch to finish; a kernel fault shows here.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        self.gpu.synchronize()
    }

    /// Waits for the device, then copies every `out`/`inout` entry tensor back, as the
    /// interpreter returns them (values exactly those of the tensor's dtype).
    pub fn outputs(&self, b: &Bound) -> Result<BTreeMap<String, HostTensor>, RuntimeError> {
        self.gpu.synchronize()?;
        let (params, _) = self.entry()?;
        let mut out = BTreeMap::new();
        for p in params {
            if let ParamKind::Tensor(acc, _) = &p.kind {
                if acc.writes() {
                    let d = b.env.buffers.get(&p.name).ok_or_else(|| {
                        RuntimeError::Cuda(format!("internal error: no buffer for `{}`", p.name))
                    })?;
                    let mem = d.mem.as_ref().ok_or_else(|| {
                        RuntimeError::Cuda(format!(
                            "`{}` is the caller's tensor: the caller reads it back",
                            p.name
                        ))
                    })?;
                    let bytes = mem.download()?;
                    let host = Buffer::from_native(
                        &d.name,
                        d.dtype,
                        d.shape.clone(),
                        Some(d.strides.clone()),
                        &bytes,
                    )
                    .map_err(RuntimeError::Cuda)?;
                    out.insert(p.name.clone(), host.to_host().map_err(RuntimeError::Cuda)?);
                }
            }
        }
        Ok(out)
    }
}
