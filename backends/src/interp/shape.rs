//! Shape ops on runtime tiles: iota, broadcast (and splat), transpose and reshape. Each builds
//! the index of every result element's source and gathers; none changes an element's value.

use super::memory::contiguous_strides;
use super::tile::{class, convert, type_name, Class, Data, Scalar, Tile};
use kir_ir::Dtype;

/// A tile of `shape` whose element is its index along `axis`, in dtype `d`.
pub(crate) fn iota(d: Dtype, shape: &[usize], axis: usize) -> Result<Tile, String> {
    if axis >= shape.len() || class(d) == Class::Bool {
        return Err(format!(
            "iota along axis {axis} cannot make `{}`",
            type_name(d, shape)
        ));
    }
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let total: usize = shape.iter().product();
    let mut t = Tile::filled(d, shape.to_vec(), Scalar::I(0));
    for i in 0..total {
        let v = convert(Scalar::I(((i / inner.max(1)) % n.max(1)) as i64), d);
        match (v, &mut t.data) {
            (Scalar::F(x), Data::F(o)) => o[i] = x,
            (Scalar::I(x), Data::I(o)) => o[i] = x,
            _ => {}
        }
    }
    Ok(t)
}

/// Stretches size-1 dims of `t` to `shape` (same rank). A scalar operand is splatted.
pub(crate) fn broadcast(t: &Tile, shape: &[usize]) -> Result<Tile, String> {
    if t.is_scalar() {
        let s = t.only().ok_or("internal error: empty scalar")?;
        return Ok(Tile::filled(t.dtype, shape.to_vec(), s));
    }
    if t.shape.len() != shape.len() || t.shape.iter().zip(shape).any(|(&a, &b)| a != b && a != 1) {
        return Err(format!(
            "cannot broadcast `{}` to `{}`",
            t.type_name(),
            type_name(t.dtype, shape)
        ));
    }
    let src_strides = contiguous_strides(&t.shape);
    let strides: Vec<usize> = t
        .shape
        .iter()
        .zip(&src_strides)
        .map(|(&n, &s)| if n == 1 { 0 } else { s })
        .collect();
    Ok(Tile {
        dtype: t.dtype,
        shape: shape.to_vec(),
        data: t.data.gather(&strided_indices(shape, &strides)),
    })
}

/// Permutes dims: result dim i is operand dim `perm[i]`.
pub(crate) fn transpose(t: &Tile, perm: &[usize]) -> Result<Tile, String> {
    let r = t.shape.len();
    let mut seen = vec![false; r];
    if perm.len() != r
        || perm
            .iter()
            .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
    {
        return Err(format!(
            "{perm:?} is not a permutation of the {r} dims of `{}`",
            t.type_name()
        ));
    }
    let src = contiguous_strides(&t.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| src[p]).collect();
    Ok(Tile {
        dtype: t.dtype,
        shape: shape.clone(),
        data: t.data.gather(&strided_indices(&shape, &strides)),
    })
}

/// The same elements in row-major order with a new shape (same element count).
pub(crate) fn reshape(t: &Tile, shape: &[usize]) -> Result<Tile, String> {
    if shape.iter().product::<usize>() != t.len() {
        return Err(format!(
            "cannot reshape `{}` to `{}`",
            t.type_name(),
            type_name(t.dtype, shape)
        ));
    }
    Ok(Tile {
        dtype: t.dtype,
        shape: shape.to_vec(),
        data: t.data.clone(),
    })
}

/// Source index of every element of `shape` (row-major) under `strides`.
fn strided_indices(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut out = vec![0usize];
    for (&n, &s) in shape.iter().zip(strides) {
        out = out
            .iter()
            .flat_map(|&b| (0..n).map(move |i| b + i * s))
            .collect();
    }
    out
}
