//! Tensor maps of the launch ABI (item 4, `abi.rs`): what a launcher passes to the driver's
//! `cuTensorMapEncodeTiled` for one [`AbiArg::TensorMap`], computed from the bound tensor's dtype,
//! shape, strides and address and the map's box. Pure: no GPU and no driver are needed, so the
//! rules are unit-tested here; the CUDA runtime (`runtime/program.rs` and `runtime/prepared.rs`,
//! feature `cuda`), which the Python package's launcher calls too, encodes exactly this.
//!
//! The encoding (docs/backends.md, "Tensor maps"):
//! - rank = the tensor's number of dims; `globalDim` = its shape reversed (innermost first);
//!   `globalStrides` = the byte strides of dims rank-2, rank-3, …, 0 (rank-1 values: the innermost
//!   dim, which must be contiguous, has none); `boxDim` = the box reversed; `elementStrides` all 1;
//! - data type `FLOAT16` or `BFLOAT16`, interleave `NONE`, swizzle `128B`, L2 promotion `256B`,
//!   out-of-bounds fill `NONE` (elements outside the tensor read as zero).
//!
//! Before encoding, the driver's rules are checked here, so a violation is an error naming the
//! tensor and the rule instead of the driver's bare `CUDA_ERROR_INVALID_VALUE`: rank 1..=5, the
//! global address 16-byte aligned, every dim in [1, 2^32], every stride a multiple of 16 and
//! below 2^40, the innermost dim contiguous, one box dim per tensor dim, each in [1, 256], and
//! the inner box row (box innermost × element size) a multiple of 16 bytes and at most the
//! 128-byte swizzle span.
//!
//! A tensor with a dim of 0 has no element, so every tensor copy from it reads only zeros. Its
//! map cannot be encoded (the driver rejects a zero dim); a launch that happens anyway (a
//! non-empty grid) gets [`TensorMapSpec::empty_standin`]: a map over one zero element.
//!
//! [`AbiArg::TensorMap`]: crate::abi::AbiArg::TensorMap

use kir_ir::Dtype;
use std::fmt;

/// Bytes of one encoded tensor map (`CUtensorMap`), the size of its kernel parameter.
pub const TENSOR_MAP_BYTES: usize = 128;
/// Highest rank `cuTensorMapEncodeTiled` takes.
pub const MAX_RANK: usize = 5;
/// Largest box dim the driver accepts.
pub const MAX_BOX_DIM: u32 = 256;
/// The swizzle span: the most bytes one box row may have under the 128-byte swizzle.
pub const SWIZZLE_SPAN_BYTES: u64 = 128;
/// `CU_TENSOR_MAP_INTERLEAVE_NONE`.
pub const INTERLEAVE_NONE: u32 = 0;
/// `CU_TENSOR_MAP_SWIZZLE_128B`.
pub const SWIZZLE_128B: u32 = 3;
/// `CU_TENSOR_MAP_L2_PROMOTION_L2_256B`.
pub const L2_PROMOTION_256B: u32 = 3;
/// `CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE` (out-of-bounds elements read as zero).
pub const OOB_FILL_NONE: u32 = 0;
/// The byte stride given to every dim of an [`TensorMapSpec::empty_standin`] (any multiple of
/// 16 is valid: each of its dims has one element).
pub const STANDIN_STRIDE: u64 = 16;

/// The element type of a tensor map: the 16-bit floats the TMA rings copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapDataType {
    /// `CU_TENSOR_MAP_DATA_TYPE_FLOAT16`.
    Float16,
    /// `CU_TENSOR_MAP_DATA_TYPE_BFLOAT16`.
    Bfloat16,
}

impl MapDataType {
    /// The map type of a kir dtype; `None` for dtypes the TMA rings never copy.
    pub fn of(dtype: Dtype) -> Option<MapDataType> {
        match dtype {
            Dtype::F16 => Some(MapDataType::Float16),
            Dtype::Bf16 => Some(MapDataType::Bfloat16),
            _ => None,
        }
    }

    /// The value of the driver's `CUtensorMapDataType` enum.
    pub fn cuda_value(self) -> u32 {
        match self {
            MapDataType::Float16 => 6,
            MapDataType::Bfloat16 => 9,
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        2
    }
}

/// Which of the driver's rules a tensor map breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapRule {
    /// The rank is 0 or above [`MAX_RANK`].
    Rank,
    /// The element type is not f16 or bf16.
    Dtype,
    /// The global address is not 16-byte aligned.
    Address,
    /// A dim is 0 or above 2^32.
    Dim,
    /// A byte stride is not a multiple of 16, or not below 2^40.
    Stride,
    /// The innermost dim is not contiguous (its stride is not one element).
    Contiguous,
    /// The box does not have one dim per tensor dim, or a box dim is outside [1, 256].
    Box,
    /// The inner box row is not a multiple of 16 bytes or exceeds the 128-byte swizzle span.
    InnerBox,
}

impl MapRule {
    /// A rule about where the tensor lies in memory (its address, strides or contiguity), which
    /// a warp-specialized kernel checks itself and copies around (abi.rs, `fallback`).
    pub fn alignment(self) -> bool {
        matches!(
            self,
            MapRule::Address | MapRule::Stride | MapRule::Contiguous
        )
    }
}

/// A tensor map that breaks one of the driver's rules; it displays as
/// ``tensor map of `NAME`: WHY``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapError {
    /// The tensor param the map describes.
    pub tensor: String,
    /// The rule broken.
    pub rule: MapRule,
    /// What is wrong, with the offending values.
    pub message: String,
}

impl fmt::Display for TensorMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tensor map of `{}`: {}", self.tensor, self.message)
    }
}

impl std::error::Error for TensorMapError {}

/// Every argument of one `cuTensorMapEncodeTiled` call but the output map, already checked
/// against the driver's rules (module doc): encoding it can fail only for reasons the driver
/// does not document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapSpec {
    /// The tensor param the map describes (for error messages).
    pub tensor: String,
    /// `tensorDataType`.
    pub data_type: MapDataType,
    /// `tensorRank`: the length of `global_dim`, `box_dim` and `element_strides`.
    pub rank: u32,
    /// `globalAddress`: the device address of the tensor's first element, 16-byte aligned.
    pub global_address: u64,
    /// `globalDim`: elements per dim, innermost first.
    pub global_dim: Vec<u64>,
    /// `globalStrides`: bytes per step of dims 1.. of `global_dim` (rank − 1 values).
    pub global_strides: Vec<u64>,
    /// `boxDim`: elements per dim of one copy, innermost first.
    pub box_dim: Vec<u32>,
    /// `elementStrides`: all 1.
    pub element_strides: Vec<u32>,
    /// `interleave`: [`INTERLEAVE_NONE`].
    pub interleave: u32,
    /// `swizzle`: [`SWIZZLE_128B`].
    pub swizzle: u32,
    /// `l2Promotion`: [`L2_PROMOTION_256B`].
    pub l2_promotion: u32,
    /// `oobFill`: [`OOB_FILL_NONE`].
    pub oob_fill: u32,
}

fn err(tensor: &str, rule: MapRule, message: String) -> TensorMapError {
    TensorMapError {
        tensor: tensor.to_string(),
        rule,
        message,
    }
}

/// Checks the rank and the element type and reverses and checks the box.
fn common(
    tensor: &str,
    dtype: Dtype,
    rank: usize,
    boxes: &[u32],
) -> Result<(MapDataType, Vec<u32>), TensorMapError> {
    if rank == 0 || rank > MAX_RANK {
        return Err(err(
            tensor,
            MapRule::Rank,
            format!("rank {rank}, but a tensor map has rank 1 to {MAX_RANK}"),
        ));
    }
    let data_type = MapDataType::of(dtype).ok_or_else(|| {
        err(
            tensor,
            MapRule::Dtype,
            format!(
                "element type {}, but tensor maps are of f16 or bf16",
                dtype.name()
            ),
        )
    })?;
    if boxes.len() != rank {
        return Err(err(
            tensor,
            MapRule::Box,
            format!("box {boxes:?} has {} dims, the tensor {rank}", boxes.len()),
        ));
    }
    if let Some(b) = boxes.iter().find(|&&b| b == 0 || b > MAX_BOX_DIM) {
        return Err(err(
            tensor,
            MapRule::Box,
            format!("box {boxes:?} has a dim of {b}, outside [1, {MAX_BOX_DIM}]"),
        ));
    }
    let inner = u64::from(boxes[rank - 1]) * data_type.bytes();
    if !inner.is_multiple_of(16) || inner > SWIZZLE_SPAN_BYTES {
        return Err(err(
            tensor,
            MapRule::InnerBox,
            format!(
                "the inner box row is {inner} bytes (box {boxes:?}), but it must be a multiple \
                 of 16 bytes and at most the {SWIZZLE_SPAN_BYTES}-byte swizzle span"
            ),
        ));
    }
    Ok((data_type, boxes.iter().rev().copied().collect()))
}

fn spec(
    tensor: &str,
    data_type: MapDataType,
    address: u64,
    global_dim: Vec<u64>,
    global_strides: Vec<u64>,
    box_dim: Vec<u32>,
) -> TensorMapSpec {
    TensorMapSpec {
        tensor: tensor.to_string(),
        data_type,
        rank: global_dim.len() as u32,
        global_address: address,
        element_strides: vec![1; global_dim.len()],
        global_dim,
        global_strides,
        box_dim,
        interleave: INTERLEAVE_NONE,
        swizzle: SWIZZLE_128B,
        l2_promotion: L2_PROMOTION_256B,
        oob_fill: OOB_FILL_NONE,
    }
}

/// The encoding of the tensor map of `tensor` (elements of `dtype`, dims `shape` and element
/// strides `strides`, outermost first, first element at device address `address`) with box
/// `boxes` (outermost first, as META.json's `box` and [`AbiArg::TensorMap`] list it). Fails,
/// naming the tensor and the rule, when the map breaks one of the driver's rules (module doc);
/// a tensor with a dim of 0 is such a failure ([`MapRule::Dim`]), see
/// [`TensorMapSpec::empty_standin`].
///
/// [`AbiArg::TensorMap`]: crate::abi::AbiArg::TensorMap
pub fn tensor_map_spec(
    tensor: &str,
    dtype: Dtype,
    shape: &[usize],
    strides: &[usize],
    boxes: &[u32],
    address: u64,
) -> Result<TensorMapSpec, TensorMapError> {
    let rank = shape.len();
    let (data_type, box_dim) = common(tensor, dtype, rank, boxes)?;
    if strides.len() != rank {
        return Err(err(
            tensor,
            MapRule::Stride,
            format!("{} strides for {rank} dims", strides.len()),
        ));
    }
    if !address.is_multiple_of(16) {
        return Err(err(
            tensor,
            MapRule::Address,
            format!("address {address:#x} is not 16-byte aligned"),
        ));
    }
    if let Some(&d) = shape.iter().find(|&&d| d == 0 || d as u64 > 1 << 32) {
        return Err(err(
            tensor,
            MapRule::Dim,
            format!("shape {shape:?} has a dim of {d}, outside [1, 2^32]"),
        ));
    }
    if strides[rank - 1] != 1 {
        return Err(err(
            tensor,
            MapRule::Contiguous,
            format!(
                "the innermost dim has a stride of {} elements (strides {strides:?}); a tensor \
                 map needs it contiguous",
                strides[rank - 1]
            ),
        ));
    }
    let mut global_strides = Vec::with_capacity(rank - 1);
    for &s in strides[..rank - 1].iter().rev() {
        let bytes = (s as u64).checked_mul(data_type.bytes());
        match bytes {
            Some(b) if b.is_multiple_of(16) && b < 1 << 40 => global_strides.push(b),
            _ => {
                return Err(err(
                    tensor,
                    MapRule::Stride,
                    format!(
                        "a stride of {s} elements ({} bytes; strides {strides:?}) is not a \
                         multiple of 16 bytes below 2^40",
                        bytes.map_or("overflowing".to_string(), |b| b.to_string())
                    ),
                ))
            }
        }
    }
    let global_dim = shape.iter().rev().map(|&d| d as u64).collect();
    Ok(spec(
        tensor,
        data_type,
        address,
        global_dim,
        global_strides,
        box_dim,
    ))
}

impl TensorMapSpec {
    /// A valid map for a tensor with a dim of 0, for a launch that happens anyway: the same
    /// rank, type and box, every dim 1 and every stride [`STANDIN_STRIDE`], over `zeros`, the
    /// address of at least 16 zero bytes (16-byte aligned). Every copy through it reads zeros,
    /// exactly as through the real tensor, which has no element. Fails only on the rank, type
    /// and box rules, and on a misaligned `zeros`.
    pub fn empty_standin(
        tensor: &str,
        dtype: Dtype,
        rank: usize,
        boxes: &[u32],
        zeros: u64,
    ) -> Result<TensorMapSpec, TensorMapError> {
        let (data_type, box_dim) = common(tensor, dtype, rank, boxes)?;
        if !zeros.is_multiple_of(16) {
            return Err(err(
                tensor,
                MapRule::Address,
                format!("address {zeros:#x} is not 16-byte aligned"),
            ));
        }
        Ok(spec(
            tensor,
            data_type,
            zeros,
            vec![1; rank],
            vec![STANDIN_STRIDE; rank - 1],
            box_dim,
        ))
    }
}

#[cfg(test)]
mod tests;
