//! Resource limits of tiles, part of the IR's semantics (docs/ir.md, "Limits"): a tile is the
//! data one program instance (one thread block) holds, so its size is bounded by what a block
//! can hold, and every size is computed with overflow-checked arithmetic.
//!
//! - [`MAX_TILE_ELEMENTS`]: elements of one tile, checked as soon as every dim is a literal
//!   (even while the element type is still a constant's name).
//! - [`MAX_TILE_BYTES`]: bytes of one tile, the register estimate: a tile larger than a
//!   block's whole register file cannot be held by the block however the backend distributes it.
//!
//! - [`MAX_GRID`]: the grid dimensions of a launch (checked in `names` for constant grids).
//!
//! The shared-memory estimate of scheduled IR is in `rules_sched` ([`super::rules_sched::SMEM_LIMIT_BYTES`]),
//! and the compile driver bounds the size of the unrolled PTX of each kernel.

use super::common::{err_note, lit_int, Errs};
use crate::expr::Expr;
use crate::span::Span;
use crate::types::Type;

/// The most elements one tile may have: 2^24 (16,777,216). Far above anything a block can
/// hold (see [`MAX_TILE_BYTES`]); it bounds tiles whose element type is not known yet, so no
/// pass or backend ever computes with, allocates or unrolls an absurd tile.
pub const MAX_TILE_ELEMENTS: u64 = 1 << 24;

/// The most bytes one tile may occupy: 262,144, the register file one block can use (65,536
/// 32-bit registers on sm_80 through sm_120a). Elements count at their size in global memory
/// (i1 as one byte).
pub const MAX_TILE_BYTES: u64 = 65_536 * 4;

/// The largest grid dimension of a launch, by axis: x up to 2^31 − 1, y and z up to 65,535
/// (CUDA's limits). The verifier checks constant grids against it; the interpreter and the GPU
/// runtime check every launch's evaluated grid.
pub const MAX_GRID: [i64; 3] = [i32::MAX as i64, 65_535, 65_535];

/// The element count of a tile with these dims: `None` while a dim is not a literal (or is not
/// positive, which the caller reports), `Some(None)` when the product overflows `u64`.
pub fn tile_elements(dims: &[Expr]) -> Option<Option<u64>> {
    let mut n: Option<u64> = Some(1);
    for d in dims {
        let v = u64::try_from(lit_int(d)?).ok().filter(|&v| v > 0)?;
        n = n.and_then(|n| n.checked_mul(v));
    }
    Some(n)
}

/// Checks a value's tile type against [`MAX_TILE_ELEMENTS`] and [`MAX_TILE_BYTES`]; `what` names
/// the value in the message.
pub(crate) fn check_tile(errs: &mut Errs, span: Span, t: &Type, what: &str) {
    let Type::Tile(dims, _) = t else { return };
    let how = "smaller tiles (a smaller block size constant) or more program instances";
    match tile_elements(dims) {
        None => {}
        Some(None) => err_note(
            errs,
            span,
            format!("{what} is {t}, whose element count overflows 64 bits (the limit is {MAX_TILE_ELEMENTS} elements per tile)"),
            how,
        ),
        Some(Some(n)) if n > MAX_TILE_ELEMENTS => err_note(
            errs,
            span,
            format!("{what} is {t}, with {n} elements: over the limit of {MAX_TILE_ELEMENTS} elements per tile"),
            how,
        ),
        Some(Some(n)) => {
            let Some(d) = t.dtype() else { return };
            let bytes = n.saturating_mul(d.size_bytes() as u64);
            if bytes > MAX_TILE_BYTES {
                err_note(
                    errs,
                    span,
                    format!("{what} is {t}, {bytes} bytes: more than the {MAX_TILE_BYTES}-byte register file of a block (the limit per tile)"),
                    how,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::text::parse;
    use crate::verifier::verify;

    /// The verifier's messages for a one-kernel module whose load gives `ty`.
    fn errors(ty: &str) -> Vec<String> {
        let src = format!(
            "module m\nconst DTYPE: {{f32, f16}} = f32\nkernel @k(x: in tensor<f32>[N]) grid [1, 1, 1] {{\n  %z = const 0 : i32\n  %v = load x[%z] other 0.0 : {ty}\n}}\n"
        );
        let m = parse(&src).unwrap_or_else(|e| panic!("{ty}: {e:?}"));
        match verify(&m) {
            Ok(()) => vec![],
            Err(d) => d.0.into_iter().map(|e| e.message).collect(),
        }
    }

    fn limit_errors(ty: &str) -> Vec<String> {
        errors(ty)
            .into_iter()
            .filter(|m| m.contains("limit"))
            .collect()
    }

    #[test]
    fn element_counts_are_overflow_checked() {
        // 2^32 · 2^32 wraps to 0 in 64-bit arithmetic: reported as an overflow, not accepted.
        let e = limit_errors("tile<4294967296 x 4294967296 x f32>");
        assert!(e.iter().any(|m| m.contains("overflows 64 bits")), "{e:?}");
        let e = limit_errors("tile<9223372036854775807 x f32>");
        assert!(
            e.iter()
                .any(|m| m.contains("over the limit of 16777216 elements")),
            "{e:?}"
        );
        let e = limit_errors("tile<100000000 x 100000000 x f32>");
        assert!(!e.is_empty(), "{e:?}");
        // A symbolic element type does not hide an absurd count.
        let e = limit_errors("tile<65536 x 65536 x DTYPE>");
        assert!(e.iter().any(|m| m.contains("4294967296 elements")), "{e:?}");
    }

    #[test]
    fn tile_bytes_are_bounded_by_the_register_file() {
        // 65,536 f32 elements are exactly the 262,144-byte register file of a block.
        assert!(limit_errors("tile<256 x 256 x f32>").is_empty());
        assert!(limit_errors("tile<65536 x f32>").is_empty());
        let e = limit_errors("tile<65537 x f32>");
        assert!(e.iter().any(|m| m.contains("262148 bytes")), "{e:?}");
        assert!(limit_errors("tile<131072 x f16>").is_empty());
        assert!(!limit_errors("tile<262145 x u8>").is_empty());
        // While the dtype is a constant's name only the element count is checked.
        assert!(limit_errors("tile<65537 x DTYPE>").is_empty());
    }
}
