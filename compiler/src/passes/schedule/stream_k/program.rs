//! The program around a kernel that `stream_k` rewrote: fresh names for its temps and its
//! zeroing kernel, the temps (the partials and the counters), and a launch of the zeroing
//! kernel before each launch of the kernel.

use kir_ir::{
    ArgBinding, Diagnostic, Diagnostics, Launch, Module, Param, ParamKind, Program, Span, TempDecl,
};
use std::collections::HashSet;

/// The names the pass adds: the partials' temps (one per accumulator), the counters' temp
/// and the zeroing kernel, none taken in `m`.
pub(super) struct Names {
    pub(super) partials: Vec<String>,
    pub(super) flags: String,
    pub(super) zero_kernel: String,
}

pub(super) fn fresh_names(m: &Module, kernel: &str, accs: usize) -> Names {
    let mut taken: HashSet<String> = HashSet::new();
    for k in m.kernels.values() {
        taken.insert(k.name.clone());
        taken.extend(k.params.iter().map(|p| p.name.clone()));
    }
    if let Some(p) = &m.program {
        taken.extend(p.params.iter().map(|x| x.name.clone()));
        taken.extend(p.temps.iter().map(|x| x.name.clone()));
    }
    let mut fresh = |base: String| {
        let mut name = base.clone();
        let mut n = 1;
        while taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(name.clone());
        name
    };
    let partials = (0..accs)
        .map(|i| {
            let base = if accs == 1 {
                "stream_k_partials".to_string()
            } else {
                format!("stream_k_partials{i}")
            };
            fresh(base)
        })
        .collect();
    Names {
        partials,
        flags: fresh("stream_k_flags".into()),
        zero_kernel: fresh(format!("{kernel}_stream_k_zero")),
    }
}

/// Adds the temps, the zeroing kernel and its launches to `m`'s program (made from the
/// kernel's `original` params if `m` had none).
pub(super) fn add_launches(
    m: &mut Module,
    kernel: &str,
    original: Vec<Param>,
    names: &Names,
    programs: u32,
) -> Result<(), Diagnostics> {
    let (_, k) = m.kernel(kernel).expect("the kernel was just rewritten");
    let added: Vec<Param> = k.params[original.len()..].to_vec();
    let kernel_span = k.span;
    let program = m.program.get_or_insert_with(|| Program {
        launches: vec![Launch {
            kernel: kernel.to_string(),
            args: original
                .iter()
                .map(|p| ArgBinding {
                    param: p.name.clone(),
                    arg: p.name.clone(),
                    span: Span::default(),
                })
                .collect(),
            span: Span::default(),
        }],
        params: original,
        temps: vec![],
        doc: vec![],
        span: Span::default(),
    });
    for p in &added {
        let ParamKind::Tensor(_, ty) = &p.kind else {
            continue;
        };
        program.temps.push(TempDecl {
            name: p.name.clone(),
            ty: ty.clone(),
            span: Span::default(),
        });
    }
    let mut launches = vec![];
    for mut l in std::mem::take(&mut program.launches) {
        if l.kernel == kernel {
            launches.push(Launch {
                kernel: names.zero_kernel.clone(),
                args: vec![ArgBinding {
                    param: "flags".into(),
                    arg: names.flags.clone(),
                    span: Span::default(),
                }],
                span: Span::default(),
            });
            l.args.extend(added.iter().map(|p| ArgBinding {
                param: p.name.clone(),
                arg: p.name.clone(),
                span: Span::default(),
            }));
        }
        launches.push(l);
    }
    program.launches = launches;
    let width = u64::from(programs).next_power_of_two();
    let text = format!(
        "module z\n// Zeroes the stream-K counters of @{kernel} before it runs.\nkernel @{}(flags: out tensor<i32>[{programs}]) grid [1, 1, 1] {{\n  %zero = const 0 : tile<{width}xi32>\n  store flags[0], %zero guard\n}}\n",
        names.zero_kernel
    );
    let z = kir_ir::text::parse(&text).map_err(|e| {
        Diagnostics(vec![Diagnostic::new(
            Span::default(),
            format!("internal: the stream-K zeroing kernel does not parse: {e:?}"),
        )])
    })?;
    let mut zk = z.kernels.into_iter().next().expect("one kernel").1;
    // Its text is made here, so a diagnostic about it points at the kernel it serves.
    zk.span = kernel_span;
    m.kernels.push(zk);
    Ok(())
}
