//! Unit tests of the tensor-map encoding (`tensor_map.rs`): the arguments of
//! `cuTensorMapEncodeTiled` for attention- and GEMM-like tensors, and one failing case per
//! driver rule, each naming the tensor.

use super::*;
use kir_ir::Dtype;

/// C-order element strides of `shape`.
fn c_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The spec of a C-contiguous tensor at a 256-byte aligned address.
fn contiguous(
    dtype: Dtype,
    shape: &[usize],
    boxes: &[u32],
) -> Result<TensorMapSpec, TensorMapError> {
    tensor_map_spec(
        "t",
        dtype,
        shape,
        &c_strides(shape),
        boxes,
        0x7f00_0000_0100,
    )
}

/// The rule `result` breaks; panics if it is valid.
fn rule(result: Result<TensorMapSpec, TensorMapError>) -> MapRule {
    let e = result.expect_err("the map must be rejected");
    assert!(
        e.to_string().starts_with("tensor map of `"),
        "the error names the tensor: {e}"
    );
    e.rule
}

#[test]
fn attention_tensor_bf16_box_1_1_64_64() {
    // q of attention_fwd: [B, H, S, 128] bf16, one 64×64 box per copy.
    let s = tensor_map_spec(
        "q",
        Dtype::Bf16,
        &[2, 16, 1000, 128],
        &c_strides(&[2, 16, 1000, 128]),
        &[1, 1, 64, 64],
        0x7f00_0000_0000,
    )
    .unwrap();
    assert_eq!(s.tensor, "q");
    assert_eq!(s.rank, 4);
    assert_eq!(s.data_type, MapDataType::Bfloat16);
    assert_eq!(s.data_type.cuda_value(), 9);
    assert_eq!(s.global_address, 0x7f00_0000_0000);
    assert_eq!(s.global_dim, vec![128, 1000, 16, 2]);
    // Byte strides of dims 2, 1, 0: one row of 128 bf16, one head, one batch.
    assert_eq!(s.global_strides, vec![256, 256 * 1000, 256 * 1000 * 16]);
    assert_eq!(s.box_dim, vec![64, 64, 1, 1]);
    assert_eq!(s.element_strides, vec![1, 1, 1, 1]);
    assert_eq!(
        (s.interleave, s.swizzle, s.l2_promotion, s.oob_fill),
        (
            INTERLEAVE_NONE,
            SWIZZLE_128B,
            L2_PROMOTION_256B,
            OOB_FILL_NONE
        )
    );
    assert_eq!((SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_NONE), (3, 3, 0));
}

#[test]
fn gemm_operand_f16_and_declared_strides() {
    let s = contiguous(Dtype::F16, &[4096, 512], &[128, 64]).unwrap();
    assert_eq!(s.data_type.cuda_value(), 6);
    assert_eq!((s.rank, s.global_dim.clone()), (2, vec![512, 4096]));
    assert_eq!(s.global_strides, vec![1024]);
    assert_eq!(s.box_dim, vec![64, 128]);
    // A padded row pitch (declared strides) is its own byte stride.
    let s = tensor_map_spec("b", Dtype::Bf16, &[64, 100], &[128, 1], &[64, 64], 0x1000).unwrap();
    assert_eq!(
        (s.global_dim.clone(), s.global_strides.clone()),
        (vec![100, 64], vec![256])
    );
    // Rank 1 has no stride; rank 5 is the largest.
    let s = contiguous(Dtype::Bf16, &[4096], &[64]).unwrap();
    assert_eq!((s.rank, s.global_strides.len()), (1, 0));
    contiguous(Dtype::Bf16, &[2, 2, 2, 2, 64], &[1, 1, 1, 2, 64]).unwrap();
}

#[test]
fn rank_rule() {
    assert_eq!(rule(contiguous(Dtype::Bf16, &[], &[])), MapRule::Rank);
    assert_eq!(
        rule(contiguous(
            Dtype::Bf16,
            &[1, 1, 1, 1, 1, 64],
            &[1, 1, 1, 1, 1, 64]
        )),
        MapRule::Rank
    );
}

#[test]
fn dtype_rule() {
    let e = contiguous(Dtype::F32, &[64, 64], &[64, 32]).unwrap_err();
    assert_eq!(e.rule, MapRule::Dtype);
    assert!(e.to_string().contains("f32"), "{e}");
}

#[test]
fn address_rule() {
    let shape = [64, 64];
    let e = tensor_map_spec(
        "k",
        Dtype::Bf16,
        &shape,
        &c_strides(&shape),
        &[64, 64],
        0x1008,
    )
    .unwrap_err();
    assert_eq!(e.rule, MapRule::Address);
    assert_eq!(e.tensor, "k");
    assert!(e.to_string().contains("0x1008"), "{e}");
}

#[test]
fn dim_rule() {
    // An empty tensor and a dim past 2^32.
    assert_eq!(
        rule(contiguous(Dtype::Bf16, &[2, 0, 128], &[1, 64, 64])),
        MapRule::Dim
    );
    let big = (1usize << 32) + 1;
    assert_eq!(
        rule(tensor_map_spec("t", Dtype::Bf16, &[big], &[1], &[64], 0)),
        MapRule::Dim
    );
    contiguous(Dtype::Bf16, &[1 << 32], &[64]).unwrap();
}

#[test]
fn stride_rule() {
    // 100 bf16 per row: 200 bytes, not a multiple of 16.
    let e = contiguous(Dtype::Bf16, &[64, 100], &[64, 64]).unwrap_err();
    assert_eq!(e.rule, MapRule::Stride);
    assert!(e.to_string().contains("200 bytes"), "{e}");
    // 2^40 bytes per step of dim 0: too far.
    assert_eq!(
        rule(contiguous(
            Dtype::Bf16,
            &[2, 1 << 20, 1 << 19],
            &[1, 64, 64]
        )),
        MapRule::Stride
    );
    // A stride list of the wrong length.
    assert_eq!(
        rule(tensor_map_spec(
            "t",
            Dtype::Bf16,
            &[64, 64],
            &[64],
            &[64, 64],
            0
        )),
        MapRule::Stride
    );
}

#[test]
fn contiguous_rule() {
    // A transposed view: the innermost dim steps 64 elements.
    let e = tensor_map_spec("v", Dtype::Bf16, &[64, 64], &[1, 64], &[64, 64], 0).unwrap_err();
    assert_eq!(e.rule, MapRule::Contiguous);
    assert_eq!(e.tensor, "v");
}

#[test]
fn box_rule() {
    assert_eq!(
        rule(contiguous(Dtype::Bf16, &[64, 64], &[64])),
        MapRule::Box
    );
    assert_eq!(
        rule(contiguous(Dtype::Bf16, &[64, 64], &[0, 64])),
        MapRule::Box
    );
    assert_eq!(
        rule(contiguous(Dtype::Bf16, &[512, 64], &[257, 64])),
        MapRule::Box
    );
    contiguous(Dtype::Bf16, &[512, 64], &[256, 64]).unwrap();
}

#[test]
fn inner_box_rule() {
    // 128 bf16 = 256 bytes: past the 128-byte swizzle span.
    let e = contiguous(Dtype::Bf16, &[64, 128], &[64, 128]).unwrap_err();
    assert_eq!(e.rule, MapRule::InnerBox);
    assert!(e.to_string().contains("256 bytes"), "{e}");
    // 4 f16 = 8 bytes: not a multiple of 16.
    assert_eq!(
        rule(contiguous(Dtype::F16, &[64, 64], &[64, 4])),
        MapRule::InnerBox
    );
    contiguous(Dtype::F16, &[64, 64], &[64, 8]).unwrap();
}

#[test]
fn empty_standin_reads_one_zero_element() {
    let s = TensorMapSpec::empty_standin("k", Dtype::Bf16, 4, &[1, 1, 64, 64], 0x2000).unwrap();
    assert_eq!(s.global_dim, vec![1; 4]);
    assert_eq!(s.global_strides, vec![STANDIN_STRIDE; 3]);
    assert_eq!(
        (s.box_dim.clone(), s.global_address),
        (vec![64, 64, 1, 1], 0x2000)
    );
    assert_eq!(s.element_strides, vec![1; 4]);
    // It still checks what it keeps of the tensor.
    assert_eq!(
        rule(TensorMapSpec::empty_standin(
            "k",
            Dtype::Bf16,
            2,
            &[64, 128],
            0x2000
        )),
        MapRule::InnerBox
    );
    assert_eq!(
        rule(TensorMapSpec::empty_standin(
            "k",
            Dtype::Bf16,
            2,
            &[64, 64],
            0x2004
        )),
        MapRule::Address
    );
}

/// The rules a warp-specialized kernel checks itself (and copies around, the launcher passing
/// zeros) are exactly where the tensor lies: its address, its strides, its contiguity; odd K
/// or N rows of a GEMM break them, and nothing else does.
#[test]
fn alignment_rules_are_the_ones_a_kernel_copies_around() {
    let all = [
        MapRule::Rank,
        MapRule::Dtype,
        MapRule::Address,
        MapRule::Dim,
        MapRule::Stride,
        MapRule::Contiguous,
        MapRule::Box,
        MapRule::InnerBox,
    ];
    let aligned: Vec<MapRule> = all.into_iter().filter(|r| r.alignment()).collect();
    assert_eq!(
        aligned,
        vec![MapRule::Address, MapRule::Stride, MapRule::Contiguous]
    );
    // GEMM's A with K = 201: a row of 402 bytes.
    let r = rule(tensor_map_spec(
        "a",
        Dtype::Bf16,
        &[1, 300, 201],
        &[300 * 201, 201, 1],
        &[1, 128, 64],
        0x1000,
    ));
    assert!(r.alignment(), "{r:?}");
}
