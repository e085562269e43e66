//! Per-kernel lowering state: params and dims in registers, where each IR value lives, thread
//! coordinates of every layout, and the shared-memory plan.

use super::builder::{Builder, Reg, RegClass};
use super::layout::{self, Block, Layout, Place};
use super::{PtxError, THREADS};
use crate::abi::{AbiArg, KernelAbi};
use crate::target::Target;
use kir_ir::{Dtype, Expr, ExprKind, Kernel, ParamKind, Span, Value};
use std::collections::HashMap;

/// How an IR value is held during lowering.
#[derive(Clone, Debug)]
pub enum Val {
    /// One register, the same in every thread.
    Scalar(Reg),
    /// One register per slot of `layout`.
    Tile {
        layout: Layout,
        shape: Vec<usize>,
        dtype: Dtype,
        regs: Vec<Reg>,
    },
    /// A rank-2 tile in shared memory at byte offset `off` (element (i, j) at
    /// `off + (i·row_stride + j·col_stride)·elem_bytes`).
    Shared {
        off: u32,
        shape: [usize; 2],
        dtype: Dtype,
        row_stride: usize,
        col_stride: usize,
    },
}

/// A tensor param: its base pointer, dtype, dims and element strides.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub ptr: Reg,
    pub dtype: Dtype,
    pub dims: Vec<Reg>,
    pub strides: Vec<Reg>,
    /// True when the last dim has stride 1 (C order, or declared strides ending in literal 1),
    /// which vectorized access needs.
    pub contiguous_last: bool,
}

/// One slot's coordinates: one b32 index per tile dim, and whether the slot holds an element.
#[derive(Clone, Debug)]
pub struct SlotCoord {
    pub idx: Vec<Reg>,
    pub valid: Option<Reg>,
}

/// Lowering state of one kernel.
pub struct Ctx<'a> {
    pub k: &'a Kernel,
    pub target: Target,
    pub b: Builder,
    pub blk: Block,
    pub places: HashMap<Value, Place>,
    pub vals: HashMap<Value, Val>,
    /// Cheap integer/mask tiles (iota and index arithmetic) that are recomputed at each use
    /// instead of living in registers across loops.
    pub lazy: HashMap<Value, kir_ir::Op>,
    /// Loads a loop prefetches: the shared offset of the buffer the current iteration reads.
    pub prefetched: HashMap<Value, u32>,
    /// Shared-memory buffers per prefetched tile of a software-pipelined loop (the ring depth);
    /// below 2, loops are not pipelined.
    pub stages: usize,
    pub tensors: HashMap<String, TensorInfo>,
    pub dims: HashMap<String, Reg>,
    pub scalars: HashMap<String, Reg>,
    pub tid: Reg,
    pub warp: Reg,
    pub g: Reg,
    pub colbase: Reg,
    pub quad_leader: Reg,
    pub smem: Reg,
    pub smem_top: u32,
    /// The scratch region (conversions, reductions) as an offset ≥ [`SCRATCH_BASE`].
    pub scratch_off: u32,
    /// Whether any instruction addressed the scratch region.
    pub scratch_used: bool,
    rowbases: HashMap<usize, Reg>,
    gridbases: HashMap<(usize, usize), (Reg, Reg)>,
    ldm_lane: Option<(Reg, Reg, Reg)>,
}

/// The lowered kernel.
pub struct Lowered {
    pub text: String,
    /// Threads per block.
    pub threads: u32,
    pub shared_bytes: u32,
    /// The lowest PTX ISA version the kernel's instructions need.
    pub min_version: (u32, u32),
}

/// The register class holding values of `d`.
pub fn class_of(d: Dtype) -> RegClass {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => RegClass::F32,
        Dtype::I32 | Dtype::U8 => RegClass::B32,
        Dtype::I64 => RegClass::B64,
        Dtype::I1 => RegClass::Pred,
    }
}

/// Bytes of one element of `d` in a shared-memory tile (bf16/f16 packed, the rest 32 bits,
/// i64 64 bits).
pub fn smem_bytes(d: Dtype) -> usize {
    match d {
        Dtype::F16 | Dtype::Bf16 => 2,
        Dtype::I64 => 8,
        Dtype::F32 | Dtype::I32 | Dtype::U8 | Dtype::I1 => 4,
    }
}

impl<'a> Ctx<'a> {
    /// A fresh register for a value of `d`.
    pub fn reg(&mut self, d: Dtype) -> Reg {
        self.b.reg(class_of(d))
    }

    /// The lowered form of `v`.
    pub fn val(&mut self, v: Value, span: Span) -> Result<Val, PtxError> {
        if let Some(&o) = self.lazy.get(&v) {
            return super::lower::materialize(self, o);
        }
        self.vals
            .get(&v)
            .cloned()
            .ok_or_else(|| PtxError::at(span, format!("internal: value {v} was not lowered")))
    }

    /// Coordinates of every slot of a tile of `shape` in `layout`, computed at the use site
    /// (only the per-shape row base of `RowMma` is kept from the prologue), so coordinates do
    /// not occupy registers across the kernel.
    pub fn coords(&mut self, layout: Layout, shape: &[usize]) -> Vec<SlotCoord> {
        let (tid, blk) = (self.tid, self.blk);
        let n = layout::slots(layout, shape, blk);
        let mut out = Vec::with_capacity(n);
        match layout {
            Layout::Blocked => {
                let numel: usize = shape.iter().product();
                let t = blk.threads as usize;
                let v = layout::VEC;
                for s in 0..n {
                    let e = self.b.reg(RegClass::B32);
                    // e = ((s / VEC)·T + tid)·VEC + s % VEC
                    self.b.ins(format!("add.s32 {e}, {tid}, {}", (s / v) * t));
                    self.b.ins(format!("mad.lo.s32 {e}, {e}, {v}, {}", s % v));
                    let valid = if (s / v + 1) * t * v > numel {
                        let p = self.b.reg(RegClass::Pred);
                        self.b.ins(format!("setp.lt.u32 {p}, {e}, {numel}"));
                        Some(p)
                    } else {
                        None
                    };
                    let mut idx = vec![e; shape.len()];
                    let mut rest = e;
                    for d in (0..shape.len()).rev() {
                        if d == 0 {
                            idx[0] = rest;
                            break;
                        }
                        let (r, q) = (self.b.reg(RegClass::B32), self.b.reg(RegClass::B32));
                        self.b.ins(format!("rem.u32 {r}, {rest}, {}", shape[d]));
                        self.b.ins(format!("div.u32 {q}, {rest}, {}", shape[d]));
                        idx[d] = r;
                        rest = q;
                    }
                    out.push(SlotCoord { idx, valid });
                }
            }
            Layout::RowMma | Layout::Grid => {
                for s in 0..n {
                    let sc = self.slot_coord(layout, shape, s);
                    out.push(sc);
                }
            }
        }
        out
    }

    /// Coordinates of slot `s` only (see [`Ctx::coords`]).
    pub fn slot_coord(&mut self, layout: Layout, shape: &[usize], s: usize) -> SlotCoord {
        let (tid, blk) = (self.tid, self.blk);
        match layout {
            Layout::Blocked => {
                let numel: usize = shape.iter().product();
                let (t, v) = (blk.threads as usize, layout::VEC);
                let e = self.b.reg(RegClass::B32);
                self.b.ins(format!("add.s32 {e}, {tid}, {}", (s / v) * t));
                self.b.ins(format!("mad.lo.s32 {e}, {e}, {v}, {}", s % v));
                let valid = ((s / v + 1) * t * v > numel).then(|| {
                    let p = self.b.reg(RegClass::Pred);
                    self.b.ins(format!("setp.lt.u32 {p}, {e}, {numel}"));
                    p
                });
                let mut idx = vec![e; shape.len()];
                let mut rest = e;
                for d in (1..shape.len()).rev() {
                    let (r, q) = (self.b.reg(RegClass::B32), self.b.reg(RegClass::B32));
                    self.b.ins(format!("rem.u32 {r}, {rest}, {}", shape[d]));
                    self.b.ins(format!("div.u32 {q}, {rest}, {}", shape[d]));
                    idx[d] = r;
                    rest = q;
                }
                if !shape.is_empty() {
                    idx[0] = rest;
                }
                SlotCoord { idx, valid }
            }
            Layout::RowMma | Layout::Grid => {
                let (rowbase, colbase, sub) = if layout == Layout::Grid {
                    let (r, c, wn) = self.grid_bases(shape);
                    let (m, n) = layout::rows_cols(shape);
                    (r, c, vec![m, n / wn])
                } else {
                    (self.rowbase(shape), self.colbase, shape.to_vec())
                };
                let (ro, co) = layout::rowmma_slot(&sub, s);
                let r = self.b.reg(RegClass::B32);
                self.b.ins(format!("add.s32 {r}, {rowbase}, {ro}"));
                let mut idx = vec![r];
                if shape.len() == 2 {
                    if shape[1] == 1 {
                        idx.push(self.b.imm32(0));
                    } else {
                        let c = self.b.reg(RegClass::B32);
                        self.b.ins(format!("add.s32 {c}, {colbase}, {co}"));
                        idx.push(c);
                    }
                }
                SlotCoord { idx, valid: None }
            }
        }
    }

    /// For a `Grid` tile of `shape`: (row base = wmi·M/wm + g, column base = wni·N/wn + 2q, wn),
    /// where warp = wmi·wn + wni (prologue registers, one pair per shape).
    pub fn grid_bases(&mut self, shape: &[usize]) -> (Reg, Reg, usize) {
        let (m, n) = layout::rows_cols(shape);
        let (wm, wn) = layout::grid_dims(shape, self.blk);
        if let Some(&(r, c)) = self.gridbases.get(&(m, n)) {
            return (r, c, wn);
        }
        let (warp, g, colbase) = (self.warp, self.g, self.colbase);
        let (r, c, wmi, wni) = (
            self.b.reg(RegClass::B32),
            self.b.reg(RegClass::B32),
            self.b.reg(RegClass::B32),
            self.b.reg(RegClass::B32),
        );
        self.b.in_prologue(|b| {
            b.ins(format!("div.u32 {wmi}, {warp}, {wn}"));
            b.ins(format!("rem.u32 {wni}, {warp}, {wn}"));
            b.ins(format!("mad.lo.s32 {r}, {wmi}, {}, {g}", m / wm));
            b.ins(format!("mad.lo.s32 {c}, {wni}, {}, {colbase}", n / wn));
        });
        self.gridbases.insert((m, n), (r, c));
        (r, c, wn)
    }

    /// warp·(rows per warp) + g for a `RowMma` tile of `shape` (one prologue register per M).
    fn rowbase(&mut self, shape: &[usize]) -> Reg {
        let (m, _) = layout::rows_cols(shape);
        if let Some(&r) = self.rowbases.get(&m) {
            return r;
        }
        let (warp, g, w) = (self.warp, self.g, self.blk.warps as usize);
        let r = self.b.reg(RegClass::B32);
        self.b
            .in_prologue(|b| b.ins(format!("mad.lo.s32 {r}, {warp}, {}, {g}", m / w)));
        self.rowbases.insert(m, r);
        r
    }

    /// Evaluates a (specialized) integer expression over dims into a b32 register.
    pub fn expr(&mut self, e: &Expr) -> Result<Reg, PtxError> {
        use kir_ir::BinOp as B;
        Ok(match &e.kind {
            ExprKind::Int(v) => self.b.imm32(*v),
            ExprKind::Float(_) => return Err(PtxError::at(e.span, "a float is not an index")),
            ExprKind::Ident(n) => *self
                .dims
                .get(n)
                .ok_or_else(|| PtxError::at(e.span, format!("unknown dim `{n}`")))?,
            ExprKind::Unary(op, a) => {
                let a = self.expr(a)?;
                let r = self.b.reg(RegClass::B32);
                match op {
                    kir_ir::UnOp::Neg => self.b.ins(format!("neg.s32 {r}, {a}")),
                    kir_ir::UnOp::Not => {
                        let p = self.b.reg(RegClass::Pred);
                        self.b.ins(format!("setp.eq.s32 {p}, {a}, 0"));
                        self.b.ins(format!("selp.b32 {r}, 1, 0, {p}"));
                    }
                }
                r
            }
            ExprKind::Binary(op, a, bb) => {
                let (x, y) = (self.expr(a)?, self.expr(bb)?);
                let r = self.b.reg(RegClass::B32);
                let cmp = |s: &str| Some(s.to_string());
                let c = match op {
                    B::Add => {
                        self.b.ins(format!("add.s32 {r}, {x}, {y}"));
                        None
                    }
                    B::Sub => {
                        self.b.ins(format!("sub.s32 {r}, {x}, {y}"));
                        None
                    }
                    B::Mul => {
                        self.b.ins(format!("mul.lo.s32 {r}, {x}, {y}"));
                        None
                    }
                    B::Div | B::Rem => {
                        // Floor division / remainder for the expression language.
                        let (q, m, p, pn) = (
                            self.b.reg(RegClass::B32),
                            self.b.reg(RegClass::B32),
                            self.b.reg(RegClass::Pred),
                            self.b.reg(RegClass::Pred),
                        );
                        self.b.ins(format!("div.s32 {q}, {x}, {y}"));
                        self.b.ins(format!("rem.s32 {m}, {x}, {y}"));
                        self.b.ins(format!("setp.ne.s32 {p}, {m}, 0"));
                        let t = self.b.reg(RegClass::B32);
                        self.b.ins(format!("xor.b32 {t}, {x}, {y}"));
                        self.b.ins(format!("setp.lt.s32 {pn}, {t}, 0"));
                        self.b.ins(format!("and.pred {p}, {p}, {pn}"));
                        if *op == B::Div {
                            self.b.ins(format!("sub.s32 {r}, {q}, 1"));
                            self.b.ins(format!("selp.b32 {r}, {r}, {q}, {p}"));
                        } else {
                            self.b.ins(format!("add.s32 {r}, {m}, {y}"));
                            self.b.ins(format!("selp.b32 {r}, {r}, {m}, {p}"));
                        }
                        None
                    }
                    B::Eq => cmp("eq"),
                    B::Ne => cmp("ne"),
                    B::Lt => cmp("lt"),
                    B::Le => cmp("le"),
                    B::Gt => cmp("gt"),
                    B::Ge => cmp("ge"),
                    B::And | B::Or => {
                        let (p1, p2) = (self.b.reg(RegClass::Pred), self.b.reg(RegClass::Pred));
                        self.b.ins(format!("setp.ne.s32 {p1}, {x}, 0"));
                        self.b.ins(format!("setp.ne.s32 {p2}, {y}, 0"));
                        let w = if *op == B::And { "and" } else { "or" };
                        self.b.ins(format!("{w}.pred {p1}, {p1}, {p2}"));
                        self.b.ins(format!("selp.b32 {r}, 1, 0, {p1}"));
                        None
                    }
                };
                if let Some(c) = c {
                    let p = self.b.reg(RegClass::Pred);
                    self.b.ins(format!("setp.{c}.s32 {p}, {x}, {y}"));
                    self.b.ins(format!("selp.b32 {r}, 1, 0, {p}"));
                }
                r
            }
            ExprKind::Call(f, args) => {
                let vs: Vec<Reg> = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<_, _>>()?;
                let r = self.b.reg(RegClass::B32);
                match f {
                    kir_ir::Func::Min => self.b.ins(format!("min.s32 {r}, {}, {}", vs[0], vs[1])),
                    kir_ir::Func::Max => self.b.ins(format!("max.s32 {r}, {}, {}", vs[0], vs[1])),
                    kir_ir::Func::Cdiv => {
                        self.b.ins(format!("add.s32 {r}, {}, {}", vs[0], vs[1]));
                        self.b.ins(format!("sub.s32 {r}, {r}, 1"));
                        self.b.ins(format!("div.s32 {r}, {r}, {}", vs[1]));
                    }
                    kir_ir::Func::Select => {
                        let p = self.b.reg(RegClass::Pred);
                        self.b.ins(format!("setp.ne.s32 {p}, {}, 0", vs[0]));
                        self.b
                            .ins(format!("selp.b32 {r}, {}, {}, {p}", vs[1], vs[2]));
                    }
                }
                r
            }
        })
    }
}

/// Offsets at or above this address the scratch region (relative to its final place).
pub const SCRATCH_BASE: u32 = 1 << 30;

/// Replaces every `KIRSCRATCH<n>` placeholder by `scratch_at + n`.
fn patch_scratch(text: &str, scratch_at: u32) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("KIRSCRATCH") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + "KIRSCRATCH".len()..];
        let digits = tail.bytes().take_while(|b| b.is_ascii_digit()).count();
        let n: u32 = tail[..digits].parse().unwrap_or(0);
        out.push_str(&(scratch_at + n).to_string());
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// The block a kernel runs with.
/// - Without a `dot` (elementwise and row-reduction work in the blocked layout): one thread per
///   16-byte chunk of its largest tile, from 4 to 16 warps, so a long row is spread over more
///   threads instead of more registers per thread.
/// - With dots whose results have fewer than 128 rows: 4 warps.
/// - With a dot result of 128 rows or more: 8 warps (16 rows of each accumulator per warp, or a
///   2-D warp grid for GEMM). A kernel that keeps row statistics of such tiles (a row `reduce`,
///   as attention's online softmax) instead gets one warp per 32 rows — each warp holds two
///   16-row fragments, so every B fragment read from shared memory feeds two mma.sync — when
///   its dot accumulators then fit in 160 f32 registers per thread (Σ of the dot results'
///   columns ≤ 160: d128 with 32-key blocks, d64 with 64-key blocks), leaving the rest of the
///   255-register budget for operands and addresses without spilling. (d128 with 64-key blocks
///   on 4 warps is faster still but sits at the register limit and spills with some features
///   and targets, so it is an explicit choice: `--warps 4`.)
pub fn block_of(k: &Kernel) -> Block {
    let dots: Vec<Vec<usize>> = k
        .dfg
        .ops
        .values()
        .filter(|o| o.opcode == kir_ir::Opcode::Dot)
        .filter_map(|o| o.results.first().and_then(|&r| k.dfg.ty(r).shape()))
        .collect();
    let warps = if dots.is_empty() {
        let largest = k
            .dfg
            .values
            .values()
            .filter_map(|d| d.ty.shape())
            .map(|s| s.iter().product::<usize>())
            .max()
            .unwrap_or(0);
        let chunks = largest.div_ceil(super::layout::VEC).next_power_of_two();
        (chunks / 32).clamp((THREADS / 32) as usize, 16) as u32
    } else {
        let big: Vec<&Vec<usize>> = dots
            .iter()
            .filter(|s| s.len() == 2 && s[0] >= 128 && s[0] % 128 == 0)
            .collect();
        let row_stats = k.dfg.ops.values().any(|o| {
            o.opcode == kir_ir::Opcode::Reduce
                && matches!(o.attr("axis"), Some(kir_ir::Attr::Expr(e)) if e.as_int() == Some(1))
                && o.operands
                    .first()
                    .and_then(|&a| k.dfg.ty(a).shape())
                    .is_some_and(|s| s.len() == 2 && big.iter().any(|b| b[0] == s[0]))
        });
        match big.iter().map(|s| s[0]).max() {
            None => THREADS / 32,
            Some(m) => {
                let cols: usize = dots
                    .iter()
                    .filter(|s| s.len() == 2 && s[0] == m)
                    .map(|s| s[1])
                    .sum();
                if row_stats && cols <= 160 && m / 32 <= 16 {
                    (m / 32) as u32
                } else {
                    8
                }
            }
        }
    };
    Block {
        threads: warps * 32,
        warps,
    }
}

/// Lowers one specialized kernel to a `.entry`.
pub fn lower_kernel(
    k: &Kernel,
    abi: &KernelAbi,
    target: Target,
    symbol: &str,
    stages: usize,
    warps: Option<u32>,
) -> Result<Lowered, PtxError> {
    let blk = match warps {
        Some(w) => Block {
            threads: w * 32,
            warps: w,
        },
        None => block_of(k),
    };
    let mut b = Builder::default();
    let places = layout::assign(k, blk);
    // The scratch region used by layout conversions and reductions: the largest tile, 32 or
    // 64 bits per element, at offset 0; other shared tiles are allocated after it.
    let scratch_bytes = k
        .dfg
        .values
        .values()
        .filter(|d| !d.ty.is_scalar())
        .map(|d| {
            let n: usize = d.ty.shape().unwrap_or_default().iter().product();
            n * if d.ty.dtype() == Some(Dtype::I64) {
                8
            } else {
                4
            }
        })
        .max()
        .unwrap_or(0) as u32;
    // Thread coordinates.
    let (tid, warp, g, colbase, quad_leader, smem) = (
        b.reg(RegClass::B32),
        b.reg(RegClass::B32),
        b.reg(RegClass::B32),
        b.reg(RegClass::B32),
        b.reg(RegClass::Pred),
        b.reg(RegClass::B32),
    );
    let mut ctx = Ctx {
        k,
        target,
        b,
        blk,
        places,
        vals: HashMap::new(),
        lazy: HashMap::new(),
        prefetched: HashMap::new(),
        stages,
        tensors: HashMap::new(),
        dims: HashMap::new(),
        scalars: HashMap::new(),
        tid,
        warp,
        g,
        colbase,
        quad_leader,
        smem,
        smem_top: 0,
        scratch_off: SCRATCH_BASE,
        scratch_used: false,
        rowbases: HashMap::new(),
        gridbases: HashMap::new(),
        ldm_lane: None,
    };
    let mut params = Vec::new();
    ctx.b.in_prologue(|b| {
        b.ins(format!("mov.u32 {tid}, %tid.x"));
        b.ins(format!("mov.u32 {smem}, kir_smem"));
    });
    // Params in ABI order.
    for (i, a) in abi.args.iter().enumerate() {
        let pname = format!("{symbol}_param_{i}");
        match a {
            AbiArg::Tensor { param, dtype } => {
                params.push(format!(".param .u64 {pname}"));
                let (raw, ptr) = (ctx.b.reg(RegClass::B64), ctx.b.reg(RegClass::B64));
                ctx.b.in_prologue(|b| {
                    b.ins(format!("ld.param.u64 {raw}, [{pname}]"));
                    b.ins(format!("cvta.to.global.u64 {ptr}, {raw}"));
                });
                ctx.tensors.insert(
                    param.clone(),
                    TensorInfo {
                        ptr,
                        dtype: *dtype,
                        dims: vec![],
                        strides: vec![],
                        contiguous_last: false,
                    },
                );
            }
            AbiArg::Scalar { param, dtype } => {
                let (ty, r) = match dtype {
                    Dtype::F32 => (".f32", ctx.b.reg(RegClass::F32)),
                    Dtype::I64 => (".s64", ctx.b.reg(RegClass::B64)),
                    Dtype::I32 => (".s32", ctx.b.reg(RegClass::B32)),
                    Dtype::F16 | Dtype::Bf16 => (".b16", ctx.b.reg(RegClass::B16)),
                    Dtype::U8 | Dtype::I1 => (".u8", ctx.b.reg(RegClass::B32)),
                };
                params.push(format!(".param {ty} {pname}"));
                let ld = if ty == ".u8" { ".u8" } else { ty };
                ctx.b
                    .in_prologue(|b| b.ins(format!("ld.param{ld} {r}, [{pname}]")));
                let r = match dtype {
                    Dtype::F16 | Dtype::Bf16 => {
                        let f = ctx.b.reg(RegClass::F32);
                        let t = if *dtype == Dtype::F16 { "f16" } else { "bf16" };
                        ctx.b
                            .in_prologue(|b| b.ins(format!("cvt.f32.{t} {f}, {r}")));
                        f
                    }
                    Dtype::I1 => {
                        let p = ctx.b.reg(RegClass::Pred);
                        ctx.b
                            .in_prologue(|b| b.ins(format!("setp.ne.u32 {p}, {r}, 0")));
                        p
                    }
                    _ => r,
                };
                ctx.scalars.insert(param.clone(), r);
            }
            AbiArg::Dim { name } => {
                params.push(format!(".param .s32 {pname}"));
                let r = ctx.b.reg(RegClass::B32);
                ctx.b
                    .in_prologue(|b| b.ins(format!("ld.param.s32 {r}, [{pname}]")));
                ctx.dims.insert(name.clone(), r);
            }
        }
    }
    ctx.b.in_prologue(|b| {
        let (lane, q) = (b.reg(RegClass::B32), b.reg(RegClass::B32));
        b.ins(format!("shr.u32 {warp}, {tid}, 5"));
        b.ins(format!("and.b32 {lane}, {tid}, 31"));
        b.ins(format!("shr.u32 {g}, {lane}, 2"));
        b.ins(format!("and.b32 {q}, {lane}, 3"));
        b.ins(format!("shl.b32 {colbase}, {q}, 1"));
        b.ins(format!("setp.eq.u32 {quad_leader}, {q}, 0"));
    });
    ctx.setup_tensors()?;
    super::lower::lower_body(&mut ctx)?;
    // Place the scratch region after all others, and only if something used it.
    let scratch_at = ctx.smem_top.div_ceil(16) * 16;
    let shared_bytes = if ctx.scratch_used {
        scratch_at + scratch_bytes
    } else {
        ctx.smem_top
    };
    let min_version = ctx.b.min_version;
    let body = patch_scratch(&ctx.b.finish(), scratch_at);
    let text = format!(
        ".visible .entry {symbol}(\n\t{}\n)\n.maxntid {}, 1, 1\n{{\n{body}\tret;\n}}\n",
        params.join(",\n\t"),
        blk.threads
    );
    Ok(Lowered {
        text,
        threads: blk.threads,
        shared_bytes,
        min_version,
    })
}

impl Ctx<'_> {
    /// Per-lane (8·(m&1), 8·(m>>1), r) for ldmatrix.x4, where m = lane/8 picks the matrix and
    /// r = lane%8 its row (computed once, in the prologue).
    pub fn ldmatrix_lane(&mut self) -> (Reg, Reg, Reg) {
        if let Some(t) = self.ldm_lane {
            return t;
        }
        let tid = self.tid;
        let t = self.b.in_prologue(|b| {
            let (lane, m, mi, mj, r) = (
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
            );
            b.ins(format!("and.b32 {lane}, {tid}, 31"));
            b.ins(format!("shr.u32 {m}, {lane}, 3"));
            b.ins(format!("and.b32 {r}, {lane}, 7"));
            b.ins(format!("and.b32 {mi}, {m}, 1"));
            b.ins(format!("shl.b32 {mi}, {mi}, 3"));
            b.ins(format!("shr.u32 {mj}, {m}, 1"));
            b.ins(format!("shl.b32 {mj}, {mj}, 3"));
            (mi, mj, r)
        });
        self.ldm_lane = Some(t);
        t
    }

    /// Reserves `bytes` of shared memory (16-byte aligned) for the rest of the kernel.
    pub fn alloc_shared(&mut self, bytes: u32) -> u32 {
        let off = self.smem_top.div_ceil(16) * 16;
        self.smem_top = off + bytes;
        off
    }

    /// The shared address of element (idx[0]·rs + idx[1]·cs) of a region at `off` with
    /// elements of `eb` bytes (idx may have one or two entries).
    pub fn smem_addr(&mut self, off: u32, idx: &[Reg], rs: usize, cs: usize, eb: usize) -> Reg {
        let a = self.b.reg(RegClass::B32);
        match idx {
            [i, j] => {
                self.b.ins(format!("mul.lo.s32 {a}, {i}, {rs}"));
                let t = self.b.reg(RegClass::B32);
                self.b.ins(format!("mul.lo.s32 {t}, {j}, {cs}"));
                self.b.ins(format!("add.s32 {a}, {a}, {t}"));
            }
            [i] => self.b.ins(format!("mul.lo.s32 {a}, {i}, {rs}")),
            _ => self.b.ins(format!("mov.b32 {a}, 0")),
        }
        self.b
            .ins(format!("mad.lo.s32 {a}, {a}, {eb}, {}", self.smem));
        if off >= SCRATCH_BASE {
            // The scratch region goes after every other region; its offset is patched in once
            // the kernel is lowered (see `lower_kernel`).
            self.scratch_used = true;
            self.b.ins(format!(
                "add.s32 {a}, {a}, KIRSCRATCH{}",
                off - SCRATCH_BASE
            ));
        } else if off > 0 {
            self.b.ins(format!("add.s32 {a}, {a}, {off}"));
        }
        a
    }

    /// Row-major linear index of a slot's coordinates within `shape`.
    pub fn linear(&mut self, idx: &[Reg], shape: &[usize]) -> Reg {
        let r = self.b.reg(RegClass::B32);
        self.b.ins(format!("mov.b32 {r}, 0"));
        for (d, &i) in idx.iter().enumerate() {
            self.b.ins(format!(
                "mad.lo.s32 {r}, {r}, {}, {i}",
                shape.get(d).copied().unwrap_or(1)
            ));
        }
        r
    }

    fn setup_tensors(&mut self) -> Result<(), PtxError> {
        for p in &self.k.params {
            let ParamKind::Tensor(_, t) = &p.kind else {
                continue;
            };
            let dim_regs = self.prologue_exprs(&t.dims)?;
            let stride_regs = match &t.strides {
                Some(st) => self.prologue_exprs(st)?,
                None => {
                    let one = self.b.in_prologue(|b| b.imm32(1));
                    let mut st = vec![one; dim_regs.len()];
                    for i in (0..dim_regs.len().saturating_sub(1)).rev() {
                        let r = self.b.reg(RegClass::B32);
                        let (a, bb) = (st[i + 1], dim_regs[i + 1]);
                        self.b
                            .in_prologue(|b| b.ins(format!("mul.lo.s32 {r}, {a}, {bb}")));
                        st[i] = r;
                    }
                    st
                }
            };
            let contiguous_last = match &t.strides {
                None => true,
                Some(st) => st.last().and_then(|e| e.as_int()) == Some(1),
            };
            if let Some(info) = self.tensors.get_mut(&p.name) {
                info.dims = dim_regs;
                info.strides = stride_regs;
                info.contiguous_last = contiguous_last;
            }
        }
        Ok(())
    }

    /// Evaluates expressions over dims in the prologue.
    fn prologue_exprs(&mut self, es: &[Expr]) -> Result<Vec<Reg>, PtxError> {
        self.b.swap_sections();
        let r = es.iter().map(|e| self.expr(e)).collect();
        self.b.swap_sections();
        r
    }
}
