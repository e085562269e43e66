//! Encoding TMA tensor maps with the driver (`cuTensorMapEncodeTiled`, looked up when the first
//! map is encoded, so drivers older than CUDA 12.0 still run programs without TMA). The map's
//! arguments are computed and checked against the driver's documented rules beforehand by
//! `crate::tensor_map`; this file only hands them to the driver.

use super::driver::{check, TensorMapBytes};
use super::RuntimeError;
use crate::tensor_map::{
    MapDataType, TensorMapSpec, INTERLEAVE_NONE, L2_PROMOTION_256B, OOB_FILL_NONE, SWIZZLE_128B,
    TENSOR_MAP_BYTES,
};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::OnceLock;

/// Encodes the tensor map `spec` (already checked against the driver's documented rules by
/// `tensor_map::tensor_map_spec`) with `cuTensorMapEncodeTiled`. Fails, naming the tensor, when
/// the driver has no such entry point (older than CUDA 12.0) or rejects the map.
pub(crate) fn encode_tensor_map(spec: &TensorMapSpec) -> Result<TensorMapBytes, RuntimeError> {
    // Looked up once per process: every call of a prepared launch encodes its maps again.
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `Gpu::open` found the library; this only looks the symbol up.
    let present = *PRESENT.get_or_init(|| unsafe {
        sys::culib()
            .get::<*const c_void>(b"cuTensorMapEncodeTiled")
            .is_ok()
    });
    if !present {
        return Err(RuntimeError::NoDriver(format!(
            "tensor map of `{}`: the CUDA driver has no `cuTensorMapEncodeTiled` (it needs \
             CUDA 12.0 or later)",
            spec.tensor
        )));
    }
    use sys::{
        CUtensorMapDataType as T, CUtensorMapFloatOOBfill as O, CUtensorMapInterleave as I,
        CUtensorMapL2promotion as L, CUtensorMapSwizzle as S,
    };
    let want = [
        INTERLEAVE_NONE,
        SWIZZLE_128B,
        L2_PROMOTION_256B,
        OOB_FILL_NONE,
    ];
    let fixed = [
        spec.interleave,
        spec.swizzle,
        spec.l2_promotion,
        spec.oob_fill,
    ];
    if fixed != want {
        return Err(RuntimeError::Cuda(format!(
            "internal error: tensor map of `{}` asks for interleave/swizzle/L2/fill {fixed:?}",
            spec.tensor
        )));
    }
    let data_type = match spec.data_type {
        MapDataType::Float16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        MapDataType::Bfloat16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    };
    let n = spec.rank as usize;
    if spec.global_dim.len() != n
        || spec.box_dim.len() != n
        || spec.element_strides.len() != n
        || spec.global_strides.len() + 1 != n
    {
        return Err(RuntimeError::Cuda(format!(
            "internal error: tensor map of `{}` has arrays of the wrong lengths",
            spec.tensor
        )));
    }
    let mut map = TensorMapBytes([0; TENSOR_MAP_BYTES]);
    // SAFETY: `map` is 128 writable bytes aligned to 128 (CUtensorMap needs 64 here); every
    // array holds `rank` values (strides rank − 1), as checked above; the address is only
    // recorded in the map.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.0.as_mut_ptr() as *mut sys::CUtensorMap,
            data_type,
            spec.rank,
            spec.global_address as *mut c_void,
            spec.global_dim.as_ptr(),
            spec.global_strides.as_ptr(),
            spec.box_dim.as_ptr(),
            spec.element_strides.as_ptr(),
            I::CU_TENSOR_MAP_INTERLEAVE_NONE,
            S::CU_TENSOR_MAP_SWIZZLE_128B,
            L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            O::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(map);
    }
    check(
        r,
        &format!(
            "encoding the tensor map of `{}` (cuTensorMapEncodeTiled: dims {:?}, byte strides \
             {:?}, box {:?}, address {:#x})",
            spec.tensor, spec.global_dim, spec.global_strides, spec.box_dim, spec.global_address
        ),
    )?;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::sys;
    use crate::tensor_map::{
        MapDataType, INTERLEAVE_NONE, L2_PROMOTION_256B, OOB_FILL_NONE, SWIZZLE_128B,
        TENSOR_MAP_BYTES,
    };

    /// The numbers `tensor_map.rs` documents (and the Python launchers pass) are cudarc's.
    #[test]
    fn tensor_map_enums_are_the_drivers() {
        use sys::CUtensorMapDataType as T;
        assert_eq!(
            MapDataType::Float16.cuda_value(),
            T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16 as u32
        );
        assert_eq!(
            MapDataType::Bfloat16.cuda_value(),
            T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 as u32
        );
        assert_eq!(
            INTERLEAVE_NONE,
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE as u32
        );
        assert_eq!(
            SWIZZLE_128B,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B as u32
        );
        assert_eq!(
            L2_PROMOTION_256B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B as u32
        );
        assert_eq!(
            OOB_FILL_NONE,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE as u32
        );
        assert_eq!(std::mem::size_of::<sys::CUtensorMap>(), TENSOR_MAP_BYTES);
        assert_eq!(
            std::mem::size_of::<super::TensorMapBytes>(),
            TENSOR_MAP_BYTES
        );
        assert!(
            std::mem::align_of::<super::TensorMapBytes>()
                >= std::mem::align_of::<sys::CUtensorMap>()
        );
    }
}
