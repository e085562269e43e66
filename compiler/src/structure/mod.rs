//! The structural analysis behind the configuration rows (docs/configs.md): what a module's
//! kernels are, read from the IR — a dot loop (GEMM-like), attention forward (an online-softmax
//! key loop), attention backward (dK/dV and dQ loops), a row reduction (a norm), an elementwise
//! tile — which of its constants play which role (the M, N and K tiles, the query and key
//! blocks, the program-order group, the row and column blocks) and the features the rows'
//! conditions read (operand dtype, transposed A, head dim, causal, additive mask). A module
//! whose kernels make no class together (a program of a norm and a GEMM) is configured kernel
//! by kernel ([`of_kernel`]).
//!
//! The analysis walks the generic module with each `static_if` resolved by the constant values
//! ([`view::View`]), so conditions read the specialization while roles keep the constants'
//! names. It never matches a name of the module, its kernels or its constants, nor source text:
//! a user's copy of a built-in op, renamed, is the same structure.

pub mod kernel;
pub mod rows;
pub mod types;
pub mod view;

pub use types::{Class, Features, KernelKind, KernelShape, NoRole, Role, Structure};

use kir_ir::{EvalVal, Module};

/// Analyzes every kernel of `m` specialized with constant `values` and classifies the module.
pub fn analyze(m: &Module, values: &[(String, EvalVal)]) -> Structure {
    let kernels: Vec<KernelShape> = m
        .kernels
        .values()
        .map(|k| kernel::analyze(&view::View::new(m, k, values)))
        .collect();
    let none = |kernels: Vec<KernelShape>| Structure {
        class: None,
        roles: vec![],
        features: Features::default(),
        kernels,
    };
    if let [k] = &kernels[..] {
        return of_kernel(k);
    }
    // Attention backward: one dK/dV kernel, at most one dQ kernel, the rest helpers of any
    // kind (the delta preprocess is a row reduction).
    let count = |kind: &KernelKind| kernels.iter().filter(|k| &k.kind == kind).count();
    let others = kernels
        .iter()
        .filter(|k| {
            !matches!(
                k.kind,
                KernelKind::AttentionBwdKv | KernelKind::AttentionBwdQ
            )
        })
        .count();
    let kv = count(&KernelKind::AttentionBwdKv);
    let q = count(&KernelKind::AttentionBwdQ);
    if kv == 1 && q <= 1 && kv + q + others == kernels.len() {
        let kvk = kernels
            .iter()
            .find(|k| k.kind == KernelKind::AttentionBwdKv)
            .expect("counted");
        let mut roles = kvk.roles.clone();
        let mut features = kvk.features.clone();
        if let Some(qk) = kernels.iter().find(|k| k.kind == KernelKind::AttentionBwdQ) {
            roles.extend(qk.roles.iter().cloned());
            features.causal |= qk.features.causal;
            features.band |= qk.features.band;
        }
        return Structure {
            class: Some(Class::AttentionBwd),
            roles,
            features,
            kernels,
        };
    }
    none(kernels)
}

/// The structure of one kernel on its own: its class where its kind makes one, its roles and
/// its features. A module whose kernels make no class together gets a configuration per kernel
/// from these (`crate::configs::kernel_configs`).
pub fn of_kernel(k: &KernelShape) -> Structure {
    let class = match k.kind {
        KernelKind::DotLoop => Some(Class::DotLoop),
        KernelKind::Attention => Some(Class::Attention),
        KernelKind::RowReduce => Some(Class::RowReduce),
        KernelKind::Elementwise => Some(Class::Elementwise),
        KernelKind::AttentionBwdKv | KernelKind::AttentionBwdQ | KernelKind::Other(_) => None,
    };
    Structure {
        class,
        roles: if class.is_some() {
            k.roles.clone()
        } else {
            vec![]
        },
        features: if class.is_some() {
            k.features.clone()
        } else {
            Features::default()
        },
        kernels: vec![k.clone()],
    }
}
