//! The walk over a kernel body: block/region structure, conformance of every op to its row of
//! the op table, `yield` placement, and SSA scoping (definition before use, no value escaping its
//! region); every op reached is then checked by its type rule (`rules.rs`).

use super::body::{op_scope, Body};
use super::common::{err, err_note, lit_int, Errs};
use super::names::check_elem;
use super::rules;
use crate::entities::{Block, Op, Value};
use crate::module::{Kernel, Module, OpData, ValueDef};
use crate::ops::Opcode;
use crate::types::Type;
use cranelift_entity::EntityRef;
use std::collections::HashSet;

/// Deepest region nesting the verifier descends into (deeper input is reported, not followed).
const MAX_DEPTH: usize = 200;

/// Checks the body of `k`: structure, op-table conformance, scoping, then every type rule.
pub(crate) fn check_body(m: &Module, k: &Kernel, dims: &[String], errs: &mut Errs) {
    let dfg = &k.dfg;
    let mut b = Body {
        m,
        k,
        dims,
        errs,
        op_block: vec![None; dfg.ops.len()],
        block_parent: vec![None; dfg.blocks.len()],
        reachable: vec![false; dfg.blocks.len()],
        in_scope: vec![false; dfg.values.len()],
        walked: vec![false; dfg.ops.len()],
        chain: Vec::new(),
        seen_type_errs: HashSet::new(),
    };
    if dfg.blocks.get(k.body).is_none() {
        err(
            b.errs,
            k.span,
            format!("the body block of kernel `@{}` does not exist", k.name),
        );
        return;
    }
    b.map_blocks();
    b.check_defs();
    b.walk(k.body, 0);
}

impl Body<'_> {
    /// Finds the reachable blocks, the block of every op and the owner of every region.
    fn map_blocks(&mut self) {
        let dfg = &self.k.dfg;
        self.reachable[self.k.body.index()] = true;
        let mut stack = vec![self.k.body];
        while let Some(blk) = stack.pop() {
            let Some(bd) = dfg.blocks.get(blk) else {
                continue;
            };
            for &op in &bd.ops {
                let Some(d) = dfg.ops.get(op) else {
                    err(
                        self.errs,
                        self.k.span,
                        format!("block {blk} lists {op}, which is not an op of this kernel"),
                    );
                    continue;
                };
                if let Some(prev) = self.op_block[op.index()] {
                    err(
                        self.errs,
                        d.span,
                        format!(
                            "this `{}` op is listed more than once (in blocks {prev} and {blk})",
                            d.opcode.name()
                        ),
                    );
                    continue;
                }
                self.op_block[op.index()] = Some(blk);
                for (i, &r) in d.regions.iter().enumerate() {
                    let name = d.opcode.name();
                    match self.reachable.get(r.index()) {
                        None => err(self.errs, d.span, format!("region {i} of `{name}` is {r}, which is not a block of this kernel")),
                        Some(true) => err(
                            self.errs,
                            d.span,
                            format!("region {i} of `{name}` is block {r}, which is already the kernel body or another op's region"),
                        ),
                        Some(false) => {
                            self.reachable[r.index()] = true;
                            self.block_parent[r.index()] = Some(op);
                            stack.push(r);
                        }
                    }
                }
            }
        }
    }

    /// Every result and block argument records where it is defined.
    fn check_defs(&mut self) {
        let dfg = &self.k.dfg;
        for (op, d) in dfg.ops.iter() {
            if self.op_block[op.index()].is_none() {
                continue;
            }
            for (i, &v) in d.results.iter().enumerate() {
                match dfg.values.get(v) {
                    None => err(self.errs, d.span, format!("result {i} of `{}` is {v}, which is not a value of this kernel", d.opcode.name())),
                    Some(vd) if vd.def != ValueDef::Result(op, i as u32) => err(
                        self.errs,
                        d.span,
                        format!("result {i} of `{}` is {v}, whose definition says {:?} (corrupt value table)", d.opcode.name(), vd.def),
                    ),
                    Some(_) => {}
                }
            }
        }
        for (blk, bd) in dfg.blocks.iter() {
            if !self.reachable[blk.index()] {
                continue;
            }
            for (i, &v) in bd.args.iter().enumerate() {
                let ok = dfg
                    .values
                    .get(v)
                    .is_some_and(|vd| vd.def == ValueDef::Arg(blk, i as u32));
                if !ok {
                    err(self.errs, self.k.span, format!("argument {i} of block {blk} is {v}, which is not recorded as that block's argument"));
                }
            }
        }
    }

    /// Walks one block in order: arguments, then each op (structure, uses, type rule, regions,
    /// results). On exit everything the block defined goes out of scope.
    fn walk(&mut self, blk: Block, depth: usize) {
        let dfg = &self.k.dfg;
        let Some(bd) = dfg.blocks.get(blk) else {
            return;
        };
        self.chain.push(blk);
        let owner = self.block_parent.get(blk.index()).copied().flatten();
        if owner.is_none() && !bd.args.is_empty() {
            err(
                self.errs,
                self.k.span,
                format!("the body of kernel `@{}` has block arguments", self.k.name),
            );
        }
        for &a in &bd.args {
            self.define(a);
        }
        if let Some(o) = owner.and_then(|o| dfg.ops.get(o)) {
            let ends_in_yield = bd
                .ops
                .last()
                .and_then(|&l| dfg.ops.get(l))
                .is_some_and(|l| l.opcode == Opcode::Yield);
            if !ends_in_yield {
                err(
                    self.errs,
                    o.span,
                    format!(
                        "a region of `{}` does not end with `yield`",
                        o.opcode.name()
                    ),
                );
            }
        }
        let n = bd.ops.len();
        for (i, &op) in bd.ops.iter().enumerate() {
            let Some(d) = dfg.ops.get(op) else { continue };
            if self.op_block[op.index()] != Some(blk) || self.walked[op.index()] {
                continue;
            }
            self.walked[op.index()] = true;
            if d.opcode == Opcode::Yield {
                if i + 1 != n {
                    err(
                        self.errs,
                        d.span,
                        "`yield` must be the last op of its region",
                    );
                } else if owner.is_none() && !d.operands.is_empty() {
                    err(
                        self.errs,
                        d.span,
                        "the kernel body cannot `yield` values: it is not the region of an op",
                    );
                }
            }
            self.structure(d);
            for u in d.uses() {
                self.check_use(op, d, u);
            }
            rules::check_op(self, op, d);
            for &r in &d.regions {
                if self.block_parent.get(r.index()).copied().flatten() == Some(op) {
                    if depth >= MAX_DEPTH {
                        err(
                            self.errs,
                            d.span,
                            format!("regions are nested more than {MAX_DEPTH} deep"),
                        );
                    } else {
                        self.walk(r, depth + 1);
                    }
                }
            }
            for &v in &d.results {
                self.define(v);
            }
        }
        super::rules_sched::straight_line(self, blk);
        for &a in &bd.args {
            self.undefine(a);
        }
        for &op in &bd.ops {
            if self.op_block.get(op.index()).copied().flatten() == Some(blk) {
                if let Some(d) = dfg.ops.get(op) {
                    d.results.iter().for_each(|&v| self.undefine(v));
                }
            }
        }
        self.chain.pop();
    }

    fn define(&mut self, v: Value) {
        if let Some(slot) = self.in_scope.get_mut(v.index()) {
            *slot = true;
            self.check_value_type(v);
        }
    }

    fn undefine(&mut self, v: Value) {
        if let Some(slot) = self.in_scope.get_mut(v.index()) {
            *slot = false;
        }
    }

    /// A value's type is well formed: tiles have rank ≥ 1 and positive dims naming constants,
    /// within the resource limits of `limits`; a named element type names a dtype constant.
    fn check_value_type(&mut self, v: Value) {
        let Some(vd) = self.k.dfg.values.get(v) else {
            return;
        };
        let mut found = Vec::new();
        if let Type::Tile(dims, _) = &vd.ty {
            if dims.is_empty() {
                err(
                    &mut found,
                    vd.span,
                    format!(
                        "`{}` has a tile type with no dims (use a scalar type)",
                        self.vname(v)
                    ),
                );
            }
            let scope = op_scope(self.m, self.dims, "a tile dim", false);
            for d in dims {
                scope.check(d, &mut found);
                if lit_int(d).is_some_and(|x| x <= 0) {
                    err(
                        &mut found,
                        vd.span,
                        format!("tile dim `{d}` of `{}` is not positive", self.vname(v)),
                    );
                }
            }
            let what = format!("`{}`", self.vname(v));
            super::limits::check_tile(&mut found, vd.span, &vd.ty, &what);
        }
        check_elem(self.m, vd.ty.elem(), &mut found);
        for e in found {
            if self.seen_type_errs.insert(e.message.clone()) {
                self.errs.push(e);
            }
        }
    }

    /// Reports a use of `u` by `op` that is not in scope, saying why.
    fn check_use(&mut self, op: Op, d: &OpData, u: Value) {
        let name = d.opcode.name();
        let Some(vd) = self.k.dfg.values.get(u) else {
            err(
                self.errs,
                d.span,
                format!("`{name}` uses {u}, which is not a value of this kernel"),
            );
            return;
        };
        if self.in_scope.get(u.index()).copied().unwrap_or(false) {
            return;
        }
        let vn = self.vname(u);
        let def_block = match vd.def {
            ValueDef::Result(o, _) if o == op => {
                err(
                    self.errs,
                    d.span,
                    format!("`{name}` uses its own result `{vn}`"),
                );
                return;
            }
            ValueDef::Result(o, i) => {
                let listed = self
                    .k
                    .dfg
                    .ops
                    .get(o)
                    .and_then(|od| od.results.get(i as usize))
                    == Some(&u);
                if listed {
                    self.op_block.get(o.index()).copied().flatten()
                } else {
                    None
                }
            }
            ValueDef::Arg(b, _) => {
                Some(b).filter(|b| self.reachable.get(b.index()).copied().unwrap_or(false))
            }
        };
        match def_block {
            None => err(
                self.errs,
                d.span,
                format!("`{name}` uses `{vn}`, whose definition is not in the kernel body"),
            ),
            Some(db) if self.chain.contains(&db) => err_note(
                self.errs,
                d.span,
                format!("`{name}` uses `{vn}` before its definition"),
                "a value must be defined earlier in the same block or in an enclosing block",
            ),
            Some(db) => {
                let owner = self.region_owner_outside(db);
                err_note(
                    self.errs,
                    d.span,
                    format!(
                        "`{vn}` is defined inside the region of `{owner}` and is not visible here"
                    ),
                    "values do not escape their region: `yield` it and use the op's result",
                );
            }
        }
    }

    /// The mnemonic of the outermost op, not itself enclosing the current point, whose region
    /// contains `blk`.
    fn region_owner_outside(&self, mut blk: Block) -> &'static str {
        let mut owner = "?";
        for _ in 0..self.block_parent.len() + 1 {
            if self.chain.contains(&blk) {
                break;
            }
            let Some(op) = self.block_parent.get(blk.index()).copied().flatten() else {
                break;
            };
            let Some(d) = self.k.dfg.ops.get(op) else {
                break;
            };
            owner = d.opcode.name();
            match self.op_block.get(op.index()).copied().flatten() {
                Some(b) => blk = b,
                None => break,
            }
        }
        owner
    }
}
