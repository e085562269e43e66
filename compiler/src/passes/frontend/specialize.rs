//! Specialization: fixes every constant (defaults and `-D` overrides), folds them into the
//! module, drops params whose `if` is false and replaces each `static_if` by its chosen region.
//!
//! The result has no constants and only known element types; its kernel arenas are renumbered
//! (`kir_ir::renumber`) in the order the parser creates entities, so `parse(print(s)) == s`.

use kir_ir::renumber::renumber_kernel;
use kir_ir::text::printer::value_names;
use kir_ir::{
    Attr, Block, ConstDecl, ConstKind, ConstValues, Dfg, Diagnostic, Diagnostics, Dtype, ElemType,
    EvalError, EvalVal, Expr, Kernel, Module, Offset, Opcode, Param, ParamKind, Program, Span,
    TempDecl, TensorType, Type, Value,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Evaluates every constant of `m` in declaration order: the `-D` override when given (the last
/// one wins), else the default, evaluated with the earlier constants in scope. Checks each
/// `where` condition. Collects every error.
pub fn const_values(m: &Module, defines: &[(String, String)]) -> Result<ConstValues, Diagnostics> {
    let mut errs = Vec::new();
    let mut overrides: BTreeMap<&str, &str> = BTreeMap::new();
    let mut unknown: BTreeSet<&str> = BTreeSet::new();
    for (name, value) in defines {
        if m.const_decl(name).is_some() {
            overrides.insert(name, value);
        } else if unknown.insert(name) {
            let known: Vec<&str> = m.consts.iter().map(|c| c.name.as_str()).collect();
            let note = if known.is_empty() {
                format!("module `{}` declares no constants", m.name)
            } else {
                format!(
                    "the constants of module `{}` are: {}",
                    m.name,
                    known.join(", ")
                )
            };
            // An empty span at 0: this error has no place in the source.
            errs.push(
                Diagnostic::new(
                    Span::default(),
                    format!(
                        "-D {name}: unknown constant `{name}`{}",
                        crate::suggest::did_you_mean(name, known.iter().copied())
                    ),
                )
                .with_note(note),
            );
        }
    }
    let variants = variant_names(m);
    let mut env: ConstValues = Vec::new();
    let mut failed: BTreeSet<&str> = BTreeSet::new();
    for c in &m.consts {
        match const_value(
            c,
            overrides.get(c.name.as_str()).copied(),
            &env,
            &variants,
            &failed,
        ) {
            Ok(v) => env.push((c.name.clone(), v)),
            Err(d) => {
                failed.insert(&c.name);
                errs.extend(d);
            }
        }
    }
    if errs.is_empty() {
        Ok(env)
    } else {
        Err(Diagnostics(errs))
    }
}

/// Specializes `m` with `-D` overrides `defines` (see the module doc). Collects every error.
pub fn specialize(m: &Module, defines: &[(String, String)]) -> Result<Module, Diagnostics> {
    let env = const_values(m, defines)?;
    let variants = variant_names(m);
    let mut cx = Cx {
        env: &env,
        variants: &variants,
        errs: Vec::new(),
    };
    let mut kernels = m.kernels.clone();
    let mut removed_params: HashMap<String, BTreeSet<String>> = HashMap::new();
    for k in kernels.values_mut() {
        let (params, removed) = cx.params(&k.params);
        removed_params.insert(k.name.clone(), removed);
        k.params = params;
        k.grid = k.grid.iter().map(|e| cx.expr(e)).collect();
        k.requires = cx.requires(&k.requires);
        // Splice first, so constants are folded (and checked) in live code only.
        cx.splice_body(&mut k.dfg, k.body);
        renumber_kernel(k);
        cx.fold_body(&mut k.dfg);
        settle_names(k);
    }
    let program = m.program.as_ref().map(|p| cx.program(p, &removed_params));
    if !cx.errs.is_empty() {
        return Err(Diagnostics(cx.errs));
    }
    Ok(Module {
        doc: m.doc.clone(),
        name: m.name.clone(),
        consts: vec![],
        kernels,
        program,
    })
}

/// Renames values whose names a splice made collide (`%x` from a `static_if` region and a
/// later `%x` outside it) to the names the printer gives them, so the printed text reparses
/// to an equal kernel.
fn settle_names(k: &mut Kernel) {
    let names = value_names(k);
    for (v, d) in k.dfg.values.iter_mut() {
        if d.name.is_some() {
            d.name = names.get(v).cloned();
        }
    }
}

/// Every enum variant name of the module: such names evaluate to themselves.
fn variant_names(m: &Module) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for c in &m.consts {
        if let ConstKind::Enum(vs) = &c.kind {
            s.extend(vs.iter().cloned());
        }
    }
    s
}

/// Resolves a name against the constants evaluated so far, then the enum variants.
fn lookup(env: &ConstValues, variants: &BTreeSet<String>, name: &str) -> Option<EvalVal> {
    env.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .or_else(|| {
            variants
                .contains(name)
                .then(|| EvalVal::Sym(name.to_string()))
        })
}

/// The value of one constant, with its `where` checked.
fn const_value(
    c: &ConstDecl,
    given: Option<&str>,
    env: &ConstValues,
    variants: &BTreeSet<String>,
    failed: &BTreeSet<&str>,
) -> Result<EvalVal, Vec<Diagnostic>> {
    let name = &c.name;
    let value = match (given, &c.kind) {
        (Some(text), ConstKind::Int) => match text.trim().parse::<i64>() {
            Ok(i) => EvalVal::Int(i),
            Err(_) => {
                return Err(vec![Diagnostic::new(
                    c.span,
                    format!("-D {name}={text}: `{name}` is an integer constant and `{text}` is not an integer"),
                )])
            }
        },
        (Some(text), ConstKind::Enum(vs)) => {
            if vs.iter().any(|v| v == text.trim()) {
                EvalVal::Sym(text.trim().to_string())
            } else {
                return Err(vec![Diagnostic::new(
                    c.span,
                    format!(
                        "-D {name}={text}: `{text}` is not one of {{{}}}{}",
                        vs.join(", "),
                        crate::suggest::did_you_mean(text.trim(), vs.iter().map(String::as_str))
                    ),
                )])
            }
        }
        (None, kind) => {
            let v = c.default.eval(&|n| lookup(env, variants, n), false).map_err(|e| match &e {
                EvalError::Unknown(n, _) if failed.contains(n.as_str()) => vec![],
                _ => vec![eval_diag(&e, &format!("default of constant `{name}`"))],
            })?;
            match (kind, v) {
                (ConstKind::Int, EvalVal::Int(i)) => EvalVal::Int(i),
                (ConstKind::Int, EvalVal::Bool(b)) => EvalVal::Int(b as i64),
                (ConstKind::Enum(vs), EvalVal::Sym(s)) if vs.contains(&s) => EvalVal::Sym(s),
                (ConstKind::Int, v) => {
                    return Err(vec![Diagnostic::new(
                        c.default.span,
                        format!("the default of integer constant `{name}` is `{v}`, not an integer"),
                    )])
                }
                (ConstKind::Enum(vs), v) => {
                    return Err(vec![Diagnostic::new(
                        c.default.span,
                        format!("the default of `{name}` is `{v}`, not one of {{{}}}", vs.join(", ")),
                    )])
                }
            }
        }
    };
    if let Some(cond) = &c.require {
        let with = |n: &str| {
            if n == name {
                Some(value.clone())
            } else {
                lookup(env, variants, n)
            }
        };
        let ok = match cond.eval(&with, false) {
            Ok(EvalVal::Bool(b)) => b,
            Ok(EvalVal::Int(i)) => i != 0,
            Ok(v) => {
                return Err(vec![Diagnostic::new(
                    cond.span,
                    format!("the `where` condition of `{name}` gives `{v}`, not a condition"),
                )])
            }
            Err(EvalError::Unknown(n, _)) if failed.contains(n.as_str()) => return Err(vec![]),
            Err(e) => {
                return Err(vec![eval_diag(
                    &e,
                    &format!("`where` condition of constant `{name}`"),
                )])
            }
        };
        if !ok {
            let from = if given.is_some() {
                "set by -D"
            } else {
                "the default"
            };
            return Err(vec![Diagnostic::new(
                cond.span,
                format!("constant `{name}` = {value} ({from}) does not satisfy `where {cond}`"),
            )]);
        }
    }
    Ok(value)
}

/// A diagnostic for a failed evaluation of `what`.
fn eval_diag(e: &EvalError, what: &str) -> Diagnostic {
    Diagnostic::new(e.span(), format!("cannot evaluate the {what}: {e}"))
}

/// Specialization state: the constant values and the errors found so far.
struct Cx<'a> {
    env: &'a ConstValues,
    variants: &'a BTreeSet<String>,
    errs: Vec<Diagnostic>,
}

impl Cx<'_> {
    fn get(&self, n: &str) -> Option<EvalVal> {
        lookup(self.env, self.variants, n)
    }

    /// Substitutes the constants into `e` and folds; dims stay symbolic.
    fn expr(&mut self, e: &Expr) -> Expr {
        match e.substitute(&|n| self.get(n)) {
            Ok(x) => x,
            Err(err) => {
                self.errs
                    .push(eval_diag(&err, &format!("expression `{e}`")));
                e.clone()
            }
        }
    }

    /// Evaluates a condition that may name only constants (param `if`, `static_if`).
    fn cond(&mut self, e: &Expr, what: &str) -> Option<bool> {
        match e.eval(&|n| self.get(n), false) {
            Ok(EvalVal::Bool(b)) => Some(b),
            Ok(EvalVal::Int(i)) => Some(i != 0),
            Ok(v) => {
                self.errs.push(Diagnostic::new(
                    e.span,
                    format!("the {what} `{e}` gives `{v}`, not a condition"),
                ));
                None
            }
            Err(EvalError::Unknown(n, sp)) => {
                self.errs.push(Diagnostic::new(
                    sp,
                    format!("the {what} `{e}` names `{n}`, which is not a constant; it must depend on constants only"),
                ));
                None
            }
            Err(err) => {
                self.errs.push(eval_diag(&err, what));
                None
            }
        }
    }

    fn elem(&mut self, t: &ElemType) -> ElemType {
        let ElemType::Named(n, sp) = t else {
            return t.clone();
        };
        let value = self.env.iter().find(|(c, _)| c == n).map(|(_, v)| v);
        let dtype = match value {
            Some(EvalVal::Sym(s)) => Dtype::from_name(s),
            _ => None,
        };
        match (dtype, value) {
            (Some(d), _) => return ElemType::Known(d),
            (None, Some(v)) => self.errs.push(Diagnostic::new(
                *sp,
                format!("element type `{n}` is `{v}`, which is not a dtype"),
            )),
            (None, None) => self
                .errs
                .push(Diagnostic::new(*sp, format!("unknown element type `{n}`"))),
        }
        t.clone()
    }

    fn ty(&mut self, t: &Type) -> Type {
        match t {
            Type::Scalar(e) => Type::Scalar(self.elem(e)),
            Type::Tile(dims, e) => {
                Type::Tile(dims.iter().map(|d| self.expr(d)).collect(), self.elem(e))
            }
            Type::Smem(dims, e) => {
                Type::Smem(dims.iter().map(|d| self.expr(d)).collect(), self.elem(e))
            }
            Type::Mbar(n) => Type::Mbar(self.expr(n)),
        }
    }

    fn tensor_ty(&mut self, t: &TensorType) -> TensorType {
        TensorType {
            elem: self.elem(&t.elem),
            dims: t.dims.iter().map(|d| self.expr(d)).collect(),
            strides: t
                .strides
                .as_ref()
                .map(|s| s.iter().map(|d| self.expr(d)).collect()),
        }
    }

    /// Kept params (conditions dropped) and the names of the removed ones.
    fn params(&mut self, ps: &[Param]) -> (Vec<Param>, BTreeSet<String>) {
        let (mut kept, mut removed) = (Vec::new(), BTreeSet::new());
        for p in ps {
            if let Some(c) = &p.cond {
                if self.cond(c, "param condition") == Some(false) {
                    removed.insert(p.name.clone());
                    continue;
                }
            }
            let kind = match &p.kind {
                ParamKind::Tensor(a, t) => ParamKind::Tensor(*a, self.tensor_ty(t)),
                ParamKind::Scalar(e) => ParamKind::Scalar(self.elem(e)),
            };
            kept.push(Param {
                name: p.name.clone(),
                kind,
                cond: None,
                span: p.span,
            });
        }
        removed.retain(|n| !kept.iter().any(|p| &p.name == n));
        (kept, removed)
    }

    /// Folds requirements; literally true ones are dropped, literally false ones are errors.
    fn requires(&mut self, rs: &[Expr]) -> Vec<Expr> {
        let mut out = Vec::new();
        for r in rs {
            let e = self.expr(r);
            match e.as_int() {
                Some(0) => self.errs.push(Diagnostic::new(
                    r.span,
                    format!("requirement `{r}` is false for these constant values"),
                )),
                Some(_) => {}
                None => out.push(e),
            }
        }
        out
    }

    fn program(
        &mut self,
        p: &Program,
        removed_params: &HashMap<String, BTreeSet<String>>,
    ) -> Program {
        let (params, _) = self.params(&p.params);
        let temps = p
            .temps
            .iter()
            .map(|t| TempDecl {
                name: t.name.clone(),
                ty: self.tensor_ty(&t.ty),
                span: t.span,
            })
            .collect();
        let mut launches = p.launches.clone();
        for l in &mut launches {
            if let Some(removed) = removed_params.get(&l.kernel) {
                l.args.retain(|a| !removed.contains(&a.param));
            }
        }
        Program {
            params,
            temps,
            launches,
            doc: p.doc.clone(),
            span: p.span,
        }
    }

    /// Splices each `static_if`'s chosen region into its parent block and redirects the uses
    /// of its results to the values the region yields. The replaced ops and the regions not
    /// taken stay in the arenas, unreachable, until the caller renumbers.
    fn splice_body(&mut self, dfg: &mut Dfg, body: Block) {
        let mut replace = HashMap::new();
        self.splice(dfg, body, &mut replace);
        if replace.is_empty() {
            return;
        }
        // A yielded value may itself be the result of a spliced static_if: follow the chain.
        let resolve = |mut v: Value| {
            for _ in 0..=replace.len() {
                match replace.get(&v) {
                    Some(&n) => v = n,
                    None => break,
                }
            }
            v
        };
        for od in dfg.ops.values_mut() {
            for v in &mut od.operands {
                *v = resolve(*v);
            }
            for (_, a) in &mut od.attrs {
                if let Attr::Value(v) = a {
                    *v = resolve(*v);
                }
            }
            if let Some(t) = &mut od.tensor {
                for off in &mut t.offsets {
                    if let Offset::Value(v) = off {
                        *v = resolve(*v);
                    }
                }
            }
        }
    }

    /// Substitutes the constants into every type and expression of a (renumbered, so live)
    /// kernel body.
    fn fold_body(&mut self, dfg: &mut Dfg) {
        for vd in dfg.values.values_mut() {
            vd.ty = self.ty(&vd.ty);
        }
        for od in dfg.ops.values_mut() {
            od.lead = od.lead.take().map(|a| self.attr(a));
            od.attrs = std::mem::take(&mut od.attrs)
                .into_iter()
                .map(|(k, a)| (k, self.attr(a)))
                .collect();
            if let Some(t) = &mut od.tensor {
                for off in &mut t.offsets {
                    if let Offset::Expr(e) = off {
                        *e = self.expr(e);
                    }
                }
            }
        }
    }

    fn attr(&mut self, a: Attr) -> Attr {
        match a {
            Attr::Expr(e) => Attr::Expr(self.expr(&e)),
            Attr::List(es) => Attr::List(es.iter().map(|e| self.expr(e)).collect()),
            Attr::Value(_)
            | Attr::Name(..)
            | Attr::Flag
            | Attr::Cmp(_)
            | Attr::Reduce(_)
            | Attr::Str(_) => a,
        }
    }

    /// Replaces, in block `b` and the regions below it, each `static_if` by the ops of the
    /// region its condition selects (without the final `yield`), recording in `replace` the
    /// yielded value for each of its results.
    fn splice(&mut self, dfg: &mut Dfg, b: Block, replace: &mut HashMap<Value, Value>) {
        let ops = std::mem::take(&mut dfg.blocks[b].ops);
        let mut out = Vec::with_capacity(ops.len());
        for o in ops {
            if dfg.ops[o].opcode != Opcode::StaticIf {
                for r in dfg.ops[o].regions.clone() {
                    self.splice(dfg, r, replace);
                }
                out.push(o);
                continue;
            }
            let od = &dfg.ops[o];
            let (span, results) = (od.span, od.results.clone());
            let Some(Attr::Expr(c)) = od.lead.clone() else {
                self.errs
                    .push(Diagnostic::new(span, "`static_if` without a condition"));
                continue;
            };
            let Some(taken) = self.cond(&c, "`static_if` condition") else {
                continue;
            };
            let Some(&region) = od.regions.get(if taken { 0 } else { 1 }) else {
                self.errs
                    .push(Diagnostic::new(span, "`static_if` is missing a region"));
                continue;
            };
            self.splice(dfg, region, replace);
            let mut body = dfg.blocks[region].ops.clone();
            let yielded = match body.last() {
                Some(&y) if dfg.ops[y].opcode == Opcode::Yield => {
                    body.pop();
                    dfg.ops[y].operands.clone()
                }
                _ => vec![],
            };
            if yielded.len() != results.len() {
                let which = if taken { "then" } else { "else" };
                self.errs.push(Diagnostic::new(
                    span,
                    format!(
                        "`static_if` defines {} value(s) but its {which} region yields {}",
                        results.len(),
                        yielded.len()
                    ),
                ));
                continue;
            }
            replace.extend(results.into_iter().zip(yielded));
            out.extend(body);
        }
        dfg.blocks[b].ops = out;
    }
}
