//! Reductions and dot: the ops whose result elements combine many operand elements, each in a
//! fixed ascending order so results are reproducible bit for bit.

use super::math::{fmax, fmin};
use super::tile::{round_f32, wrap_int, Data, Tile};
use kir_ir::Dtype;

/// Reductions of `reduce` (the op table's kinds).
pub(crate) use kir_ir::ReduceKind as Red;

/// Reduces along `axis`, keeping it as size 1. Floats accumulate in f32 in ascending index
/// order (sum from 0.0; max/min from the first element) and round to the dtype at the end;
/// ints wrap; i1 max/min are any/all.
pub(crate) fn reduce(r: Red, t: &Tile, axis: usize) -> Result<Tile, String> {
    if axis >= t.shape.len() {
        return Err(format!(
            "axis {axis} is out of range for `{}`",
            t.type_name()
        ));
    }
    let outer: usize = t.shape[..axis].iter().product();
    let n = t.shape[axis];
    let inner: usize = t.shape[axis + 1..].iter().product();
    if n == 0 && r != Red::Sum {
        return Err(format!("{r:?} of an empty axis").to_lowercase());
    }
    let mut shape = t.shape.clone();
    shape[axis] = 1;
    let d = t.dtype;
    let at = |o: usize, k: usize, i: usize| (o * n + k) * inner + i;
    let data = match &t.data {
        Data::F(v) => Data::F(
            (0..outer * inner)
                .map(|oi| {
                    let (o, i) = (oi / inner.max(1), oi % inner.max(1));
                    let acc = match r {
                        Red::Sum => (0..n).fold(0.0f32, |acc, k| acc + v[at(o, k, i)]),
                        Red::Max => (1..n).fold(v[at(o, 0, i)], |acc, k| fmax(acc, v[at(o, k, i)])),
                        Red::Min => (1..n).fold(v[at(o, 0, i)], |acc, k| fmin(acc, v[at(o, k, i)])),
                    };
                    round_f32(d, acc)
                })
                .collect(),
        ),
        Data::I(v) => Data::I(
            (0..outer * inner)
                .map(|oi| {
                    let (o, i) = (oi / inner.max(1), oi % inner.max(1));
                    let acc = match r {
                        Red::Sum => (0..n).fold(0i64, |acc, k| acc.wrapping_add(v[at(o, k, i)])),
                        Red::Max => (1..n).fold(v[at(o, 0, i)], |acc, k| acc.max(v[at(o, k, i)])),
                        Red::Min => (1..n).fold(v[at(o, 0, i)], |acc, k| acc.min(v[at(o, k, i)])),
                    };
                    wrap_int(d, acc)
                })
                .collect(),
        ),
        Data::B(v) => {
            if r == Red::Sum {
                return Err(format!("sum does not apply to `{}`", t.type_name()));
            }
            Data::B(
                (0..outer * inner)
                    .map(|oi| {
                        let (o, i) = (oi / inner.max(1), oi % inner.max(1));
                        let mut it = (0..n).map(|k| v[at(o, k, i)]);
                        if r == Red::Max {
                            it.any(|x| x)
                        } else {
                            it.all(|x| x)
                        }
                    })
                    .collect(),
            )
        }
    };
    Ok(Tile {
        dtype: d,
        shape,
        data,
    })
}

/// `acc + a·b` for a [M,K], b [K,N] (float dtypes, converted to f32 exactly) and acc [M,N] f32.
/// Per element: r = acc[m][n]; for k ascending r = r + a[m][k]·b[k][n], with a separate f32
/// multiply and add (no fma). Runs i-k-j over contiguous rows so the inner loop vectorizes.
pub(crate) fn dot(a: &Tile, b: &Tile, acc: &Tile) -> Result<Tile, String> {
    let (Data::F(av), Data::F(bv), Data::F(cv)) = (&a.data, &b.data, &acc.data) else {
        return Err(format!(
            "dot needs float operands, found `{}`, `{}`, `{}`",
            a.type_name(),
            b.type_name(),
            acc.type_name()
        ));
    };
    let (&[m, k], &[k2, n], &[m2, n2]) = (&a.shape[..], &b.shape[..], &acc.shape[..]) else {
        return Err(format!(
            "dot needs rank-2 operands, found `{}`, `{}`, `{}`",
            a.type_name(),
            b.type_name(),
            acc.type_name()
        ));
    };
    if k != k2 || m != m2 || n != n2 || acc.dtype != Dtype::F32 {
        return Err(format!(
            "dot shapes do not fit: `{}` · `{}` + `{}` (acc must be f32 [M,N])",
            a.type_name(),
            b.type_name(),
            acc.type_name()
        ));
    }
    let mut out = cv.clone();
    if n > 0 {
        for (row, arow) in out.chunks_exact_mut(n).zip(av.chunks_exact(k.max(1))) {
            let mut kk = 0;
            // Four k at a time: per element still ((r + a0·b0) + a1·b1) + ..., in k order.
            while kk + 4 <= k {
                let (s0, s1, s2, s3) = (arow[kk], arow[kk + 1], arow[kk + 2], arow[kk + 3]);
                let b0 = &bv[kk * n..(kk + 1) * n];
                let b1 = &bv[(kk + 1) * n..(kk + 2) * n];
                let b2 = &bv[(kk + 2) * n..(kk + 3) * n];
                let b3 = &bv[(kk + 3) * n..(kk + 4) * n];
                for j in 0..n {
                    let mut r = row[j];
                    r += s0 * b0[j];
                    r += s1 * b1[j];
                    r += s2 * b2[j];
                    r += s3 * b3[j];
                    row[j] = r;
                }
                kk += 4;
            }
            while kk < k {
                let s = arow[kk];
                for (r, &x) in row.iter_mut().zip(&bv[kk * n..(kk + 1) * n]) {
                    *r += s * x;
                }
                kk += 1;
            }
        }
    }
    Ok(Tile {
        dtype: Dtype::F32,
        shape: vec![m, n],
        data: Data::F(out),
    })
}
