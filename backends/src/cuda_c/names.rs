//! C identifiers for the generated code, and the one-line IR text each C statement is
//! commented with.
//!
//! Value names come from the IR (`%acc` → `acc`, anonymous values as the printer numbers them,
//! `%v3` → `v3`). Every identifier of a kernel is unique within it: a name that is a C++ keyword,
//! a CUDA built-in, a helper (`kir_*`), a loop variable of the generated code or an earlier name
//! gets a `_2`, `_3`, … suffix.

use cranelift_entity::SecondaryMap;
use kir_ir::text::printer::value_names;
use kir_ir::{Attr, Kernel, OpData, Opcode, Value};
use std::collections::HashSet;

/// Names the generated code uses for its own loop variables: the linear element index `e`,
/// element coordinates `e0`…, the reduction index `j` and accumulator `partial`, the dot-product
/// index `kk` and accumulator `dot_sum`, and the bounds flag `in_bounds`.
const LOOP_NAMES: &[&str] = &[
    "e",
    "e0",
    "e1",
    "e2",
    "e3",
    "e4",
    "e5",
    "e6",
    "e7",
    "j",
    "kk",
    "in_bounds",
    "partial",
    "dot_sum",
];

/// C++ keywords and CUDA/C names a kernel identifier must not shadow.
const RESERVED: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "asm",
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "constexpr",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "nullptr",
    "operator",
    "or",
    "private",
    "protected",
    "public",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
    "xor",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "printf",
    "expf",
    "exp2f",
    "logf",
    "log2f",
    "tanhf",
    "floorf",
    "fabsf",
    "min",
    "max",
    "atomicAdd",
    "atomicCAS",
    "main",
    "std",
    "KIR_INF",
    "KIR_NAN",
];

/// The set of identifiers taken in one kernel.
#[derive(Default)]
pub(crate) struct Names {
    used: HashSet<String>,
}

impl Names {
    /// A namespace with the reserved words and loop variables taken.
    pub(crate) fn new() -> Names {
        let mut n = Names::default();
        n.used
            .extend(RESERVED.iter().chain(LOOP_NAMES).map(|s| s.to_string()));
        n
    }

    /// A fresh identifier derived from `base` (sanitized to `[A-Za-z0-9_]`, not starting with
    /// a digit or `kir_`, not `__`-prefixed), unique in this kernel.
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        let mut b: String = base
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if b.is_empty() || b.starts_with(|c: char| c.is_ascii_digit()) {
            b = format!("v{b}");
        }
        if b.starts_with("kir_") || b.starts_with('_') {
            b = format!("v{b}");
        }
        let mut name = b.clone();
        let mut i = 2;
        while self.used.contains(&name) {
            name = format!("{b}_{i}");
            i += 1;
        }
        self.used.insert(name.clone());
        name
    }
}

/// C names of every value of `k`, derived from the canonical IR names.
pub(crate) fn value_c_names(k: &Kernel, names: &mut Names) -> SecondaryMap<Value, String> {
    let ir = value_names(k);
    let mut out = SecondaryMap::new();
    // Name in definition order so the numbering reads top to bottom.
    let mut order: Vec<Value> = ir.keys().filter(|&v| !ir[v].is_empty()).collect();
    order.sort();
    for v in order {
        out[v] = names.fresh(&ir[v]);
    }
    out
}

/// One line of IR text for `op` as the printer writes it (for `for`/`if`: the header only).
pub(crate) fn op_text(k: &Kernel, ir: &SecondaryMap<Value, String>, op: &OpData) -> String {
    let vn = |v: Value| {
        let n = &ir[v];
        if n.is_empty() {
            format!("{v}")
        } else {
            format!("%{n}")
        }
    };
    let list = |vs: &[Value]| vs.iter().map(|&v| vn(v)).collect::<Vec<_>>().join(", ");
    let types = op
        .results
        .iter()
        .map(|&r| k.dfg.ty(r).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = String::new();
    if !op.results.is_empty() {
        s += &format!("{} = ", list(&op.results));
    }
    s += op.opcode.name();
    match op.opcode {
        Opcode::For => {
            let args = op
                .regions
                .first()
                .map(|&b| k.dfg.blocks[b].args.clone())
                .unwrap_or_default();
            if let (Some(&iv), [lo, hi, step, ..]) = (args.first(), &op.operands[..]) {
                s += &format!(
                    " {} = {} to {} step {}",
                    vn(iv),
                    vn(*lo),
                    vn(*hi),
                    vn(*step)
                );
            }
            if op.operands.len() > 3 {
                let pairs: Vec<String> = op.operands[3..]
                    .iter()
                    .zip(args.iter().skip(1))
                    .map(|(&init, &a)| format!("{} = {}", vn(a), vn(init)))
                    .collect();
                s += &format!(" iter({})", pairs.join(", "));
            }
        }
        _ => {
            match &op.lead {
                Some(Attr::Expr(e)) => s += &format!(" {e}"),
                Some(Attr::Name(n, _)) => s += &format!(" {n}"),
                Some(Attr::Cmp(p)) => s += &format!(" {p}"),
                Some(Attr::Reduce(k)) => s += &format!(" {k}"),
                Some(Attr::Value(v)) => s += &format!(" {}", vn(*v)),
                Some(Attr::List(l)) => {
                    let l: Vec<String> = l.iter().map(|e| e.to_string()).collect();
                    s += &format!(" [{}]", l.join(", "));
                }
                Some(Attr::Str(t)) => s += &format!(" {}", kir_ir::text::lexer::quote(t)),
                Some(Attr::Flag) | None => {}
            }
            if let Some(t) = &op.tensor {
                let offs: Vec<String> = t
                    .offsets
                    .iter()
                    .map(|o| match o {
                        kir_ir::Offset::Value(v) => vn(*v),
                        kir_ir::Offset::Expr(e) => e.to_string(),
                    })
                    .collect();
                s += &format!(" {}[{}]", t.param, offs.join(", "));
                if !op.operands.is_empty() {
                    s += ",";
                }
            }
            if !op.operands.is_empty() {
                s += &format!(" {}", list(&op.operands));
            }
            for (key, a) in &op.attrs {
                match a {
                    Attr::Flag => s += &format!(" {key}"),
                    Attr::Expr(e) => s += &format!(" {key} {e}"),
                    Attr::Name(n, _) => s += &format!(" {key} {n}"),
                    Attr::Cmp(p) => s += &format!(" {key} {p}"),
                    Attr::Reduce(k) => s += &format!(" {key} {k}"),
                    Attr::Value(v) => s += &format!(" {key} {}", vn(*v)),
                    Attr::Str(t) => s += &format!(" {key} {}", kir_ir::text::lexer::quote(t)),
                    Attr::List(l) => {
                        let l: Vec<String> = l.iter().map(|e| e.to_string()).collect();
                        s += &format!(" {key} [{}]", l.join(", "));
                    }
                }
            }
        }
    }
    if !types.is_empty() {
        s += &format!(" : {types}");
    }
    s
}
