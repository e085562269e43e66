//! The e-graph language: one node type over every pure opcode of the op table.
//!
//! A [`TileNode`] carries its [`Head`] (an [`Opcode`] from `Opcode::ALL`, or an opaque
//! leaf for a value defined by a side-effecting anchor), an optional [`Sig`] (canonical
//! attribute text plus the result dtype and shape) and its children. Nothing here lists
//! opcodes by hand: which ops are pure comes from the table's effect column, names come from the
//! table.
//!
//! Pattern nodes (parsed from rule text like `(mul ?x ?c)`) have no `Sig`; they match a
//! node of the same head and arity whatever its attributes and type. Rule conditions then
//! check the facts they need through the analysis.

use egg::{FromOp, Id, Language};
use kir_ir::{CmpPred, Dtype, Opcode};
use std::fmt;
use std::sync::Arc;

/// What a node computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Head {
    /// A pure op of the table.
    Op(Opcode),
    /// A value the e-graph does not look into (a load result, a block argument, a
    /// `for`/`if` result); its `Sig::attrs` names the value.
    Leaf,
}

/// The attributes and result type of a concrete node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sig {
    /// Canonical text of the lead and keyword attributes (`sum axis=1`, `-inf`), or the
    /// leaf's value number.
    pub attrs: String,
    /// Result dtype.
    pub dtype: Dtype,
    /// Result shape; empty for a scalar.
    pub shape: Vec<usize>,
    /// For `const`: the literal's value as f64 bits (before rounding to `dtype`).
    pub konst: Option<u64>,
}

/// An e-node: head, signature (absent in patterns) and children.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileNode {
    /// The op or leaf.
    pub head: Head,
    /// Attributes and result type; `None` only in rule patterns.
    pub sig: Option<Arc<Sig>>,
    /// Operand e-classes, in operand order.
    pub args: Vec<Id>,
}

/// True for opcodes the e-graph may rewrite: the op table's [`kir_ir::Effect::Pure`] ops (no
/// memory access, no control flow, no scheduled-IR state).
pub fn is_pure(op: Opcode) -> bool {
    op.is_pure()
}

impl TileNode {
    /// A concrete node of `op` with attribute text `attrs`, result type and children.
    pub fn op(op: Opcode, attrs: &str, dtype: Dtype, shape: &[usize], args: Vec<Id>) -> TileNode {
        TileNode {
            head: Head::Op(op),
            sig: Some(Arc::new(Sig {
                attrs: attrs.to_string(),
                dtype,
                shape: shape.to_vec(),
                konst: None,
            })),
            args,
        }
    }

    /// A `cmp` node's predicate (its attribute text is the predicate's name); `None` for other
    /// nodes and patterns.
    pub fn cmp_pred(&self) -> Option<CmpPred> {
        match (self.head, &self.sig) {
            (Head::Op(Opcode::Cmp), Some(s)) => CmpPred::from_name(s.attrs.trim()),
            _ => None,
        }
    }

    /// A `const` node holding `value` (rounded to `dtype` by the op's semantics).
    pub fn constant(value: f64, dtype: Dtype, shape: &[usize]) -> TileNode {
        let text = if dtype.is_float() {
            kir_ir::expr::fmt_float(value)
        } else {
            format!("{}", value as i64)
        };
        TileNode {
            head: Head::Op(Opcode::Const),
            sig: Some(Arc::new(Sig {
                attrs: text,
                dtype,
                shape: shape.to_vec(),
                konst: Some(value.to_bits()),
            })),
            args: vec![],
        }
    }

    /// The opcode, if this is not a leaf.
    pub fn opcode(&self) -> Option<Opcode> {
        match self.head {
            Head::Op(o) => Some(o),
            Head::Leaf => None,
        }
    }
}

impl Language for TileNode {
    type Discriminant = Head;

    fn discriminant(&self) -> Head {
        self.head
    }

    fn matches(&self, other: &Self) -> bool {
        self.head == other.head
            && self.args.len() == other.args.len()
            && match (&self.sig, &other.sig) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    fn children(&self) -> &[Id] {
        &self.args
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.args
    }
}

impl fmt::Display for TileNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.head {
            Head::Op(o) => o.name(),
            Head::Leaf => "leaf",
        };
        match &self.sig {
            Some(s) if !s.attrs.is_empty() => write!(f, "{name}[{}]", s.attrs),
            _ => f.write_str(name),
        }
    }
}

/// Why a rule pattern could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a pure opcode of the op table")]
pub struct UnknownOp(pub String);

impl FromOp for TileNode {
    type Error = UnknownOp;

    fn from_op(op: &str, args: Vec<Id>) -> Result<Self, Self::Error> {
        match Opcode::from_name(op) {
            Some(o) if is_pure(o) => Ok(TileNode {
                head: Head::Op(o),
                sig: None,
                args,
            }),
            _ => Err(UnknownOp(op.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pure_opcode_parses_by_name() {
        for &o in Opcode::ALL {
            let parsed = TileNode::from_op(o.name(), vec![]);
            assert_eq!(parsed.is_ok(), is_pure(o), "{}", o.name());
        }
    }

    #[test]
    fn pattern_nodes_match_any_signature() {
        let pat = TileNode::from_op("mul", vec![Id::from(0), Id::from(0)]).unwrap();
        let n = TileNode::op(
            Opcode::Mul,
            "",
            Dtype::F32,
            &[4],
            vec![Id::from(1), Id::from(2)],
        );
        assert!(pat.matches(&n) && n.matches(&pat));
        let m = TileNode::op(
            Opcode::Mul,
            "",
            Dtype::F16,
            &[4],
            vec![Id::from(1), Id::from(2)],
        );
        assert!(!n.matches(&m));
    }
}
