//! Which loads `pipelining` rings: the innermost loops of a kernel, and in each the loads
//! ([`Cand`]) that read a 2-D tile of an `in` tensor, feed a dot operand and have an address
//! slice of pure ops of the body (see the module doc of `pipelining`), with the key under which
//! loops share a buffer.

use kir_ir::{Block, Dtype, ElemType, Expr, Kernel, Op, Opcode, Type, Value, ValueDef};
use std::collections::{HashMap, HashSet};

/// One pipelined load: the op, the tile it reads (dims and element type), its bytes, and the
/// key under which loops share its buffer.
pub(super) struct Cand {
    pub(super) op: Op,
    pub(super) ty: Type,
    pub(super) dims: Vec<Expr>,
    pub(super) elem: ElemType,
    pub(super) bytes: u64,
    pub(super) key: BufKey,
}

/// Loops share a buffer for loads of one tensor, one tile type and one position among that
/// tensor's loads in the loop, with one stage count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct BufKey {
    pub(super) param: String,
    pub(super) ty: String,
    pub(super) nth: usize,
    pub(super) stages: usize,
    /// The loop that holds stages (a held ring is only shared by loops that hold too).
    pub(super) held: bool,
}

/// Every `for` op reachable from the body whose body holds no `for`, in program order.
pub(super) fn innermost_loops(k: &Kernel) -> Vec<Op> {
    fn walk(k: &Kernel, b: Block, out: &mut Vec<Op>) -> bool {
        let mut has_loop = false;
        for &o in &k.dfg.blocks[b].ops {
            let od = &k.dfg.ops[o];
            let mut inner = false;
            for &r in &od.regions {
                inner |= walk(k, r, out);
            }
            if od.opcode == Opcode::For {
                has_loop = true;
                if !inner {
                    out.push(o);
                }
            }
            has_loop |= inner;
        }
        has_loop
    }
    let mut out = vec![];
    walk(k, k.body, &mut out);
    out
}

/// The loads of loop `l` that can be pipelined.
pub(super) fn candidates(k: &Kernel, l: Op) -> Vec<Cand> {
    let body = k.dfg.ops[l].regions[0];
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = vec![];
    for &o in &k.dfg.blocks[body].ops {
        let od = &k.dfg.ops[o];
        if od.opcode != Opcode::Load {
            continue;
        }
        let Some(tr) = &od.tensor else { continue };
        let input = k
            .param(&tr.param)
            .is_some_and(|p| matches!(p.kind, kir_ir::ParamKind::Tensor(kir_ir::Access::In, _)));
        let ty = k.dfg.ty(od.results[0]).clone();
        let Type::Tile(dims, elem) = &ty else {
            continue;
        };
        let (Some(shape), Some(dt)) = (ty.shape(), ty.dtype()) else {
            continue;
        };
        if !input
            || dt == Dtype::I1
            || shape.len() != 2
            || !feeds_dot(k, body, od.results[0])
            || slice(k, l, o).is_none()
        {
            continue;
        }
        let n = seen.entry(tr.param.clone()).or_insert(0);
        *n += 1;
        let bytes = (shape.iter().product::<usize>() * dt.size_bytes()) as u64;
        let key = BufKey {
            param: tr.param.clone(),
            ty: ty.to_string(),
            nth: *n,
            stages: 0,
            held: false,
        };
        out.push(Cand {
            op: o,
            dims: dims.clone(),
            elem: elem.clone(),
            ty,
            bytes,
            key,
        });
    }
    out
}

/// Whether `v` is operand a or b of a dot in block `b` or in a branch of an `if` there (a dot
/// that only some programs run: attention_bwd's dK/dV parts), directly or through `transpose`.
fn feeds_dot(k: &Kernel, b: Block, v: Value) -> bool {
    k.dfg.blocks[b].ops.iter().any(|&o| {
        let od = &k.dfg.ops[o];
        match od.opcode {
            Opcode::Dot | Opcode::DotAsync => od.operands[..2].contains(&v),
            Opcode::Transpose if od.operands.first() == Some(&v) => feeds_dot(k, b, od.results[0]),
            Opcode::If => od.regions.iter().any(|&r| feeds_dot(k, r, v)),
            _ => false,
        }
    })
}

/// The ops of `l`'s body that load `o`'s offsets and mask need, in body order; `None` when they
/// depend on a carried value, another load or anything but pure ops of the body.
pub(super) fn slice(k: &Kernel, l: Op, o: Op) -> Option<Vec<Op>> {
    let body = k.dfg.ops[l].regions[0];
    let iv = k.dfg.blocks[body].args[0];
    let in_body: HashSet<Op> = k.dfg.blocks[body].ops.iter().copied().collect();
    let mut need: HashSet<Op> = HashSet::new();
    let mut stack: Vec<Value> = k.dfg.ops[o].uses();
    while let Some(v) = stack.pop() {
        match k.dfg.values[v].def {
            ValueDef::Arg(b, _) if b == body => {
                if v != iv {
                    return None;
                }
            }
            ValueDef::Arg(..) => {}
            ValueDef::Result(d, _) if in_body.contains(&d) => {
                let dd = &k.dfg.ops[d];
                let pure = dd.regions.is_empty()
                    && dd.tensor.is_none()
                    && !dd.opcode.has_side_effects()
                    && dd.opcode.info().class != kir_ir::OpClass::Memory;
                if !pure {
                    return None;
                }
                if need.insert(d) {
                    stack.extend(dd.uses());
                }
            }
            ValueDef::Result(..) => {}
        }
    }
    Some(
        k.dfg.blocks[body]
            .ops
            .iter()
            .copied()
            .filter(|x| need.contains(x))
            .collect(),
    )
}
