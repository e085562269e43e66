//! Lowering one kernel: the block it runs with (`block_policy`, the warps policy), and the `.entry`
//! itself — params into registers, thread coordinates, the body, and the shared-memory plan
//! (dot-operand regions first, the scratch region last and only when used).

use super::ctx::{Ctx, Lowered, MemState, PrintState, TensorInfo, ThreadRegs, SCRATCH_BASE};
use super::PtxError;
use crate::abi::{AbiArg, KernelAbi};
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Builder, Operand, Placed, PtxInst, RegClass};
use crate::target::Target;
use kir_ir::{Dtype, Kernel};
use std::collections::HashMap;

/// Lowers one specialized kernel to a `.entry`.
pub fn lower_kernel(
    k: &Kernel,
    abi: &KernelAbi,
    target: Target,
    symbol: &str,
    warps: Option<u32>,
    asked_blocks: Option<u32>,
) -> Result<Lowered, PtxError> {
    let mut plan = crate::ptx::plan::plan(k, target, warps);
    let (blk, policy_why) = (plan.blk, plan.policy_why.take());
    let mut b = Builder::default();
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
        plan,
        values: Default::default(),
        params: Default::default(),
        thread: ThreadRegs {
            tid,
            warp,
            g,
            colbase,
            quad_leader,
            block_bar: None,
            rowbases: HashMap::new(),
            gridbases: HashMap::new(),
            ldm_lane: None,
        },
        mem: MemState {
            smem,
            smem_top: 0,
            scratch_off: SCRATCH_BASE,
            scratch_used: false,
            scratch_peak: 0,
            smem_bufs: HashMap::new(),
            release_pending: false,
            bulk_region: None,
            sem_wait: None,
            signal: None,
            arena: None,
            writer: None,
            next_op: None,
            taken_signal: None,
            stores: HashMap::new(),
            store_casts: HashMap::new(),
        },
        asyncs: Default::default(),
        prints: PrintState {
            symbol: symbol.to_string(),
            ..Default::default()
        },
        report: Default::default(),
    };
    let mut params = Vec::new();
    let ws = crate::ptx::plan::roles::ws_op(k).map(|(_, a)| a);
    // Loads defer their 16-bit conversions except where partitions lower out of order.
    ctx.values.defer_on = ws.is_none();
    match &ws {
        Some(a) => super::ws::setup(&mut ctx, a),
        None => ctx.b.in_prologue(|b| {
            b.ins(
                PtxInst::new("mov.u32")
                    .op(tid)
                    .op(Operand::Special("%tid.x")),
            )
        }),
    }
    ctx.b.in_prologue(|b| {
        b.ins(
            PtxInst::new("mov.u32")
                .op(smem)
                .op(Operand::sym("kir_smem")),
        )
    });
    // Params in ABI order.
    for (i, a) in abi.args.iter().enumerate() {
        let pname = format!("{symbol}_param_{i}");
        match a {
            AbiArg::Tensor { param, dtype } => {
                params.push(format!(".param .u64 {pname}"));
                let (raw, ptr) = (ctx.b.reg(RegClass::B64), ctx.b.reg(RegClass::B64));
                ctx.b.in_prologue(|b| {
                    b.ins(PtxInst::new("ld.param.u64").op(raw).addr(pname));
                    b.ins(PtxInst::new("cvta.to.global.u64").op(ptr).op(raw));
                });
                ctx.params.tensors.insert(
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
                let ld = PtxInst::new("ld.param").m(&ty[1..]).op(r).addr(&pname);
                ctx.b.in_prologue(|b| b.ins(ld));
                let r = match dtype {
                    Dtype::F16 | Dtype::Bf16 => {
                        let f = ctx.b.reg(RegClass::F32);
                        let t = if *dtype == Dtype::F16 { "f16" } else { "bf16" };
                        ctx.b.in_prologue(|b| {
                            b.need(Isa::cvt_to_f32(*dtype))
                                .ins(PtxInst::new("cvt.f32").m(t).op(f).op(r))
                        });
                        f
                    }
                    Dtype::I1 => {
                        let p = ctx.b.reg(RegClass::Pred);
                        ctx.b
                            .in_prologue(|b| b.ins(PtxInst::new("setp.ne.u32").op(p).op(r).op(0)));
                        p
                    }
                    _ => r,
                };
                ctx.params.scalars.insert(param.clone(), r);
            }
            AbiArg::TensorMap { param, boxes, .. } => {
                params.push(super::tma::map_param(&mut ctx, &pname, param, boxes));
            }
            AbiArg::Dim { name } => {
                params.push(format!(".param .s32 {pname}"));
                let r = ctx.b.reg(RegClass::B32);
                ctx.b
                    .in_prologue(|b| b.ins(PtxInst::new("ld.param.s32").op(r).addr(pname)));
                ctx.params.dims.insert(name.clone(), r);
            }
        }
    }
    // In a kernel with wgmma operands the warp index is broadcast from lane 0: ptxas then knows
    // it is the same in every lane, so what is computed from it and from other uniform values
    // (the wgmma descriptors of a warpgroup's shared tiles, a ping-pong turn's barrier) lives
    // in uniform registers instead of being computed per thread and moved over before each
    // wgmma (docs/backends.md, "Uniform warp index"). Other kernels keep the shift: they build
    // no descriptors, and on sm_100a the broadcast cost attention_bwd a 4-byte spill.
    let uniform_warp = ctx.target.has_wgmma() && !ctx.plan.core.is_empty();
    ctx.b.in_prologue(|b| {
        let (lane, q) = (b.reg(RegClass::B32), b.reg(RegClass::B32));
        if uniform_warp {
            let w = b.reg(RegClass::B32);
            b.ins(PtxInst::new("shr.u32").op(w).op(tid).op(5));
            b.need(Isa::SHFL_SYNC).ins(
                PtxInst::new("shfl.sync.idx.b32")
                    .op(warp)
                    .op(w)
                    .op(0)
                    .op(31)
                    .op(-1),
            );
        } else {
            b.ins(PtxInst::new("shr.u32").op(warp).op(tid).op(5));
        }
        b.ins(PtxInst::new("and.b32").op(lane).op(tid).op(31));
        b.ins(PtxInst::new("shr.u32").op(g).op(lane).op(2));
        b.ins(PtxInst::new("and.b32").op(q).op(lane).op(3));
        b.ins(PtxInst::new("shl.b32").op(colbase).op(q).op(1));
        b.ins(PtxInst::new("setp.eq.u32").op(quad_leader).op(q).op(0));
    });
    ctx.setup_tensors()?;
    super::semaphore::start(&mut ctx);
    super::dispatch::lower_body(&mut ctx)?;
    super::semaphore::give(&mut ctx);
    super::bulk_reduce::finish(&mut ctx);
    // Place the scratch region after all others, and only if something used it: as large as the
    // largest tile spilled there (a layout conversion or reduction), not the largest tile of the
    // kernel (a bias row broadcast into a 128×256 accumulator needs 1 KB, not 128 KB).
    let scratch_at = ctx.mem.smem_top.div_ceil(16) * 16;
    let end = if ctx.mem.scratch_used {
        scratch_at + ctx.mem.scratch_peak
    } else {
        ctx.mem.smem_top
    };
    // With several consumers, each has its own copy of what its region allocated.
    let (shared_bytes, arena_stride) = super::consumers::arena_bytes(&ctx.mem, end);
    let isa = ctx.b.requirements().clone();
    let from = super::report::warps_from(policy_why);
    let report = super::notes::build(&mut ctx, symbol, from, (shared_bytes, arena_stride), &isa);
    ctx.b.ins(PtxInst::new("ret"));
    let instructions = ctx.b.instructions();
    let body = ctx.b.finish(Placed {
        scratch_at,
        arena_stride,
    });
    // A warp-specialized kernel launches its producer's warps too, and states its register
    // count at entry (ws.rs).
    let (threads, maxnreg) = match &ws {
        // A cluster's CTAs are launched together (`.reqnctapercluster`: the launch needs no
        // cluster attribute, and an even grid).
        Some(a) if a.cluster > 1 => (
            a.threads(),
            format!(
                ".maxnreg {}\n.reqnctapercluster {}, 1, 1\n",
                a.entry_regs(),
                a.cluster
            ),
        ),
        Some(a) => (a.threads(), format!(".maxnreg {}\n", a.entry_regs())),
        None => (
            blk.threads,
            min_blocks(
                ctx.target,
                shared_bytes,
                blk.threads,
                isa.features.contains_key(&crate::target::Feature::Wgmma),
                asked_blocks,
            ),
        ),
    };
    let (decls, locals) = super::print::declarations(&ctx.prints);
    let text = format!(
        ".visible .entry {symbol}(\n\t{}\n)\n.maxntid {threads}, 1, 1\n{maxnreg}{{\n{locals}{body}}}\n",
        params.join(",\n\t"),
    );
    let smem_align = if ctx.plan.core.is_empty() {
        16
    } else {
        crate::ptx::plan::wgmma::CORE_ALIGN
    };
    Ok(Lowered {
        text,
        calls_vprintf: !decls.is_empty(),
        decls,
        threads,
        shared_bytes,
        isa,
        smem_align,
        report,
        instructions,
    })
}

/// `.minnctapersm N` when the kernel's shared memory lets at most N blocks share an SM and
/// N · threads ≤ 256 (so N blocks may still use 255 registers a thread), else nothing. Without
/// it ptxas may cap the registers to fit more blocks than shared memory allows and spill for
/// them: attention_bwd's dK/dV kernel on sm_80 (one 4-warp block per SM) took 168 registers and
/// spilled 16 bytes; with the directive it takes 189 and spills none, and the f32 d384 atomic
/// dK/dV kernel on sm_120a (one 8-warp block) took 128 and spilled 100 bytes, with it 150 and
/// none. The directive only states what shared memory already imposes, so the kernel's
/// occupancy does not change. Blocks of more than four warps on wgmma are left alone: there
/// the directive gave the sm_90a attention kernels other registers (the causal d128 forward
/// 160 instead of 155) and no gain in time (call E3,
/// docs/gpu-results/2026-12-05-e3-minnctapersm-ab.txt), and they do not spill.
///
/// Where the rule states nothing, `asked` (a configuration's `min_blocks`) gives
/// `.minnctapersm asked` when asked · threads ≤ 256: without any directive ptxas 13.0 caps a
/// 4-warp sm_100a kernel's registers by its own occupancy target (96 or 128 in attention_bwd's
/// d64 kernels, which spilled 12–20 bytes with some pairs of features; 168 in the d96 dQ kernel
/// on sm_90a and sm_100a, 4–12 bytes); with `.minnctapersm 2` they take 114–172 registers and
/// spill none.
fn min_blocks(
    target: crate::target::Target,
    shared_bytes: u32,
    threads: u32,
    wgmma: bool,
    asked: Option<u32>,
) -> String {
    // Each block also holds 1 KB of shared memory for the system (sm_80 and later); a block's
    // opt-in maximum plus that KB is the SM's capacity on every target kir has.
    let per_sm = target.smem_per_block() + 1024;
    let per_block = u64::from(shared_bytes) + 1024;
    let n = per_sm / per_block;
    if shared_bytes > 0 && n >= 1 && (threads <= 128 || !wgmma) && n * u64::from(threads) <= 256 {
        format!(".minnctapersm {n}\n")
    } else {
        match asked {
            Some(a) if a >= 1 && a * threads <= 256 => format!(".minnctapersm {a}\n"),
            _ => String::new(),
        }
    }
}
