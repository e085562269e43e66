//! Mask shapes that backends and passes recognise in the IR: today the *row-prefix mask* of a
//! load in a loop, `cmp lt (iota axis 0 + iv), hi`, which keeps the rows of a tile before a
//! loop-invariant bound (mask_split's key-range masks on attention's K and V loads). A TMA ring
//! copies such a tile whole and zeroes the rows past the bound in shared memory
//! (compiler/src/passes/schedule/pipelining/tma.rs, backends/src/ptx/tma.rs).

use crate::{Attr, Block, CmpPred, Kernel, Op, Opcode, Value, ValueDef};

/// The bound `hi` of a row-prefix mask `mask` of a load in loop `l`: `mask` is
/// `cmp lt (iota axis 0 + iv), hi` (either operand order of the `add`), with `iv` the loop's
/// induction variable and `hi` a scalar defined outside the loop. `None` for any other mask.
/// Row r of the tile at iteration `iv` is kept exactly when r < hi − iv.
pub fn row_prefix_bound(k: &Kernel, l: Op, mask: Value) -> Option<Value> {
    let body = *k.dfg.ops[l].regions.first()?;
    let iv = *k.dfg.blocks[body].args.first()?;
    let (index, hi) = row_prefix(k, mask)?;
    (index == iv && !defined_in(k, body, hi)).then_some(hi)
}

/// The (index, bound) of a mask of the form `cmp lt (iota axis 0 + index), bound` with a scalar
/// bound (either operand order of the `add`): row r is kept exactly when r < bound − index.
pub fn row_prefix(k: &Kernel, mask: Value) -> Option<(Value, Value)> {
    let def = |v: Value| match k.dfg.values[v].def {
        ValueDef::Result(o, 0) => Some(&k.dfg.ops[o]),
        _ => None,
    };
    let cmp = def(mask)?;
    if cmp.opcode != Opcode::Cmp || cmp.lead != Some(Attr::Cmp(CmpPred::Lt)) {
        return None;
    }
    let (&sum, &hi) = (cmp.operands.first()?, cmp.operands.get(1)?);
    let add = def(sum)?;
    if add.opcode != Opcode::Add || !k.dfg.ty(hi).is_scalar() {
        return None;
    }
    let rows_iota = |v: Value| {
        def(v).is_some_and(|o| {
            o.opcode == Opcode::Iota
                && matches!(o.attr("axis").or(o.lead.as_ref()), Some(Attr::Expr(e)) if e.as_int() == Some(0))
        })
    };
    match add.operands[..] {
        [a, b] if rows_iota(a) && k.dfg.ty(b).is_scalar() => Some((b, hi)),
        [a, b] if rows_iota(b) && k.dfg.ty(a).is_scalar() => Some((a, hi)),
        _ => None,
    }
}

/// Whether value `v` is defined in block `b` or in a region nested in it.
fn defined_in(k: &Kernel, b: Block, v: Value) -> bool {
    let inner = |b: Block| -> Vec<Block> {
        k.dfg.blocks[b]
            .ops
            .iter()
            .flat_map(|&x| k.dfg.ops[x].regions.clone())
            .collect()
    };
    match k.dfg.values[v].def {
        ValueDef::Arg(ab, _) => {
            ab == b || inner(b).into_iter().any(|r| r == ab || nested(k, r, ab))
        }
        ValueDef::Result(o, _) => {
            k.dfg.blocks[b].ops.contains(&o) || inner(b).into_iter().any(|r| defined_in(k, r, v))
        }
    }
}

/// Whether block `inner` is nested (at any depth) in block `outer`.
fn nested(k: &Kernel, outer: Block, inner: Block) -> bool {
    k.dfg.blocks[outer]
        .ops
        .iter()
        .flat_map(|&x| k.dfg.ops[x].regions.clone())
        .any(|r| r == inner || nested(k, r, inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop over key blocks whose load keeps the keys before `hi` (the row-prefix form), and
    /// one whose mask compares against a bound computed in the loop (not the form).
    const SRC: &str = "module m
kernel @k(x: in tensor<f32>[N, 8], y: out tensor<f32>[16, 8]) grid [1, 1, 1] {
  %n = dim N : i32
  %zero = const 0 : i32
  %bm = const 16 : i32
  %hi = sub %n, %bm : i32
  %rows = iota axis 0 : tile<16x8xi32>
  %acc0 = const 0.0 : tile<16x8xf32>
  %acc = for %i = %zero to %n step %bm iter(%a = %acc0) : tile<16x8xf32> {
    %key = add %rows, %i : tile<16x8xi32>
    %in = cmp lt %key, %hi : tile<16x8xi1>
    %t = load x[%i, 0] mask %in other 0.0 : tile<16x8xf32>
    %lim = add %i, %bm : i32
    %in2 = cmp lt %key, %lim : tile<16x8xi1>
    %u = load x[%i, 0] mask %in2 other 0.0 : tile<16x8xf32>
    %s = add %t, %u : tile<16x8xf32>
    %a2 = add %a, %s : tile<16x8xf32>
    yield %a2
  }
  store y[0, 0], %acc
}
";

    #[test]
    fn the_row_prefix_form_and_only_it() {
        let m = crate::text::parse(SRC).expect("parses");
        let k = m.kernels.values().next().expect("a kernel");
        let (l, _) = k
            .dfg
            .ops
            .iter()
            .find(|(_, o)| o.opcode == Opcode::For)
            .expect("the loop");
        let named = |n: &str| {
            k.dfg
                .values
                .iter()
                .find(|(_, d)| d.name.as_deref() == Some(n))
                .map(|(v, _)| v)
                .expect(n)
        };
        assert_eq!(row_prefix_bound(k, l, named("in")), Some(named("hi")));
        // A bound defined in the loop is not loop-invariant.
        assert_eq!(row_prefix_bound(k, l, named("in2")), None);
        assert_eq!(
            row_prefix(k, named("in2")),
            Some((named("i"), named("lim")))
        );
        // Not a comparison at all.
        assert_eq!(row_prefix(k, named("key")), None);
    }
}
