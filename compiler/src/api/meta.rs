//! The typed launch metadata: [`KernelMeta`] is the schema of META.json (the document
//! `kirc compile --meta` writes and backends/src/meta.rs builds; docs/backends.md, "Launch ABI
//! and META.json"), with serde's `Serialize` and `Deserialize`. Parsing META.json text into it
//! and serializing it back gives the same JSON value (tests/tests/api_meta.rs checks this for
//! every built-in op on every target), so a launcher may keep either form.
//!
//! Formulas (dims, grids, requirements) stay text, as META.json holds them; [`KernelMeta::grid`]
//! and [`KernelEntry::grid`] evaluate a grid for the caller's dims (compiler/src/api/grid.rs).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// META.json: everything a launcher needs to run a compiled module — its interface, the
/// buffers it needs, and per kernel the symbol, argument order, block, grid formula and shared
/// memory.
///
/// ```
/// use kir_compiler::{Backend, Kernel, KernelMeta, Target};
///
/// let k = Kernel::op("rmsnorm_fwd").target(Target::Sm80).cache(false).compile()?;
/// let meta: &KernelMeta = k.meta();
/// assert_eq!(meta.target, "sm_80");
/// assert_eq!(meta.kernels[0].symbol, k.symbols().next().unwrap());
/// // The same document kirc writes, typed both ways.
/// let back: KernelMeta = serde_json::from_str(&k.meta_json()).unwrap();
/// assert_eq!(&back, meta);
/// # Ok::<(), kir_compiler::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMeta {
    /// The module's name.
    pub name: String,
    /// The target's name (`sm_90a`).
    pub target: String,
    /// What the code is: `ptx` or `cuda`.
    pub emit: String,
    /// The `.version` the PTX declares (`"8.0"`).
    pub ptx_version: String,
    /// The first kernel's ABI (the single-kernel view); `None` for a module with no kernel.
    pub params: Option<Vec<AbiParam>>,
    /// The first kernel's threads per block.
    pub block: Option<[u32; 3]>,
    /// The first kernel's grid formulas.
    pub grid: Option<Grid>,
    /// The first kernel's dynamic shared memory in bytes.
    pub shared_bytes: Option<u32>,
    /// The first kernel's registers per thread, when known.
    pub registers: Option<u32>,
    /// The module's interface: the entry's params (the tensors and scalars a caller passes).
    pub entry_params: Vec<Param>,
    /// Buffers the caller allocates before the launches.
    pub temps: Vec<Temp>,
    /// Every kernel of the code, in module order.
    pub kernels: Vec<KernelEntry>,
    /// The launches in order, binding each kernel's params to entry params or temps.
    pub launches: Vec<Launch>,
    /// The grammar of the grid formulas, in words.
    pub grid_grammar: String,
    /// The grammar of the `requires` conditions, in words.
    pub requires_grammar: String,
}

/// One kernel of the code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEntry {
    /// The kernel's name in the module.
    pub name: String,
    /// The symbol in the code (the `.entry` or `extern "C"` name: the kernel's name and a suffix
    /// naming its specialization).
    pub symbol: String,
    /// The launch ABI: the arguments in the order the kernel takes them.
    pub params: Vec<AbiParam>,
    /// Threads per block (x, y, z).
    pub block: [u32; 3],
    /// The grid formulas over the kernel's dims.
    pub grid: Grid,
    /// Conditions over the dims and scalar params that must all hold at launch (the code does
    /// not check them).
    pub requires: Vec<String>,
    /// Dynamic shared memory to request, in bytes (above 48 KB the launcher must raise the
    /// kernel's limit first).
    pub shared_bytes: u32,
    /// Registers per thread, when known.
    pub registers: Option<u32>,
    /// The kernel's own params with their dims, from which the launcher binds the kernel's dims
    /// to the buffers it is given.
    pub kernel_params: Vec<Param>,
}

/// The grid of a kernel: one formula per axis over the kernel's dims (integers, dim names,
/// `+ - *`, `/` (floor), `%`, `cdiv(a, b)`, `min`, `max`, parentheses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grid {
    /// The x formula (`cdiv(M, 128)`).
    pub x: String,
    /// The y formula.
    pub y: String,
    /// The z formula.
    pub z: String,
}

/// A param of the module's entry or of a kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Param {
    /// A tensor in global memory.
    Tensor {
        /// The param's name.
        name: String,
        /// Whether the kernel reads it, writes it or both.
        access: Access,
        /// The element type (`bf16`, `f32`, ...).
        dtype: String,
        /// The dims, outermost first: plain names bind from the caller's shapes, others are
        /// formulas over them.
        dims: Vec<String>,
        /// The strides in elements (formulas over the dims), or `None` for C order.
        strides: Option<Vec<String>>,
    },
    /// A scalar passed by value.
    Scalar {
        /// The param's name.
        name: String,
        /// The scalar's type.
        dtype: String,
    },
}

impl Param {
    /// The param's name.
    pub fn name(&self) -> &str {
        match self {
            Param::Tensor { name, .. } | Param::Scalar { name, .. } => name,
        }
    }
}

/// How a kernel uses a tensor param.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read only.
    In,
    /// Written only (its previous contents are not read).
    Out,
    /// Read and written.
    Inout,
}

/// One argument of a kernel's launch ABI, in the order the kernel takes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AbiParam {
    /// A global pointer to the tensor param `name`.
    Tensor {
        /// The argument's position.
        ptr_index: u32,
        /// The tensor param.
        name: String,
        /// Its element type.
        dtype: String,
    },
    /// The value of the scalar param `name`.
    Scalar {
        /// The argument's position.
        ptr_index: u32,
        /// The scalar param.
        name: String,
        /// Its type.
        dtype: String,
    },
    /// The value of the symbolic dim `name`, as an `i32`.
    Dim {
        /// The argument's position.
        ptr_index: u32,
        /// The dim.
        name: String,
        /// Always `i32`.
        dtype: String,
    },
    /// A 128-byte tensor map (TMA descriptor) of the tensor param `name`, passed by value.
    TensorMap {
        /// The argument's position.
        ptr_index: u32,
        /// The tensor param the map describes (the buffer passed for it).
        name: String,
        /// Its element type (`bf16` or `f16`).
        dtype: String,
        /// The box, outermost dim first.
        #[serde(rename = "box")]
        box_dims: Vec<u32>,
        /// The swizzle (`128B`).
        swizzle: String,
        /// What out-of-bounds elements read as (`zero`).
        oob_fill: String,
        /// What to pass when the tensor breaks the driver's alignment rules.
        unaligned: Unaligned,
    },
}

impl AbiParam {
    /// The argument's position in the ABI.
    pub fn ptr_index(&self) -> u32 {
        match self {
            AbiParam::Tensor { ptr_index, .. }
            | AbiParam::Scalar { ptr_index, .. }
            | AbiParam::Dim { ptr_index, .. }
            | AbiParam::TensorMap { ptr_index, .. } => *ptr_index,
        }
    }

    /// The param (or dim) the argument carries.
    pub fn name(&self) -> &str {
        match self {
            AbiParam::Tensor { name, .. }
            | AbiParam::Scalar { name, .. }
            | AbiParam::Dim { name, .. }
            | AbiParam::TensorMap { name, .. } => name,
        }
    }
}

/// What a launcher passes for a tensor map whose tensor breaks the driver's alignment rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unaligned {
    /// Nothing: the launch is an error naming the tensor.
    Error,
    /// 128 zero bytes: the kernel checks the tensor itself and copies without the map.
    Zeros,
}

/// A buffer the caller allocates before the launches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Temp {
    /// The temp's name (what [`Launch::args`] binds to).
    pub name: String,
    /// Its element type.
    pub dtype: String,
    /// Its dims, formulas over the entry's dims.
    pub dims: Vec<String>,
}

/// One launch of the module's program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// The kernel launched ([`KernelEntry::name`]).
    pub kernel: String,
    /// Each kernel param's argument: an entry param or a temp, by name.
    pub args: BTreeMap<String, String>,
}

impl KernelMeta {
    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelEntry> {
        self.kernels.iter().find(|k| k.name == name)
    }
}
