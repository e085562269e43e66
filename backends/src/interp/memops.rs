//! Memory ops of the dispatcher: `load`, `store` and `atomic_add` with their offsets, masks,
//! `other` values, `guard` and bounds checks, and the semaphores `sem_wait` and `sem_signal`.
//!
//! A load with `other` reads it for out-of-bounds and masked-off elements without touching
//! memory. A load without `other` reads poison for masked-off elements (also never touching
//! memory) and fails on any unmasked out-of-bounds element, naming the kernel, program id,
//! tensor, index and shape. Stores skip masked-off elements, and out-of-bounds ones under
//! `guard`; any other out-of-bounds element is an error.

use super::exec::{eval_const, eval_int, literal, Flow, Instance};
use super::memory::{Access, Buffer};
use super::tile::{poison, type_name, Data, Scalar, Tile};
use super::InterpError;
use kir_ir::{Attr, Dtype, Offset, OpData};
use std::sync::Arc;

/// The buffer, element offsets and optional mask of a memory op.
type AccessParts = (Arc<Buffer>, Vec<i64>, Option<Arc<Tile>>);

impl Instance<'_> {
    /// An `async_copy … multicast %p` (`cluster` CTAs per cluster along grid axis 0): the
    /// programs of one cluster must compute the same %p for the n-th execution of the copy and,
    /// where it holds, copy at the same offsets, as the multicast that the PTX backend makes of
    /// it writes one CTA's fetch into every CTA. The first program of the cluster to get there
    /// records what it saw; the others are checked against it.
    pub(super) fn check_shared_copy(
        &mut self,
        o: &OpData,
        shared: bool,
        shape: &[usize],
        cluster: i64,
    ) -> Result<(), InterpError> {
        let (_, offs, _) = self.access_parts(o, shape)?;
        let site = o as *const OpData as usize;
        let n = self.copies_made.entry(site).or_insert(0);
        let nth = *n;
        *n += 1;
        let first = [
            self.pid[0] - self.pid[0].rem_euclid(cluster),
            self.pid[1],
            self.pid[2],
        ];
        let mut seen = self
            .ctx
            .shared_copies
            .lock()
            .map_err(|_| self.fail(o.span, "internal: a poisoned lock"))?;
        match seen.get_mut(&(site, first, nth)) {
            None => {
                seen.insert((site, first, nth), (shared, offs, 1));
                Ok(())
            }
            Some((s, at, count)) if *s == shared && (!shared || *at == offs) => {
                *count += 1;
                Ok(())
            }
            Some((s, at, _)) => Err(self.fail(
                o.span,
                format!(
                    "copy {nth} of this `multicast` copy differs within the cluster of programs \
                     from {first:?}: one program has shared = {s} at offsets {at:?}, program \
                     {:?} shared = {shared} at {offs:?}",
                    self.pid
                ),
            )),
        }
    }

    /// The buffer, offsets and optional mask of a memory op, for a tile of `tile` shape.
    fn access_parts(&self, o: &OpData, tile: &[usize]) -> Result<AccessParts, InterpError> {
        let tr = o.tensor.as_ref().ok_or_else(|| {
            self.fail(
                o.span,
                format!("`{}` needs a tensor reference", o.opcode.name()),
            )
        })?;
        let buf = self.ctx.tensors.get(&tr.param).ok_or_else(|| {
            self.fail(
                tr.span,
                format!("`{}` is not a tensor param of this kernel", tr.param),
            )
        })?;
        let rank = buf.shape.len();
        if tr.offsets.len() != rank || tile.len() > rank {
            let msg = format!("`{}` has rank {rank}: it takes {rank} offsets and tiles of rank ≤ {rank}, found {} offsets and `{}`", tr.param, tr.offsets.len(), type_name(buf.dtype, tile));
            return Err(self.fail(o.span, msg));
        }
        let mut offs = Vec::with_capacity(rank);
        for off in &tr.offsets {
            offs.push(match off {
                Offset::Value(v) => {
                    let t = self.get(*v, o.span)?;
                    match (t.dtype, t.int_scalar()) {
                        (Dtype::I32 | Dtype::I64, Some(x)) => x,
                        _ => {
                            return Err(self.fail(
                                o.span,
                                format!(
                                    "offset `{}` must be an i32 or i64 scalar, found `{}`",
                                    self.vname(*v),
                                    t.type_name()
                                ),
                            ))
                        }
                    }
                }
                Offset::Expr(e) => eval_int(e).map_err(|m| self.fail(o.span, m))?,
            });
        }
        let mask = match o.attr("mask") {
            None => None,
            Some(Attr::Value(v)) => {
                let m = self.get(*v, o.span)?;
                if m.dtype != Dtype::I1 || (!m.is_scalar() && m.shape != tile) {
                    let msg = format!(
                        "mask `{}` must be i1 of shape {tile:?} or a scalar, found `{}`",
                        self.vname(*v),
                        m.type_name()
                    );
                    return Err(self.fail(o.span, msg));
                }
                Some(m)
            }
            Some(_) => return Err(self.fail(o.span, "`mask` must be a value")),
        };
        Ok((buf.clone(), offs, mask))
    }

    /// The out-of-bounds error for element `lin` of an access.
    fn oob(&self, o: &OpData, what: &str, buf: &Buffer, acc: &Access, lin: usize) -> InterpError {
        let name = o.tensor.as_ref().map_or("?", |t| t.param.as_str());
        let via = if name == buf.name {
            String::new()
        } else {
            format!(" (buffer `{}`)", buf.name)
        };
        let msg = format!(
            "{what} out of bounds: `{name}`{via} index {:?} is outside shape {:?}",
            acc.index_of(lin),
            buf.shape
        );
        self.fail(o.span, msg)
    }

    /// `load`: see the module doc.
    pub(super) fn load(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let (_, d, shape) = self.result_type(o)?;
        let out = self.read_tile(o, d, shape)?;
        self.set1(o, out)
    }

    /// Reads the tile of dtype `d` and `shape` that the memory op `o` addresses, as `load` does
    /// (also the source of an `async_copy`).
    pub(super) fn read_tile(
        &self,
        o: &OpData,
        d: Dtype,
        shape: Vec<usize>,
    ) -> Result<Tile, InterpError> {
        let (buf, offs, mask) = self.access_parts(o, &shape)?;
        if buf.dtype != d {
            return Err(self.fail(
                o.span,
                format!(
                    "load of {} tensor `{}` must give {}, not {d}",
                    buf.dtype, buf.name, buf.dtype
                ),
            ));
        }
        let other = match o.attr("other") {
            None => None,
            Some(Attr::Expr(e)) => {
                let s = eval_const(e).and_then(|v| literal(d, v));
                Some(self.m(o, s)?)
            }
            Some(_) => return Err(self.fail(o.span, "`other` must be a constant")),
        };
        let acc = Access {
            shape: &buf.shape,
            strides: &buf.strides,
            offsets: &offs,
            tile: &shape,
        };
        let mut out = Tile::filled(d, shape.clone(), poison(d));
        let fill = other.unwrap_or_else(|| poison(d));
        let masked = |lin: usize| match &mask {
            Some(m) => matches!(
                m.data.get(if m.is_scalar() { 0 } else { lin }),
                Some(Scalar::B(false))
            ),
            None => false,
        };
        acc.visit(|lin, addr| {
            let s = match addr {
                _ if masked(lin) => fill,
                Some(a) => buf.read(a).map_err(|m| self.fail(o.span, m))?,
                None if other.is_some() => fill,
                None => return Err(self.oob(o, "load", &buf, &acc, lin)),
            };
            match (&mut out.data, s) {
                (Data::F(v), Scalar::F(x)) => v[lin] = x,
                (Data::I(v), Scalar::I(x)) => v[lin] = x,
                (Data::B(v), Scalar::B(x)) => v[lin] = x,
                _ => return Err(self.fail(o.span, "internal error: element class mismatch")),
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// `store`, or `atomic_add` when `atomic`: see the module doc.
    pub(super) fn store(&mut self, o: &OpData, atomic: bool) -> Result<Flow, InterpError> {
        let x = self.operand(o, 0)?;
        let (buf, offs, mask) = self.access_parts(o, &x.shape)?;
        let what = if atomic { "atomic_add" } else { "store" };
        if buf.dtype != x.dtype {
            return Err(self.fail(
                o.span,
                format!(
                    "{what} of `{}` into {} tensor `{}`",
                    x.type_name(),
                    buf.dtype,
                    buf.name
                ),
            ));
        }
        if atomic && x.dtype == Dtype::I1 {
            return Err(self.fail(o.span, "atomic_add does not apply to i1"));
        }
        let guard = matches!(o.attr("guard"), Some(Attr::Flag));
        let acc = Access {
            shape: &buf.shape,
            strides: &buf.strides,
            offsets: &offs,
            tile: &x.shape,
        };
        acc.visit(|lin, addr| {
            if let Some(m) = &mask {
                if matches!(
                    m.data.get(if m.is_scalar() { 0 } else { lin }),
                    Some(Scalar::B(false))
                ) {
                    return Ok(());
                }
            }
            let Some(a) = addr else {
                return if guard {
                    Ok(())
                } else {
                    Err(self.oob(o, what, &buf, &acc, lin))
                };
            };
            let s = x
                .data
                .get(lin)
                .ok_or_else(|| self.fail(o.span, "internal error: tile too short"))?;
            let r = if atomic {
                buf.atomic_add(a, s)
            } else {
                buf.write(a, s)
            };
            r.map_err(|m| self.fail(o.span, m))
        })?;
        Ok(Flow::Next)
    }

    /// `sem_wait`: the programs run one by one in grid order (axis 0 fastest, as a GPU starts
    /// them), so every signal a wait may count has been given when it runs. A count still below
    /// the one expected would make a GPU wait forever (or for a program later in grid order,
    /// which a GPU need not start first): an error.
    pub(super) fn sem_wait(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let want = self.operand(o, 0)?;
        let Some(want) = want.int_scalar() else {
            return Err(self.fail(o.span, "`sem_wait` expects an i32 scalar count"));
        };
        let (buf, offs, _) = self.access_parts(o, &[])?;
        let acc = Access {
            shape: &buf.shape,
            strides: &buf.strides,
            offsets: &offs,
            tile: &[],
        };
        let mut have = None;
        acc.visit(|lin, addr| {
            let Some(a) = addr else {
                return Err(self.oob(o, "sem_wait", &buf, &acc, lin));
            };
            have = Some(buf.read(a).map_err(|m| self.fail(o.span, m))?);
            Ok(())
        })?;
        match have {
            Some(Scalar::I(n)) if n >= want => Ok(Flow::Next),
            Some(Scalar::I(n)) => Err(self.fail(
                o.span,
                format!(
                    "`sem_wait` on `{}` expects at least {want} signals but the programs before \
                     it in grid order gave {n}: on a GPU this program would wait forever",
                    buf.name
                ),
            )),
            _ => Err(self.fail(
                o.span,
                format!(
                    "`sem_wait` needs an i32 counter, `{}` holds {}",
                    buf.name, buf.dtype
                ),
            )),
        }
    }

    /// `sem_signal`: adds 1 to the counter (programs run one by one, so every earlier write of
    /// this program is complete); `guard` skips an out-of-bounds element.
    pub(super) fn sem_signal(&mut self, o: &OpData) -> Result<Flow, InterpError> {
        let (buf, offs, _) = self.access_parts(o, &[])?;
        if buf.dtype != Dtype::I32 {
            return Err(self.fail(
                o.span,
                format!(
                    "`sem_signal` needs an i32 counter, `{}` holds {}",
                    buf.name, buf.dtype
                ),
            ));
        }
        let guard = matches!(o.attr("guard"), Some(Attr::Flag));
        let acc = Access {
            shape: &buf.shape,
            strides: &buf.strides,
            offsets: &offs,
            tile: &[],
        };
        acc.visit(|lin, addr| match addr {
            Some(a) => buf
                .atomic_add(a, Scalar::I(1))
                .map_err(|m| self.fail(o.span, m)),
            None if guard => Ok(()),
            None => Err(self.oob(o, "sem_signal", &buf, &acc, lin)),
        })?;
        Ok(Flow::Next)
    }
}
