//! Two launches of a program that touch no common memory run together: the first on a stream of
//! the program's own (one for all its bindings), the second on the caller's, both after the
//! work already on the caller's stream, and the caller's stream waits for both before anything
//! after them (a fork and a join through two events). So the second kernel's blocks fill the
//! SMs that the first one's last wave leaves idle, instead of waiting for its last block:
//! attention_bwd's dK/dV and dQ kernels (each reads q, k, v, do and the preprocess's temps, and
//! writes its own gradients) lose that tail (docs/backends.md, "Launches that run together").
//!
//! Whether two launches may overlap is decided at each launch from what they touch
//! ([`Touch`]: a buffer's name, its bytes, whether the kernel may write it) and the buffers'
//! current addresses, so a caller's tensors that alias (one tensor passed for two params) keep
//! the launches in order. Empty buffers touch nothing.

use super::driver::check;
use super::RuntimeError;
use crate::interp::bind::Shaped;
use crate::interp::memory::{native_width, storage_len};
use cudarc::driver::sys;
use kir_ir::{Kernel, ParamKind};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One buffer a launch binds: its name in the program (an entry param or a temp), the bytes
/// of its storage and whether the kernel's param may write it (`out` or `inout`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Touch {
    pub(crate) name: String,
    pub(crate) bytes: u64,
    pub(crate) write: bool,
}

/// What a launch of kernel `k` touches, from its bound buffers by kernel param (`tensors`): each
/// tensor param's buffer, its storage's bytes, and whether the param is `out` or `inout`.
pub(crate) fn touches<B: Shaped>(k: &Kernel, tensors: &BTreeMap<String, Arc<B>>) -> Vec<Touch> {
    k.params
        .iter()
        .filter_map(|p| match &p.kind {
            ParamKind::Tensor(acc, _) => {
                let b = tensors.get(&p.name)?;
                let len = storage_len(b.name(), b.shape(), b.strides()).ok()?;
                Some(Touch {
                    name: b.name().to_string(),
                    bytes: (len * native_width(b.dtype())) as u64,
                    write: acc.writes(),
                })
            }
            ParamKind::Scalar(_) => None,
        })
        .collect()
}

/// Whether launches touching `a` and `b` must stay in order: some buffer that one may write
/// overlaps, at the addresses in `addrs`, a buffer the other touches. A buffer whose address is
/// unknown counts as overlapping everything.
pub(crate) fn conflict(a: &[Touch], b: &[Touch], addrs: &BTreeMap<String, u64>) -> bool {
    let range = |t: &Touch| addrs.get(&t.name).map(|&p| (p, p.saturating_add(t.bytes)));
    let overlaps = |x: &Touch, y: &Touch| match (range(x), range(y)) {
        (Some((s0, e0)), Some((s1, e1))) => s0 < e1 && s1 < e0,
        _ => true,
    };
    let live = |t: &&Touch| t.bytes > 0;
    a.iter().filter(live).any(|x| {
        b.iter()
            .filter(live)
            .any(|y| (x.write || y.write) && overlaps(x, y))
    })
}

/// A non-blocking stream (no implicit ordering with the legacy default stream) and the two
/// events of a fork and a join, timing off; made on a program's first fork.
pub(crate) struct Fork {
    aux: sys::CUstream,
    fork: sys::CUevent,
    join: sys::CUevent,
}

// SAFETY: driver handles of the GPU's primary context, valid on any thread that makes it
// current; a `Fork` is used under its program's lock only, so never from two threads at once.
unsafe impl Send for Fork {}

impl Fork {
    /// A new stream and two events, in the current context.
    pub(crate) fn new() -> Result<Fork, RuntimeError> {
        // Each handle goes into the `Fork` as soon as it exists, so an error drops what was
        // made (`Drop` skips the null ones).
        let mut f = Fork {
            aux: std::ptr::null_mut(),
            fork: std::ptr::null_mut(),
            join: std::ptr::null_mut(),
        };
        let flags = sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: valid out-pointers into `f`, which destroys each handle once.
        unsafe {
            check(
                sys::cuStreamCreate(
                    &mut f.aux,
                    sys::CUstream_flags_enum::CU_STREAM_NON_BLOCKING as u32,
                ),
                "cuStreamCreate",
            )?;
            check(sys::cuEventCreate(&mut f.fork, flags), "cuEventCreate")?;
            check(sys::cuEventCreate(&mut f.join, flags), "cuEventCreate")?;
        }
        Ok(f)
    }

    /// Runs `first` on the fork's stream and then `second` on `stream`, both after the work
    /// already on `stream`; the work put on `stream` after this waits for both.
    pub(crate) fn around(
        &self,
        stream: sys::CUstream,
        first: impl FnOnce(sys::CUstream) -> Result<(), RuntimeError>,
        second: impl FnOnce(sys::CUstream) -> Result<(), RuntimeError>,
    ) -> Result<(), RuntimeError> {
        // SAFETY: live handles of the current context; `stream` is the caller's (or null).
        unsafe {
            check(sys::cuEventRecord(self.fork, stream), "cuEventRecord")?;
            check(
                sys::cuStreamWaitEvent(self.aux, self.fork, 0),
                "cuStreamWaitEvent",
            )?;
        }
        first(self.aux)?;
        // SAFETY: as above.
        unsafe {
            check(sys::cuEventRecord(self.join, self.aux), "cuEventRecord")?;
        }
        second(stream)?;
        // SAFETY: as above.
        unsafe {
            check(
                sys::cuStreamWaitEvent(stream, self.join, 0),
                "cuStreamWaitEvent",
            )
        }
    }
}

impl Drop for Fork {
    fn drop(&mut self) {
        // SAFETY: each non-null handle was made by `new` and is destroyed once; destroying a
        // stream with work pending lets that work finish.
        unsafe {
            if !self.join.is_null() {
                sys::cuEventDestroy_v2(self.join);
            }
            if !self.fork.is_null() {
                sys::cuEventDestroy_v2(self.fork);
            }
            if !self.aux.is_null() {
                sys::cuStreamDestroy_v2(self.aux);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{conflict, Touch};
    use std::collections::BTreeMap;

    fn t(name: &str, bytes: u64, write: bool) -> Touch {
        Touch {
            name: name.into(),
            bytes,
            write,
        }
    }

    /// attention_bwd's dK/dV and dQ launches in the deterministic mode: both read the inputs
    /// and the preprocess's temps, each writes its own gradients, and the atomic mode's dq_acc
    /// is empty: they may overlap. With a non-empty dq_acc written by one and read by the other
    /// (the atomic mode) they may not.
    #[test]
    fn launches_that_write_apart_overlap_and_a_shared_write_keeps_the_order() {
        let addrs: BTreeMap<String, u64> = [
            ("q", 0x1000),
            ("delta", 0x2000),
            ("dk", 0x3000),
            ("dq", 0x4000),
            ("dq_acc", 0x5000),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
        let dkdv = |acc| {
            [
                t("q", 0x1000, false),
                t("delta", 0x1000, false),
                t("dk", 0x1000, true),
                t("dq_acc", acc, true),
            ]
        };
        let dq = |acc| {
            [
                t("q", 0x1000, false),
                t("delta", 0x1000, false),
                t("dq", 0x1000, true),
                t("dq_acc", acc, false),
            ]
        };
        assert!(!conflict(&dkdv(0), &dq(0), &addrs));
        assert!(conflict(&dkdv(0x800), &dq(0x800), &addrs));
        // Reads alone never conflict.
        assert!(!conflict(
            &[t("q", 0x1000, false)],
            &[t("q", 0x1000, false)],
            &addrs
        ));
    }

    /// Distinct names whose storage overlaps (a caller's tensor passed for two params) conflict
    /// when one is written; a buffer with no known address conflicts.
    #[test]
    fn aliased_or_unknown_buffers_keep_the_order() {
        let mut addrs: BTreeMap<String, u64> =
            [("a".to_string(), 0x1000), ("b".to_string(), 0x1800)]
                .into_iter()
                .collect();
        let w = [t("a", 0x1000, true)];
        let r = [t("b", 0x100, false)];
        assert!(conflict(&w, &r, &addrs));
        addrs.insert("b".into(), 0x2000);
        assert!(!conflict(&w, &r, &addrs));
        assert!(conflict(&w, &[t("c", 4, false)], &addrs));
    }
}
