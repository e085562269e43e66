#!/usr/bin/env python3
"""Tensor maps for the Python launchers of kir kernels: the one place where scripts/ turns a
META.json param of kind `tensor_map` (launch ABI item 4, docs/backends.md "Tensor maps") into
the 128-byte kernel argument the kernel takes by value.

Used by scripts/gpu_check_ptx.py (class `Program`, and through it scripts/gpu_rpg.py) and
scripts/gpu_check.py. A launcher calls, for each param `p` of kind `tensor_map` of a launch that
runs (non-empty grid):

    args.append(kir_launch.tensor_map_arg(p, buf))

where `buf` is the buffer passed for tensor param `p["name"]` (a torch tensor or a cupy array on
the GPU). The result goes into the argument tuple of cupy's `RawKernel`/`RawModule` function call
like any other argument: a numpy array of one 128-byte structured element, which cupy (9.0 and
later) passes by value: it hands the driver the array's data pointer, and the driver copies the
param's 128 bytes from there.

The pure part, `tensor_map_spec` (what `cuTensorMapEncodeTiled` gets: rank, dims, byte strides,
box, element strides and the enum values, from the META entry and the buffer's shape, strides
and address), mirrors backends/src/tensor_map.rs rule for rule and needs nothing beyond the
standard library: `python3 scripts/kir_launch.py --selftest [META.json]...` checks it on any
machine (and computes every tensor map the given META files list, at a ragged shape). Encoding
(`encode_tensor_map`) needs cuda-python (`cuda.bindings.driver`, or the older `cuda.cuda`) and
numpy, imported only when a map is encoded.
"""
import ctypes
import sys

MAP_BYTES = 128  # one CUtensorMap
MAX_RANK = 5
MAX_BOX_DIM = 256
SWIZZLE_SPAN_BYTES = 128
# The values of the driver's CUtensorMap* enums (backends/src/runtime/driver.rs tests the same
# numbers, from backends/src/tensor_map.rs, against cudarc's bindings).
DATA_TYPE = {"f16": 6, "bf16": 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16 / _BFLOAT16
INTERLEAVE_NONE = 0
SWIZZLE_128B = 3
L2_PROMOTION_256B = 3
OOB_FILL_NONE = 0  # out-of-bounds elements read as zero
STANDIN_STRIDE = 16  # every stride of the map of an empty tensor (each of its dims has one element)


class TensorMapError(ValueError):
    """A tensor map that breaks one of the driver's rules; `rule` names it (rank, dtype, address,
    dim, stride, contiguous, box, inner_box, encoding) and the message names the tensor."""

    def __init__(self, tensor, rule, message):
        super().__init__(f"tensor map of `{tensor}`: {message}")
        self.tensor, self.rule = tensor, rule


def c_strides(shape):
    """C-order element strides of `shape`."""
    s = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        s[i] = s[i + 1] * shape[i + 1]
    return s


def _common(param, rank):
    """Checks the META entry, the rank and the box; returns (data type value, box reversed)."""
    name, dtype, boxes = param["name"], param["dtype"], list(param["box"])
    if param.get("kind", "tensor_map") != "tensor_map" or param.get("swizzle", "128B") != "128B" \
            or param.get("oob_fill", "zero") != "zero":
        raise TensorMapError(name, "encoding", f"unknown encoding {param} (this launcher knows "
                                               "kind tensor_map, swizzle 128B, oob_fill zero)")
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError(name, "rank", f"rank {rank}, but a tensor map has rank 1 to {MAX_RANK}")
    if dtype not in DATA_TYPE:
        raise TensorMapError(name, "dtype", f"element type {dtype}, but tensor maps are of f16 or bf16")
    if len(boxes) != rank:
        raise TensorMapError(name, "box", f"box {boxes} has {len(boxes)} dims, the tensor {rank}")
    bad = [b for b in boxes if not 1 <= b <= MAX_BOX_DIM]
    if bad:
        raise TensorMapError(name, "box", f"box {boxes} has a dim of {bad[0]}, outside [1, {MAX_BOX_DIM}]")
    inner = boxes[-1] * 2
    if inner % 16 or inner > SWIZZLE_SPAN_BYTES:
        raise TensorMapError(name, "inner_box", f"the inner box row is {inner} bytes (box {boxes}), but it "
                             f"must be a multiple of 16 bytes and at most the {SWIZZLE_SPAN_BYTES}-byte swizzle span")
    return DATA_TYPE[dtype], boxes[::-1]


def _spec(name, data_type, address, dims, strides, box):
    return {"tensor": name, "data_type": data_type, "rank": len(dims), "global_address": address,
            "global_dim": dims, "global_strides": strides, "box_dim": box, "element_strides": [1] * len(dims),
            "interleave": INTERLEAVE_NONE, "swizzle": SWIZZLE_128B, "l2_promotion": L2_PROMOTION_256B,
            "oob_fill": OOB_FILL_NONE}


def tensor_map_spec(param, shape, address, strides=None):
    """The arguments of `cuTensorMapEncodeTiled` (a dict: rank, global_address, global_dim
    innermost first, global_strides in bytes for dims rank-2 .. 0, box_dim innermost first,
    element_strides, data_type, interleave, swizzle, l2_promotion, oob_fill) for META entry `param`
    over a tensor of dims `shape` and element `strides` (outermost first; C order when None) at
    device address `address`. Raises TensorMapError naming the tensor when the map breaks a driver
    rule: rank 1..5, address 16-byte aligned, dims in [1, 2^32], innermost dim contiguous, strides
    multiples of 16 bytes below 2^40, box dims in [1, 256], inner box row a multiple of 16 bytes
    and at most 128. A dim of 0 is such an error (rule "dim"): see `empty_standin_spec`."""
    name, shape = param["name"], [int(d) for d in shape]
    strides = c_strides(shape) if strides is None else [int(s) for s in strides]
    data_type, box = _common(param, len(shape))
    if len(strides) != len(shape):
        raise TensorMapError(name, "stride", f"{len(strides)} strides for {len(shape)} dims")
    if address % 16:
        raise TensorMapError(name, "address", f"address {address:#x} is not 16-byte aligned")
    bad = [d for d in shape if not 1 <= d <= 1 << 32]
    if bad:
        raise TensorMapError(name, "dim", f"shape {shape} has a dim of {bad[0]}, outside [1, 2^32]")
    if strides[-1] != 1:
        raise TensorMapError(name, "contiguous", f"the innermost dim has a stride of {strides[-1]} elements "
                             f"(strides {strides}); a tensor map needs it contiguous")
    byte_strides = []
    for s in reversed(strides[:-1]):
        b = s * 2
        if b % 16 or not 0 <= b < 1 << 40:
            raise TensorMapError(name, "stride", f"a stride of {s} elements ({b} bytes; strides {strides}) "
                                 "is not a multiple of 16 bytes below 2^40")
        byte_strides.append(b)
    return _spec(name, data_type, address, shape[::-1], byte_strides, box)


def empty_standin_spec(param, rank, zeros):
    """The map for a tensor with a dim of 0 in a launch that runs anyway: the same rank, type and
    box, every dim 1 and every stride STANDIN_STRIDE, over `zeros`, the 16-byte aligned address
    of at least 16 zero bytes; every copy through it reads zeros, as through the real tensor."""
    data_type, box = _common(param, rank)
    if zeros % 16:
        raise TensorMapError(param["name"], "address", f"address {zeros:#x} is not 16-byte aligned")
    return _spec(param["name"], data_type, zeros, [1] * rank, [STANDIN_STRIDE] * (rank - 1), box)


def by_value(raw):
    """`raw` (128 bytes) as a numpy array of one 128-byte structured element in 128-byte aligned
    host memory: what cupy's kernel call passes by value (it hands the driver the array's data
    pointer, and the driver copies the param's 128 bytes from there)."""
    import numpy as np
    if len(raw) != MAP_BYTES:
        raise ValueError(f"a tensor map is {MAP_BYTES} bytes, not {len(raw)}")
    store = np.zeros(2 * MAP_BYTES, np.uint8)
    off = (-store.ctypes.data) % MAP_BYTES
    store[off:off + MAP_BYTES] = np.frombuffer(bytes(raw), np.uint8)
    return store[off:off + MAP_BYTES].view(np.dtype([("map", np.uint8, (MAP_BYTES,))]))


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver
    return driver


def encode_tensor_map(spec):
    """Encodes `spec` (from `tensor_map_spec`) with the driver's `cuTensorMapEncodeTiled`
    through cuda-python; returns the 128 bytes. Raises RuntimeError naming the tensor when the
    driver rejects it."""
    drv = _driver()
    T = drv.CUtensorMapDataType
    dtype = {DATA_TYPE["f16"]: T.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             DATA_TYPE["bf16"]: T.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16}[spec["data_type"]]
    err, tmap = drv.cuTensorMapEncodeTiled(
        dtype, spec["rank"], spec["global_address"],
        [drv.cuuint64_t(v) for v in spec["global_dim"]], [drv.cuuint64_t(v) for v in spec["global_strides"]],
        [drv.cuuint32_t(v) for v in spec["box_dim"]], [drv.cuuint32_t(v) for v in spec["element_strides"]],
        drv.CUtensorMapInterleave(spec["interleave"]), drv.CUtensorMapSwizzle(spec["swizzle"]),
        drv.CUtensorMapL2promotion(spec["l2_promotion"]), drv.CUtensorMapFloatOOBfill(spec["oob_fill"]))
    if int(err) != 0:
        try:
            why = drv.cuGetErrorString(err)[1]
            why = why.decode() if isinstance(why, bytes) else str(why)
        except Exception:  # the message is a courtesy; the error code is in the text anyway
            why = "the driver rejected it"
        raise RuntimeError(f"encoding the tensor map of `{spec['tensor']}` failed: {why} ({err}); "
                           f"dims {spec['global_dim']}, "
                           f"byte strides {spec['global_strides']}, box {spec['box_dim']}, "
                           f"address {spec['global_address']:#x}")
    if hasattr(tmap, "getPtr"):
        return ctypes.string_at(int(tmap.getPtr()), MAP_BYTES)
    return b"".join(int(q).to_bytes(8, "little") for q in tmap.opaque)


def buffer_layout(buf):
    """(device address, shape, element strides) of a torch tensor or a cupy array."""
    if hasattr(buf, "data_ptr"):  # torch
        return int(buf.data_ptr()), list(buf.shape), list(buf.stride())
    return int(buf.data.ptr), list(buf.shape), [s // buf.itemsize for s in buf.strides]  # cupy


# The rules about where a tensor lies in memory, which a warp-specialized kernel checks itself.
ALIGNMENT_RULES = ("address", "stride", "contiguous")
_ZEROS = []  # the zeroed device bytes behind the maps of empty tensors (made on first need)
_MAPS = {}  # encoded maps by spec: a launcher that runs the same launch again reuses its map


def tensor_map_arg(param, buf):
    """The kernel argument for META entry `param` (kind `tensor_map`) over `buf`, the buffer
    passed for tensor param `param["name"]` (torch or cupy, on the GPU): a one-element 128-byte
    numpy array for cupy's kernel call. Call it only for launches that run (non-empty grid);
    an empty tensor gets the stand-in map over zeroed device bytes."""
    address, shape, strides = buffer_layout(buf)
    if 0 in shape:
        if not _ZEROS:
            import cupy as cp
            _ZEROS.append(cp.zeros(64, dtype=cp.uint8))
        spec = empty_standin_spec(param, len(shape), int(_ZEROS[0].data.ptr))
    else:
        try:
            spec = tensor_map_spec(param, shape, address, strides)
        except TensorMapError as e:
            # A kernel that checks alignment itself (META "unaligned": "zeros", a warp-specialized
            # kernel) copies without the map: it gets 128 zero bytes.
            if param.get("unaligned") == "zeros" and e.rule in ALIGNMENT_RULES:
                return by_value(bytes(128))
            raise
    key = repr(sorted(spec.items()))
    if key not in _MAPS:
        if len(_MAPS) > 4096:
            _MAPS.clear()
        _MAPS[key] = by_value(encode_tensor_map(spec))
    return _MAPS[key]


def _selftest():
    """Checks the pure part (and `by_value` where numpy is installed); returns the check count."""
    n = 0

    def check(cond, what):
        nonlocal n
        if not cond:
            raise AssertionError(what)
        n += 1

    def rule(param, shape, address=0x1000, strides=None):
        try:
            tensor_map_spec(param, shape, address, strides)
        except TensorMapError as e:
            check(str(e).startswith(f"tensor map of `{param['name']}`"), f"names the tensor: {e}")
            return e.rule
        raise AssertionError(f"accepted {param} over {shape}")

    q = {"ptr_index": 5, "name": "q", "kind": "tensor_map", "dtype": "bf16", "box": [1, 1, 64, 64],
         "swizzle": "128B", "oob_fill": "zero"}
    s = tensor_map_spec(q, (2, 16, 1000, 128), 0x7F0000000000)
    check(s["rank"] == 4 and s["data_type"] == 9, "rank and type")
    check(s["global_dim"] == [128, 1000, 16, 2], f"dims {s['global_dim']}")
    check(s["global_strides"] == [256, 256 * 1000, 256 * 1000 * 16], f"strides {s['global_strides']}")
    check(s["box_dim"] == [64, 64, 1, 1] and s["element_strides"] == [1] * 4, "box")
    check((s["interleave"], s["swizzle"], s["l2_promotion"], s["oob_fill"]) == (0, 3, 3, 0), "enums")
    a = dict(q, name="a", dtype="f16", box=[128, 64])
    s = tensor_map_spec(a, [4096, 512], 0x1000)
    check(s["data_type"] == 6 and s["global_strides"] == [1024] and s["box_dim"] == [64, 128], "2-D f16")
    s = tensor_map_spec(dict(a, box=[64, 64]), [64, 100], 0x1000, strides=[128, 1])
    check(s["global_dim"] == [100, 64] and s["global_strides"] == [256], "declared strides")
    check(tensor_map_spec(dict(a, box=[64]), [4096], 0)["global_strides"] == [], "rank 1")
    check(rule(dict(q, box=[]), []) == "rank", "rank 0")
    check(rule(dict(q, box=[1] * 5 + [64]), [1] * 5 + [64]) == "rank", "rank 6")
    check(rule(dict(q, dtype="f32"), (1, 1, 64, 64)) == "dtype", "f32")
    check(rule(q, (1, 1, 64, 64), address=0x1008) == "address", "misaligned")
    check(rule(q, (2, 0, 64, 128)) == "dim", "empty tensor")
    check(rule(dict(q, box=[64]), [(1 << 32) + 1]) == "dim", "dim past 2^32")
    check(rule(dict(q, box=[64, 64]), [64, 100]) == "stride", "200-byte rows")
    check(rule(dict(q, box=[1, 64, 64]), [2, 1 << 20, 1 << 19]) == "stride", "2^40-byte stride")
    check(rule(dict(q, box=[64, 64]), [64, 64], strides=[1, 64]) == "contiguous", "transposed")
    check(rule(dict(q, box=[64, 64, 64]), [64, 64]) == "box", "box rank")
    check(rule(dict(q, box=[257, 64]), [512, 64]) == "box", "box 257")
    check(rule(dict(q, box=[0, 64]), [512, 64]) == "box", "box 0")
    check(rule(dict(q, box=[64, 128]), [64, 128]) == "inner_box", "256-byte inner box")
    check(rule(dict(q, box=[64, 4]), [64, 64]) == "inner_box", "8-byte inner box")
    check(rule(dict(q, swizzle="64B"), (1, 1, 64, 64)) == "encoding", "unknown swizzle")
    s = empty_standin_spec(q, 4, 0x2000)
    check(s["global_dim"] == [1] * 4 and s["global_strides"] == [16] * 3 and s["box_dim"] == [64, 64, 1, 1],
          "stand-in")
    try:
        import numpy as np
    except ImportError:
        return n
    raw = bytes(range(MAP_BYTES))
    arg = by_value(raw)
    check(isinstance(arg, np.ndarray) and arg.size == 1 and arg.itemsize == MAP_BYTES, "one 128-byte element")
    check(arg.__array_interface__["data"][0] % MAP_BYTES == 0, "128-byte aligned")
    check(arg.tobytes() == raw, "the bytes")
    return n


def _check_meta(path):
    """Computes the spec of every tensor map `path` (a META.json) lists, each symbolic dim of its
    tensor 300 (ragged against every box); returns how many maps it lists."""
    import json
    meta, n = json.load(open(path)), 0
    for k in meta["kernels"]:
        for p in k["params"]:
            if p["kind"] != "tensor_map":
                continue
            kp = next(q for q in k["kernel_params"] if q["name"] == p["name"])
            shape = [int(d) if d.isdigit() else 300 for d in kp["dims"]]
            s = tensor_map_spec(p, shape, 0x7F0000000000)
            if s["global_dim"] != shape[::-1] or s["box_dim"] != p["box"][::-1]:
                raise AssertionError(f"{path}: {k['name']} map of {p['name']}: {s}")
            n += 1
    return n


if __name__ == "__main__":
    if sys.argv[1:2] != ["--selftest"]:
        sys.exit(__doc__ + "\nusage: kir_launch.py --selftest [META.json]...")
    print(f"kir_launch selftest: all {_selftest()} checks hold")
    for path in sys.argv[2:]:
        print(f"kir_launch selftest: {path}: all {_check_meta(path)} tensor maps encode")
