//! Argument binding: entry arguments (dims from shapes, dtype conversion, poisoned `out`
//! tensors), temps, and the kernel params of each launch. Every mismatch is an error naming the
//! params involved.
//!
//! The binding is generic over the buffer type ([`Shaped`]), so the GPU runtime binds dims,
//! allocates outs and temps and checks launches with exactly this code: the interpreter binds
//! host [`Buffer`]s, the runtime device buffers.

use super::memory::{contiguous_strides, Buffer};
use super::tile::{scalar_from_f64, scalar_from_int, Tile};
use super::{HostArg, HostData, InterpError};
use kir_ir::{
    Access, Dtype, EvalVal, Expr, ExprKind, Kernel, Launch, Param, ParamKind, Span, TensorType,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What binding needs to know of a buffer: its program-level name, dtype, shape and strides.
pub(crate) trait Shaped {
    /// The entry param or temp the buffer holds.
    fn name(&self) -> &str;
    /// The element type.
    fn dtype(&self) -> Dtype;
    /// The logical shape.
    fn shape(&self) -> &[usize];
    /// The element strides.
    fn strides(&self) -> &[usize];
}

impl Shaped for Buffer {
    fn name(&self) -> &str {
        &self.name
    }
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn strides(&self) -> &[usize] {
        &self.strides
    }
}

/// A buffer to create: an entry input (`data` in C order, not yet converted to `dtype`), or a
/// poisoned `out` tensor or temp (`data` is `None`). `strides` is `None` for C order.
pub(crate) struct NewBuf<'a> {
    pub name: &'a str,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub strides: Option<Vec<usize>>,
    pub data: Option<&'a HostData>,
}

/// The interpreter's buffer maker: host buffers, converted or poisoned.
pub(crate) fn host_buffer(n: NewBuf<'_>) -> Result<Buffer, String> {
    match n.data {
        Some(d) => Buffer::from_host(n.name, n.dtype, n.shape, n.strides, d),
        None => Buffer::poisoned(n.name, n.dtype, n.shape, n.strides),
    }
}

/// Buffers and scalars by kernel param name, and kernel dims.
pub(crate) type LaunchBinding<B> = (
    BTreeMap<String, Arc<B>>,
    BTreeMap<String, Arc<Tile>>,
    BTreeMap<String, i64>,
);
/// The entry's buffers, scalars, dims and the access of each tensor param.
pub(crate) struct EntryEnv<B = Buffer> {
    pub buffers: BTreeMap<String, Arc<B>>,
    pub scalars: BTreeMap<String, Arc<Tile>>,
    pub dims: BTreeMap<String, i64>,
    pub access: BTreeMap<String, Access>,
}

pub(crate) fn lookup(dims: &BTreeMap<String, i64>) -> impl Fn(&str) -> Option<EvalVal> + '_ {
    move |s| dims.get(s).map(|&v| EvalVal::Int(v))
}

/// Binds entry arguments: dims from the shapes of `in`/`inout` tensors, converted data and
/// scalars, and poisoned `out` tensors allocated from their dim expressions; `make` creates
/// each buffer.
pub(crate) fn bind_entry<B: Shaped>(
    params: &[Param],
    args: &BTreeMap<String, HostArg>,
    span: Span,
    make: &mut dyn FnMut(NewBuf<'_>) -> Result<B, String>,
) -> Result<EntryEnv<B>, InterpError> {
    if let Some(name) = args.keys().find(|a| !params.iter().any(|p| &p.name == *a)) {
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        return Err(InterpError::at(
            span,
            format!(
                "unknown argument `{name}` (the entry params are: {})",
                names.join(", ")
            ),
        ));
    }
    let mut given = Vec::new();
    for p in params {
        match (&p.kind, args.get(&p.name)) {
            (ParamKind::Tensor(Access::Out, _), Some(_)) => {
                return Err(InterpError::at(p.span, format!("`{}` is an `out` param: it takes no argument (its shape comes from the signature)", p.name)))
            }
            (ParamKind::Tensor(Access::Out, _), None) => {}
            (ParamKind::Tensor(_, tt), Some(HostArg::Tensor(t))) => given.push((p, tt, t)),
            (ParamKind::Tensor(..), Some(HostArg::Scalar(_) | HostArg::Int(_))) => {
                return Err(InterpError::at(p.span, format!("`{}` is a tensor param but was given a scalar", p.name)))
            }
            (ParamKind::Scalar(_), Some(HostArg::Tensor(_))) => {
                return Err(InterpError::at(p.span, format!("`{}` is a scalar param but was given a tensor", p.name)))
            }
            (_, None) => return Err(InterpError::at(p.span, format!("missing argument `{}`", p.name))),
            (ParamKind::Scalar(_), Some(HostArg::Scalar(_) | HostArg::Int(_))) => {}
        }
    }
    let dims = bind_dims(
        given
            .iter()
            .map(|(p, tt, t)| (*p, *tt, &t.shape[..]))
            .collect(),
        "the entry",
    )?;
    let mut env = EntryEnv {
        buffers: BTreeMap::new(),
        scalars: BTreeMap::new(),
        dims,
        access: BTreeMap::new(),
    };
    for p in params {
        match &p.kind {
            ParamKind::Tensor(acc, tt) => {
                let d = tt
                    .elem
                    .known()
                    .ok_or_else(|| InterpError::at(p.span, "unresolved element type"))?;
                let buf = match args.get(&p.name) {
                    Some(HostArg::Tensor(t)) => {
                        let st = eval_strides(p, tt, &env.dims)?;
                        make(NewBuf {
                            name: &p.name,
                            dtype: d,
                            shape: t.shape.clone(),
                            strides: st,
                            data: Some(&t.data),
                        })
                        .map_err(|m| InterpError::at(p.span, m))?
                    }
                    _ => alloc(&p.name, tt, &env.dims, p.span, make)?,
                };
                env.access.insert(p.name.clone(), *acc);
                env.buffers.insert(p.name.clone(), Arc::new(buf));
            }
            ParamKind::Scalar(e) => {
                let d = e
                    .known()
                    .ok_or_else(|| InterpError::at(p.span, "unresolved element type"))?;
                let s = match args.get(&p.name) {
                    Some(HostArg::Scalar(x)) => scalar_from_f64(d, *x),
                    Some(HostArg::Int(x)) => scalar_from_int(d, *x),
                    _ => {
                        return Err(InterpError::at(
                            p.span,
                            format!("missing argument `{}`", p.name),
                        ))
                    }
                };
                let s =
                    s.map_err(|m| InterpError::at(p.span, format!("scalar `{}`: {m}", p.name)))?;
                env.scalars
                    .insert(p.name.clone(), Arc::new(Tile::scalar(d, s)));
            }
        }
    }
    Ok(env)
}

/// Binds identifier dims from `shapes` (the same name in several params must agree), then checks
/// every other dim expression against the given size.
fn bind_dims(
    shapes: Vec<(&Param, &TensorType, &[usize])>,
    what: &str,
) -> Result<BTreeMap<String, i64>, InterpError> {
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    let mut from: BTreeMap<String, &str> = BTreeMap::new();
    for &(p, tt, shape) in &shapes {
        if tt.dims.len() != shape.len() {
            return Err(InterpError::at(
                p.span,
                format!(
                    "{what}: `{}` has rank {} but its tensor has shape {shape:?}",
                    p.name,
                    tt.dims.len()
                ),
            ));
        }
        for (e, &n) in tt.dims.iter().zip(shape) {
            if let ExprKind::Ident(name) = &e.kind {
                let n = i64::try_from(n).map_err(|_| InterpError::at(p.span, "dim too large"))?;
                match dims.get(name) {
                    Some(&old) if old != n => {
                        let msg = format!(
                            "{what}: dim `{name}` is {old} from `{}` but {n} from `{}`",
                            from[name], p.name
                        );
                        return Err(InterpError::at(e.span, msg));
                    }
                    Some(_) => {}
                    None => {
                        dims.insert(name.clone(), n);
                        from.insert(name.clone(), &p.name);
                    }
                }
            }
        }
    }
    for &(p, tt, shape) in &shapes {
        for (axis, (e, &n)) in tt.dims.iter().zip(shape).enumerate() {
            if !matches!(e.kind, ExprKind::Ident(_)) {
                let v = e.eval_int(&lookup(&dims)).map_err(|err| {
                    InterpError::at(e.span, format!("{what}: dim `{e}` of `{}`: {err}", p.name))
                })?;
                if v != n as i64 {
                    let need = if e.as_int().is_some() {
                        format!("{v}")
                    } else {
                        format!("`{e}` = {v}")
                    };
                    let msg = format!(
                        "{what}: `{}` must have size {need} in dim {axis}, but its tensor has shape {shape:?}",
                        p.name
                    );
                    return Err(InterpError::at(e.span, msg));
                }
            }
        }
    }
    Ok(dims)
}

/// Evaluates a non-negative size expression over `dims`.
fn eval_size(e: &Expr, dims: &BTreeMap<String, i64>, what: &str) -> Result<usize, InterpError> {
    let v = e
        .eval_int(&lookup(dims))
        .map_err(|err| InterpError::at(e.span, format!("{what} `{e}`: {err}")))?;
    usize::try_from(v)
        .map_err(|_| InterpError::at(e.span, format!("{what} `{e}` is {v}, which is negative")))
}

/// The strides of a tensor param evaluated over `dims` (`None`: C-contiguous).
fn eval_strides(
    p: &Param,
    tt: &TensorType,
    dims: &BTreeMap<String, i64>,
) -> Result<Option<Vec<usize>>, InterpError> {
    let Some(st) = &tt.strides else {
        return Ok(None);
    };
    if st.len() != tt.dims.len() {
        return Err(InterpError::at(
            p.span,
            format!(
                "`{}` has {} dims but {} strides",
                p.name,
                tt.dims.len(),
                st.len()
            ),
        ));
    }
    st.iter()
        .map(|e| eval_size(e, dims, &format!("stride of `{}`", p.name)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A poisoned buffer for an `out` param or temp, its shape from its dim expressions, created by
/// `make`.
pub(crate) fn alloc<B>(
    name: &str,
    tt: &TensorType,
    dims: &BTreeMap<String, i64>,
    span: Span,
    make: &mut dyn FnMut(NewBuf<'_>) -> Result<B, String>,
) -> Result<B, InterpError> {
    let d = tt
        .elem
        .known()
        .ok_or_else(|| InterpError::at(span, format!("`{name}` has an unresolved element type")))?;
    let mut shape = Vec::with_capacity(tt.dims.len());
    for e in &tt.dims {
        if let ExprKind::Ident(n) = &e.kind {
            if !dims.contains_key(n) {
                return Err(InterpError::at(
                    e.span,
                    format!("dim `{n}` of `{name}` is not bound by any input tensor"),
                ));
            }
        }
        shape.push(eval_size(e, dims, &format!("dim of `{name}`"))?);
    }
    let strides = match &tt.strides {
        Some(st) if st.len() != shape.len() => {
            return Err(InterpError::at(
                span,
                format!("`{name}` has {} dims but {} strides", shape.len(), st.len()),
            ))
        }
        Some(st) => Some(
            st.iter()
                .map(|e| eval_size(e, dims, &format!("stride of `{name}`")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    make(NewBuf {
        name,
        dtype: d,
        shape,
        strides,
        data: None,
    })
    .map_err(|m| InterpError::at(span, m))
}

/// A launch's kernel-param bindings: buffers and scalars by kernel param name, and the kernel's
/// dims bound from the buffers' shapes (checked against every dim expression and stride).
pub(crate) fn bind_launch<B: Shaped>(
    k: &Kernel,
    l: &Launch,
    env: &EntryEnv<B>,
) -> Result<LaunchBinding<B>, InterpError> {
    let mut tensors = BTreeMap::new();
    let mut scalars = BTreeMap::new();
    for b in &l.args {
        let kp = k.param(&b.param).ok_or_else(|| {
            InterpError::at(b.span, format!("`@{}` has no param `{}`", k.name, b.param))
        })?;
        if tensors.contains_key(&b.param) || scalars.contains_key(&b.param) {
            return Err(InterpError::at(
                b.span,
                format!("param `{}` is bound twice", b.param),
            ));
        }
        match (&kp.kind, env.buffers.get(&b.arg), env.scalars.get(&b.arg)) {
            (ParamKind::Tensor(acc, tt), Some(buf), _) => {
                if tt.elem.known() != Some(buf.dtype()) {
                    return Err(InterpError::at(
                        b.span,
                        format!(
                            "`{}` is tensor<{}> but `{}` holds {}",
                            b.param,
                            tt.elem,
                            b.arg,
                            buf.dtype()
                        ),
                    ));
                }
                if acc.writes() && env.access.get(&b.arg) == Some(&Access::In) {
                    return Err(InterpError::at(
                        b.span,
                        format!(
                            "`{}` writes `{}`, an `in` param of the program",
                            b.param, b.arg
                        ),
                    ));
                }
                tensors.insert(b.param.clone(), buf.clone());
            }
            (ParamKind::Scalar(e), _, Some(t)) => {
                if e.known() != Some(t.dtype) {
                    return Err(InterpError::at(
                        b.span,
                        format!("`{}` is {e} but `{}` is {}", b.param, b.arg, t.dtype),
                    ));
                }
                scalars.insert(b.param.clone(), t.clone());
            }
            (_, None, None) => {
                return Err(InterpError::at(
                    b.span,
                    format!("no program param or temp `{}`", b.arg),
                ))
            }
            (ParamKind::Tensor(..), None, Some(_)) => {
                return Err(InterpError::at(
                    b.span,
                    format!("tensor param `{}` is bound to scalar `{}`", b.param, b.arg),
                ))
            }
            (ParamKind::Scalar(_), Some(_), None) => {
                return Err(InterpError::at(
                    b.span,
                    format!("scalar param `{}` is bound to tensor `{}`", b.param, b.arg),
                ))
            }
        }
    }
    if let Some(p) = k
        .params
        .iter()
        .find(|p| !tensors.contains_key(&p.name) && !scalars.contains_key(&p.name))
    {
        return Err(InterpError::at(
            l.span,
            format!("launch of `@{}` does not bind param `{}`", k.name, p.name),
        ));
    }
    let shapes = k.params.iter().filter_map(|p| match &p.kind {
        ParamKind::Tensor(_, tt) => tensors.get(&p.name).map(|b| (p, tt, b.shape())),
        ParamKind::Scalar(_) => None,
    });
    let dims = bind_dims(shapes.collect(), &format!("launch of `@{}`", k.name))?;
    for p in &k.params {
        if let (ParamKind::Tensor(_, tt), Some(buf)) = (&p.kind, tensors.get(&p.name)) {
            let st = eval_strides(p, tt, &dims)?.unwrap_or_else(|| contiguous_strides(buf.shape()));
            if st != buf.strides() {
                return Err(InterpError::at(
                    p.span,
                    format!(
                        "`{}` has strides {st:?} but `{}` is stored with strides {:?}",
                        p.name,
                        buf.name(),
                        buf.strides()
                    ),
                ));
            }
        }
    }
    Ok((tensors, scalars, dims))
}
