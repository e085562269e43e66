//! A kernel of the generic module as its specialization sees it: every `static_if` resolved by
//! the constant values (its results read as the values its taken region yields), while types and
//! `const` ops keep their constant expressions, so the analysis can both evaluate a tile dim and
//! name the constant it is (`tile<BLOCK_M x BLOCK_N x f32>`: the M tile is `BLOCK_M`).
//!
//! Also the two slices the classification asks for: the values a value is computed from in the
//! resolved kernel ([`View::slice`]), and the constants whose `const` ops feed a value in the
//! generic kernel with every `static_if` region counted ([`View::consts_feeding`]), which names a
//! tile-order constant (`GROUP_M`) even where its region is not taken.

use kir_ir::{
    Attr, Block, ConstKind, EvalVal, Expr, ExprKind, Kernel, Module, Op, OpData, Opcode, Type,
    Value, ValueDef,
};
use std::collections::{BTreeSet, HashMap, HashSet};

/// One kernel, resolved (see the module doc).
pub struct View<'a> {
    pub module: &'a Module,
    pub kernel: &'a Kernel,
    values: &'a [(String, EvalVal)],
    variants: BTreeSet<String>,
    /// A `static_if` result → the value its taken region yields.
    alias: HashMap<Value, Value>,
    /// The live ops of each block that runs (the body, loop and `if` regions), with taken
    /// `static_if` regions spliced in and their `yield`s left out.
    live: HashMap<Block, Vec<Op>>,
    /// The op owning each region block (generic, every region).
    owner: HashMap<Block, Op>,
}

impl<'a> View<'a> {
    /// Resolves `kernel` of `module` with the constant `values`.
    pub fn new(module: &'a Module, kernel: &'a Kernel, values: &'a [(String, EvalVal)]) -> Self {
        let mut variants = BTreeSet::new();
        for c in &module.consts {
            if let ConstKind::Enum(vs) = &c.kind {
                variants.extend(vs.iter().cloned());
            }
        }
        let mut owner = HashMap::new();
        for (op, d) in kernel.dfg.ops.iter() {
            for r in &d.regions {
                owner.insert(*r, op);
            }
        }
        let mut v = View {
            module,
            kernel,
            values,
            variants,
            alias: HashMap::new(),
            live: HashMap::new(),
            owner,
        };
        v.flatten_block(kernel.body);
        v
    }

    fn lookup(&self, name: &str) -> Option<EvalVal> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .or_else(|| {
                self.variants
                    .contains(name)
                    .then(|| EvalVal::Sym(name.to_string()))
            })
    }

    /// Evaluates a constant expression (`None` where it does not evaluate).
    pub fn eval(&self, e: &Expr) -> Option<EvalVal> {
        e.eval(&|n| self.lookup(n), false).ok()
    }

    /// An integer constant expression's value.
    pub fn int(&self, e: &Expr) -> Option<i64> {
        match self.eval(e)? {
            EvalVal::Int(i) => Some(i),
            _ => None,
        }
    }

    /// The integer constant an expression names, when it is a bare name of one.
    pub fn const_name(&self, e: &Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Ident(n) => self
                .module
                .const_decl(n)
                .filter(|c| c.kind == ConstKind::Int)
                .map(|c| c.name.clone()),
            _ => None,
        }
    }

    fn flatten_block(&mut self, b: Block) {
        let mut out = Vec::new();
        self.flatten_into(b, &mut out);
        self.live.insert(b, out);
    }

    fn flatten_into(&mut self, b: Block, out: &mut Vec<Op>) {
        let kernel: &'a Kernel = self.kernel;
        let dfg = &kernel.dfg;
        for &op in &dfg.blocks[b].ops {
            let d = &dfg.ops[op];
            if d.opcode == Opcode::StaticIf {
                let taken = match &d.lead {
                    Some(Attr::Expr(c)) => match self.eval(c) {
                        Some(EvalVal::Bool(t)) => t,
                        Some(EvalVal::Int(i)) => i != 0,
                        _ => continue,
                    },
                    _ => continue,
                };
                let Some(&region) = d.regions.get(if taken { 0 } else { 1 }) else {
                    continue;
                };
                if let Some(&last) = dfg.blocks[region].ops.last() {
                    let y = &dfg.ops[last];
                    if y.opcode == Opcode::Yield {
                        for (r, v) in d.results.iter().zip(&y.operands) {
                            self.alias.insert(*r, *v);
                        }
                    }
                }
                let mut inner = Vec::new();
                self.flatten_into(region, &mut inner);
                let last = dfg.blocks[region].ops.last().copied();
                inner.retain(|o| !(Some(*o) == last && dfg.ops[*o].opcode == Opcode::Yield));
                out.extend(inner);
                continue;
            }
            for &r in &d.regions {
                self.flatten_block(r);
            }
            out.push(op);
        }
    }

    /// A value with `static_if` results seen through.
    pub fn resolve(&self, mut v: Value) -> Value {
        while let Some(&a) = self.alias.get(&v) {
            v = a;
        }
        v
    }

    /// The op defining `v` (resolved), if an op result.
    pub fn def(&self, v: Value) -> Option<(Op, &'a OpData)> {
        match self.kernel.dfg.values[self.resolve(v)].def {
            ValueDef::Result(op, _) => Some((op, &self.kernel.dfg.ops[op])),
            ValueDef::Arg(..) => None,
        }
    }

    /// The opcode defining `v` (resolved).
    pub fn opcode(&self, v: Value) -> Option<Opcode> {
        self.def(v).map(|(_, d)| d.opcode)
    }

    /// The live ops of a block that runs (the kernel body, a loop's or an `if`'s region).
    pub fn ops(&self, b: Block) -> &[Op] {
        self.live.get(&b).map(|v| &v[..]).unwrap_or(&[])
    }

    /// The op data of `op`.
    pub fn op(&self, op: Op) -> &'a OpData {
        &self.kernel.dfg.ops[op]
    }

    /// Every block that runs (the body, loop and `if` regions), in entity order.
    pub fn blocks(&self) -> Vec<Block> {
        let mut b: Vec<Block> = self.live.keys().copied().collect();
        b.sort();
        b
    }

    /// Every live `for` op, at any depth, in program order.
    pub fn loops(&self) -> Vec<Op> {
        let mut out = Vec::new();
        self.loops_in(self.kernel.body, &mut out);
        out
    }

    fn loops_in(&self, b: Block, out: &mut Vec<Op>) {
        for &op in self.ops(b) {
            let d = self.op(op);
            if d.opcode == Opcode::For {
                out.push(op);
            }
            for &r in &d.regions {
                self.loops_in(r, out);
            }
        }
    }

    /// The tile dims of `v`'s type (its own declared type, not resolved).
    pub fn dims(&self, v: Value) -> Vec<Expr> {
        match &self.kernel.dfg.values[v].ty {
            Type::Tile(d, _) => d.clone(),
            _ => vec![],
        }
    }

    /// The tile dims of `v` evaluated.
    pub fn shape(&self, v: Value) -> Option<Vec<i64>> {
        let d = self.dims(v);
        if d.is_empty() {
            return None;
        }
        d.iter().map(|e| self.int(e)).collect()
    }

    /// The element dtype of `v`'s type by name (`bf16`), resolving a dtype constant.
    pub fn dtype(&self, v: Value) -> Option<String> {
        match self.kernel.dfg.values[v].ty.elem() {
            kir_ir::ElemType::Known(d) => Some(d.name().to_string()),
            kir_ir::ElemType::Named(n, _) => match self.lookup(n)? {
                EvalVal::Sym(s) => Some(s),
                _ => None,
            },
        }
    }

    /// The values `v` is computed from in the resolved kernel (itself included), through ops'
    /// operands and loops' bounds and carried values.
    pub fn slice(&self, v: Value) -> HashSet<Value> {
        let mut seen = HashSet::new();
        let mut work = vec![self.resolve(v)];
        while let Some(v) = work.pop() {
            if !seen.insert(v) {
                continue;
            }
            for u in self.sources(v, false) {
                work.push(self.resolve(u));
            }
        }
        seen
    }

    /// The integer constants whose `const` ops feed `v` in the generic kernel, every
    /// `static_if` region counted.
    pub fn consts_feeding(&self, v: Value) -> BTreeSet<String> {
        let mut seen = HashSet::new();
        let mut names = BTreeSet::new();
        let mut work = vec![v];
        while let Some(v) = work.pop() {
            if !seen.insert(v) {
                continue;
            }
            if let ValueDef::Result(op, _) = self.kernel.dfg.values[v].def {
                let d = &self.kernel.dfg.ops[op];
                if let (Opcode::Const, Some(Attr::Expr(e))) = (d.opcode, &d.lead) {
                    e.for_each_ident(&mut |n, _| {
                        if let Some(c) = self.const_name(&Expr::ident(n)) {
                            names.insert(c);
                        }
                    });
                }
            }
            work.extend(self.sources(v, true));
        }
        names
    }

    /// What `v` is computed from directly: an op's uses; a loop or `static_if` result's
    /// yields (both regions when `all_regions`, else only through the alias); a loop's
    /// induction variable's bounds and a carried value's initial value and yield.
    fn sources(&self, v: Value, all_regions: bool) -> Vec<Value> {
        let dfg = &self.kernel.dfg;
        match dfg.values[v].def {
            ValueDef::Result(op, i) => {
                let d = &dfg.ops[op];
                match d.opcode {
                    Opcode::For => {
                        let mut s = d.operands[..3.min(d.operands.len())].to_vec();
                        s.extend(d.operands.get(3 + i as usize));
                        s.extend(yielded(dfg, d.regions[0], i as usize));
                        s
                    }
                    Opcode::StaticIf | Opcode::If if all_regions || d.opcode == Opcode::If => {
                        let mut s: Vec<Value> = d
                            .regions
                            .iter()
                            .filter_map(|r| yielded(dfg, *r, i as usize))
                            .collect();
                        if d.opcode == Opcode::If {
                            s.extend(d.operands.iter().copied());
                        }
                        s
                    }
                    Opcode::StaticIf => vec![],
                    _ => d.uses(),
                }
            }
            ValueDef::Arg(b, i) => {
                let Some(&op) = self.owner.get(&b) else {
                    return vec![];
                };
                let d = &dfg.ops[op];
                if d.opcode != Opcode::For {
                    return vec![];
                }
                if i == 0 {
                    d.operands[..3.min(d.operands.len())].to_vec()
                } else {
                    let mut s: Vec<Value> = d
                        .operands
                        .get(2 + i as usize)
                        .into_iter()
                        .copied()
                        .collect();
                    s.extend(yielded(dfg, b, i as usize - 1));
                    s
                }
            }
        }
    }

    /// The block of a value that is a block argument, and its index.
    pub fn arg_of(&self, v: Value) -> Option<(Block, u32)> {
        match self.kernel.dfg.values[self.resolve(v)].def {
            ValueDef::Arg(b, i) => Some((b, i)),
            ValueDef::Result(..) => None,
        }
    }
}

/// The `i`-th operand of block `b`'s closing `yield`.
pub fn yielded(dfg: &kir_ir::Dfg, b: Block, i: usize) -> Option<Value> {
    let last = dfg.blocks[b].ops.last()?;
    let y = &dfg.ops[*last];
    (y.opcode == Opcode::Yield)
        .then(|| y.operands.get(i).copied())
        .flatten()
}
