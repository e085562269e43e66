//! Which i32 scalars are never negative, so that a division or remainder by a power of two can
//! be a plain shift or mask (arith.rs) instead of `div.s32`/`rem.s32`, which ptxas expands into
//! its general reciprocal sequence even for a constant divisor.
//!
//! The facts are few and syntactic: a constant ≥ 0, a program id, a grid size, a dim; a loop's
//! induction variable whose lower bound and step are never negative; a loop-carried value whose
//! initial value and every value yielded back are never negative (the carried value itself
//! assumed so while its yields are looked at); and `add`, `max`, `min`, `div`, `rem`, `shr` and
//! `and` of such values. `mul` and `sub` are left out: `mul` wraps to negative values on
//! overflow, where the interpreter's wrap-around would then differ from a mask. `add` of two such
//! values is taken as never negative: it passes 2³¹ − 1 only past an index range that no tensor
//! addressed with i32 offsets has (the pipeliner's ring counters count one step per loop
//! iteration).

use kir_ir::edit::fold::const_int;
use kir_ir::{Block, Dtype, Kernel, Op, Opcode, Type, Value, ValueDef};
use std::collections::{HashMap, HashSet};

/// True when i32 scalar `v` of kernel `k` is provably never negative by the rules above.
pub fn nonneg(k: &Kernel, v: Value) -> bool {
    let mut owners: HashMap<Block, Op> = HashMap::new();
    for (o, od) in k.dfg.ops.iter() {
        for &b in &od.regions {
            owners.insert(b, o);
        }
    }
    let mut s = Search {
        k,
        owners,
        assumed: HashSet::new(),
    };
    s.value(v, 0)
}

struct Search<'a> {
    k: &'a Kernel,
    owners: HashMap<Block, Op>,
    /// Loop-carried values taken as never negative while their yields are checked.
    assumed: HashSet<Value>,
}

impl Search<'_> {
    fn value(&mut self, v: Value, depth: usize) -> bool {
        if depth > 48 || self.k.dfg.ty(v) != &Type::scalar(Dtype::I32) {
            return false;
        }
        if self.assumed.contains(&v) {
            return true;
        }
        let Some(data) = self.k.dfg.values.get(v) else {
            return false;
        };
        match data.def {
            ValueDef::Result(o, i) => self.result(o, i as usize, depth),
            ValueDef::Arg(b, i) => self.arg(v, b, i as usize, depth),
        }
    }

    fn result(&mut self, o: Op, i: usize, depth: usize) -> bool {
        let od = &self.k.dfg.ops[o];
        let ops = od.operands.clone();
        let all = |s: &mut Self| ops.iter().all(|&a| s.value(a, depth + 1));
        match od.opcode {
            Opcode::Const => const_int(od).is_some_and(|x| x >= 0),
            Opcode::ProgramId | Opcode::NumPrograms | Opcode::Dim => true,
            Opcode::Add | Opcode::Min | Opcode::Div | Opcode::Rem => all(self),
            Opcode::Shr => ops.first().is_some_and(|&a| self.value(a, depth + 1)),
            Opcode::Max | Opcode::And => ops.iter().any(|&a| self.value(a, depth + 1)),
            Opcode::For => {
                let (Some(&init), Some(&body)) = (ops.get(3 + i), od.regions.first()) else {
                    return false;
                };
                self.value(init, depth + 1) && self.yielded(body, i, depth)
            }
            _ => false,
        }
    }

    /// A block argument: a `for`'s induction variable (argument 0) or its i-th carried value.
    fn arg(&mut self, v: Value, b: Block, i: usize, depth: usize) -> bool {
        let Some(&o) = self.owners.get(&b) else {
            return false;
        };
        let od = &self.k.dfg.ops[o];
        if od.opcode != Opcode::For {
            return false;
        }
        let ops = od.operands.clone();
        if i == 0 {
            return ops.len() >= 3
                && self.value(ops[0], depth + 1)
                && self.value(ops[2], depth + 1);
        }
        let Some(&init) = ops.get(3 + i - 1) else {
            return false;
        };
        if !self.value(init, depth + 1) {
            return false;
        }
        self.assumed.insert(v);
        let ok = self.yielded(b, i - 1, depth);
        if !ok {
            self.assumed.remove(&v);
        }
        ok
    }

    /// Whether the j-th value that loop body `b` yields is never negative.
    fn yielded(&mut self, b: Block, j: usize, depth: usize) -> bool {
        let Some(&last) = self.k.dfg.blocks.get(b).and_then(|bd| bd.ops.last()) else {
            return false;
        };
        let od = &self.k.dfg.ops[last];
        if od.opcode != Opcode::Yield {
            return false;
        }
        match od.operands.get(j) {
            Some(&y) => self.value(y, depth + 1),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::nonneg;

    const SRC: &str = r#"
module signs
kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [1, 1, 1] {
  %pid = program_id 0 : i32
  %n = dim N : i32
  %zero = const 0 : i32
  %one = const 1 : i32
  %four = const 4 : i32
  %minus = const -1 : i32
  %neg = sub %zero, %pid : i32
  %big = mul %pid, %n : i32
  %st = rem %pid, %four : i32
  %up = for %i = %zero to %n step %one iter(%c = %zero) : i32 {
    %c1 = add %c, %one : i32
    %ring = rem %c, %four : i32
    %iq = div %i, %four : i32
    yield %c1
  }
  %down = for %j = %minus to %n step %one iter(%d = %zero) : i32 {
    %d1 = sub %d, %one : i32
    %jq = div %j, %four : i32
    yield %d1
  }
  %t = load x[%zero] : f32
  store y[%zero], %t
}
"#;

    #[test]
    fn counters_ids_and_dims_are_never_negative_and_the_rest_is_not_claimed() {
        let m = kir_ir::text::parse(SRC).unwrap_or_else(|e| panic!("{}", e.render("signs", SRC)));
        let (_, k) = m.kernel("k").expect("kernel");
        let by = |name: &str| {
            k.dfg
                .values
                .iter()
                .find(|(_, d)| d.name.as_deref() == Some(name))
                .map(|(v, _)| v)
                .unwrap_or_else(|| panic!("no value %{name}"))
        };
        for v in [
            "pid", "n", "zero", "four", "st", "up", "c", "c1", "ring", "i", "iq",
        ] {
            assert!(nonneg(k, by(v)), "%{v} is never negative");
        }
        // A negative constant, a difference, a product (it may wrap), a loop counting down, and a
        // loop from -1.
        for v in ["minus", "neg", "big", "down", "d", "d1", "j", "jq"] {
            assert!(!nonneg(k, by(v)), "%{v} is not known to be never negative");
        }
    }
}
