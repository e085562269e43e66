//! Canonical printer. Output reparses to an equal module; anonymous values are renumbered
//! `%v0, %v1, …` in order of definition, named values keep their names (made unique).

use crate::entities::{Block, Value};
use crate::module::*;
use crate::ops::{Attr, Opcode};
use cranelift_entity::SecondaryMap;
use std::collections::HashSet;
use std::fmt::Write;

/// Prints a module in canonical form.
pub fn print(m: &Module) -> String {
    let mut s = String::new();
    for d in &m.doc {
        writeln!(s, "{}", comment(d)).ok();
    }
    writeln!(s, "module {}", m.name).ok();
    if !m.consts.is_empty() {
        s.push('\n');
    }
    for c in &m.consts {
        for d in &c.doc {
            writeln!(s, "{}", comment(d)).ok();
        }
        let kind = match &c.kind {
            ConstKind::Int => "int".to_string(),
            ConstKind::Enum(v) => format!("{{{}}}", v.join(", ")),
        };
        write!(s, "const {}: {kind} = {}", c.name, c.default).ok();
        if let Some(t) = &c.tune {
            let vs: Vec<String> = t.values.iter().map(i64::to_string).collect();
            write!(s, " tune {{{}}}", vs.join(", ")).ok();
        }
        if let Some(r) = &c.require {
            write!(s, " where {r}").ok();
        }
        s.push('\n');
    }
    for k in m.kernels.values() {
        s.push('\n');
        print_kernel(&mut s, k);
    }
    if let Some(p) = &m.program {
        s.push('\n');
        for d in &p.doc {
            writeln!(s, "{}", comment(d)).ok();
        }
        s.push_str("program(");
        print_params(&mut s, &p.params);
        s.push_str(") {\n");
        for t in &p.temps {
            writeln!(s, "  temp {}: {}", t.name, t.ty).ok();
        }
        for l in &p.launches {
            let args: Vec<String> = l
                .args
                .iter()
                .map(|a| {
                    if a.param == a.arg {
                        a.param.clone()
                    } else {
                        format!("{} = {}", a.param, a.arg)
                    }
                })
                .collect();
            writeln!(s, "  launch @{}({})", l.kernel, args.join(", ")).ok();
        }
        s.push_str("}\n");
    }
    s
}

fn comment(d: &str) -> String {
    if d.is_empty() {
        "//".into()
    } else {
        format!("// {d}")
    }
}

/// Prints one param as in a signature.
pub fn param_text(p: &Param) -> String {
    let mut s = match &p.kind {
        ParamKind::Tensor(a, t) => format!("{}: {} {t}", p.name, a.name()),
        ParamKind::Scalar(e) => format!("{}: {e}", p.name),
    };
    if let Some(c) = &p.cond {
        write!(s, " if {c}").ok();
    }
    s
}

fn print_params(s: &mut String, params: &[Param]) {
    if params.is_empty() {
        return;
    }
    s.push('\n');
    for p in params {
        writeln!(s, "  {},", param_text(p)).ok();
    }
}

fn join<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_kernel(s: &mut String, k: &Kernel) {
    for d in &k.doc {
        writeln!(s, "{}", comment(d)).ok();
    }
    write!(s, "kernel @{}(", k.name).ok();
    print_params(s, &k.params);
    write!(s, ") grid [{}]", join(&k.grid)).ok();
    if !k.requires.is_empty() {
        write!(s, " requires [{}]", join(&k.requires)).ok();
    }
    s.push_str(" {\n");
    let names = value_names(k);
    print_block_ops(s, k, &names, k.body, 1);
    s.push_str("}\n");
}

/// Canonical names for every value of a kernel, assigned in print order. A name is unique
/// among the values visible at its definition (sibling regions may reuse names, as the parser allows).
pub fn value_names(k: &Kernel) -> SecondaryMap<Value, String> {
    struct Namer<'a> {
        k: &'a Kernel,
        names: SecondaryMap<Value, String>,
        scopes: Vec<HashSet<String>>,
        next: usize,
    }
    impl Namer<'_> {
        fn name(&mut self, v: Value) {
            let n = match self.k.dfg.values.get(v).and_then(|d| d.name.clone()) {
                Some(base) => {
                    let mut n = base.clone();
                    let mut i = 1;
                    while self.scopes.iter().any(|s| s.contains(&n)) {
                        n = format!("{base}_{i}");
                        i += 1;
                    }
                    n
                }
                None => {
                    self.next += 1;
                    format!("v{}", self.next - 1)
                }
            };
            if let Some(s) = self.scopes.last_mut() {
                s.insert(n.clone());
            }
            self.names[v] = n;
        }
        fn walk(&mut self, b: Block, depth: usize) {
            let k = self.k;
            let Some(bd) = k.dfg.blocks.get(b) else {
                return;
            };
            if depth > 1000 {
                return;
            }
            self.scopes.push(HashSet::new());
            for &a in &bd.args {
                self.name(a);
            }
            for &o in &bd.ops {
                let Some(od) = k.dfg.ops.get(o) else { continue };
                // Results are printed before the regions but defined after them: name them
                // first (printing order), but regions cannot see them, which the scope
                // stack models by naming regions in their own child scopes.
                for &r in &od.results {
                    self.name(r);
                }
                for &r in &od.regions {
                    self.walk(r, depth + 1);
                }
            }
            self.scopes.pop();
        }
    }
    let mut n = Namer {
        k,
        names: SecondaryMap::new(),
        scopes: vec![],
        next: 0,
    };
    n.walk(k.body, 0);
    n.names
}

fn vname(names: &SecondaryMap<Value, String>, v: Value) -> String {
    let n = &names[v];
    if n.is_empty() {
        format!("%<bad {v}>")
    } else {
        format!("%{n}")
    }
}

fn print_block_ops(
    s: &mut String,
    k: &Kernel,
    names: &SecondaryMap<Value, String>,
    b: Block,
    depth: usize,
) {
    let Some(bd) = k.dfg.blocks.get(b) else {
        return;
    };
    let ind = "  ".repeat(depth);
    let n = bd.ops.len();
    for (i, &o) in bd.ops.iter().enumerate() {
        let Some(op) = k.dfg.ops.get(o) else { continue };
        for d in &op.doc {
            writeln!(s, "{ind}{}", comment(d)).ok();
        }
        // An empty final yield is implied by `}`.
        if op.opcode == Opcode::Yield
            && op.operands.is_empty()
            && i + 1 == n
            && depth > 0
            && op.doc.is_empty()
        {
            continue;
        }
        s.push_str(&ind);
        print_op(s, k, names, op, depth);
        s.push('\n');
    }
}

fn print_op(
    s: &mut String,
    k: &Kernel,
    names: &SecondaryMap<Value, String>,
    op: &OpData,
    depth: usize,
) {
    let vn = |v: Value| vname(names, v);
    let vlist = |v: &[Value]| v.iter().map(|&x| vn(x)).collect::<Vec<_>>().join(", ");
    if !op.results.is_empty() {
        write!(s, "{} = ", vlist(&op.results)).ok();
    }
    s.push_str(op.opcode.name());
    let types = op
        .results
        .iter()
        .map(|&r| {
            k.dfg
                .values
                .get(r)
                .map_or("?".to_string(), |d| d.ty.to_string())
        })
        .collect::<Vec<_>>()
        .join(", ");
    let region = |s: &mut String, r: Option<&Block>| {
        s.push_str(" {\n");
        if let Some(&r) = r {
            print_block_ops(s, k, names, r, depth + 1);
        }
        write!(s, "{}}}", "  ".repeat(depth)).ok();
    };
    match op.opcode {
        Opcode::For => {
            let args = op
                .regions
                .first()
                .and_then(|&b| k.dfg.blocks.get(b))
                .map(|b| b.args.clone())
                .unwrap_or_default();
            let iv = args.first().map_or("%?".to_string(), |&v| vn(v));
            let o = |i: usize| op.operands.get(i).map_or("%?".to_string(), |&v| vn(v));
            write!(s, " {iv} = {} to {} step {}", o(0), o(1), o(2)).ok();
            if op.operands.len() > 3 {
                let pairs: Vec<String> = op.operands[3..]
                    .iter()
                    .enumerate()
                    .map(|(i, &init)| {
                        format!(
                            "{} = {}",
                            args.get(i + 1).map_or("%?".into(), |&a| vn(a)),
                            vn(init)
                        )
                    })
                    .collect();
                write!(s, " iter({})", pairs.join(", ")).ok();
            }
            if !types.is_empty() {
                write!(s, " : {types}").ok();
            }
            region(s, op.regions.first());
        }
        Opcode::If | Opcode::StaticIf => {
            if let Some(Attr::Expr(e)) = &op.lead {
                write!(s, " {e}").ok();
            }
            if let Some(&c) = op.operands.first() {
                write!(s, " {}", vn(c)).ok();
            }
            if !types.is_empty() {
                write!(s, " : {types}").ok();
            }
            region(s, op.regions.first());
            let else_empty = op
                .regions
                .get(1)
                .and_then(|&b| k.dfg.blocks.get(b))
                .is_some_and(|b| {
                    b.ops.len() == 1
                        && k.dfg
                            .ops
                            .get(b.ops[0])
                            .is_some_and(|y| y.operands.is_empty() && y.doc.is_empty())
                });
            if op.regions.len() > 1 && !(else_empty && op.results.is_empty()) {
                s.push_str(" else");
                region(s, op.regions.get(1));
            }
        }
        Opcode::WarpSpecialize => {
            for (key, a) in &op.attrs {
                write!(s, " {key} {}", attr_text(a, names)).ok();
            }
            region(s, op.regions.first());
            let wg = op
                .regions
                .get(1)
                .and_then(|&b| k.dfg.blocks.get(b))
                .and_then(|b| b.args.first().copied())
                .map_or("%?".to_string(), vn);
            write!(s, " consumer({wg})").ok();
            region(s, op.regions.get(1));
        }
        _ => {
            match &op.lead {
                Some(a) => write!(s, " {}", attr_text(a, names)).ok(),
                None => None,
            };
            if let Some(t) = &op.tensor {
                let offs: Vec<String> = t
                    .offsets
                    .iter()
                    .map(|o| match o {
                        Offset::Value(v) => vn(*v),
                        Offset::Expr(e) => e.to_string(),
                    })
                    .collect();
                write!(s, " {}[{}]", t.param, offs.join(", ")).ok();
                if !op.operands.is_empty() {
                    s.push(',');
                }
            }
            if !op.operands.is_empty() {
                write!(s, " {}", vlist(&op.operands)).ok();
            }
            for (key, a) in &op.attrs {
                match a {
                    Attr::Flag => write!(s, " {key}").ok(),
                    a => write!(s, " {key} {}", attr_text(a, names)).ok(),
                };
            }
            if !types.is_empty() {
                write!(s, " : {types}").ok();
            }
        }
    }
}

fn attr_text(a: &Attr, names: &SecondaryMap<Value, String>) -> String {
    match a {
        Attr::Expr(e) => e.to_string(),
        Attr::Name(n, _) => n.clone(),
        Attr::Cmp(p) => p.name().to_string(),
        Attr::Reduce(k) => k.name().to_string(),
        Attr::Value(v) => vname(names, *v),
        Attr::List(l) => format!("[{}]", join(l)),
        Attr::Flag => String::new(),
        Attr::Str(t) => crate::text::lexer::quote(t),
    }
}
