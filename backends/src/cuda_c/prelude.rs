//! The fixed helper code at the top of every generated `.cu` file: 16-bit float conversions
//! written with bit operations (no `cuda_fp16.h`), integer arithmetic with the interpreter's
//! wrap-around and error rules, NaN-propagating max/min, saturating float→int casts, the NF4
//! codebook, 16-bit and 8-bit atomic adds (compare-and-swap loops) and `kir_fail`.
//!
//! Everything here is plain CUDA C++ that NVRTC compiles without any include. Float arithmetic
//! in the kernels uses the `__f*_rn` intrinsics, which are never contracted into FMAs whatever
//! the compiler flags, so results match the interpreter's separate f32 operations bit for bit
//! (except the transcendental functions, whose last-bit accuracy differs between libraries).

/// The helper source, placed once per module before the kernels.
pub const PRELUDE: &str = r#"// ---- helpers (identical in every file kir generates) ----
#define KIR_INF __int_as_float(0x7f800000)
#define KIR_NAN __int_as_float(0x7fc00000)

// Reports a runtime error the interpreter would report (out-of-bounds access without
// `other`/`guard`, integer division by zero, bad shift, non-positive loop step, failed
// `requires`) and aborts the launch: the host sees a launch failure, never a wrong result.
__device__ __noinline__ void kir_fail(const char* what) {
  printf("kir: block (%d, %d, %d) thread %d: %s\n", (int)blockIdx.x, (int)blockIdx.y,
         (int)blockIdx.z, (int)threadIdx.x, what);
  __trap();
}

// bfloat16 <-> f32. Storage is the 16 high bits of the f32; rounding is to nearest even.
__device__ __forceinline__ float kir_bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned int)h << 16);
}
__device__ __forceinline__ unsigned short kir_f32_to_bf16(float f) {
  unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}

// IEEE binary16 <-> f32, with subnormals; rounding is to nearest even.
__device__ __forceinline__ float kir_f16_to_f32(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int exp = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int mant = (unsigned int)h & 0x3ffu;
  if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp == 0u) {  // zero or subnormal: mant * 2^-24, exact in f32
    float v = (float)mant * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
__device__ __forceinline__ unsigned short kir_f32_to_f16(float f) {
  unsigned int x = __float_as_uint(f);
  unsigned int sign = (x >> 16) & 0x8000u;
  unsigned int ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);   // NaN
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to infinity
  if (ax >= 0x38800000u) {                                          // normal result
    unsigned int r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (unsigned short)(sign | ((r - 0x38000000u) >> 13));
  }
  if (ax <= 0x33000000u) return (unsigned short)sign;  // at most 2^-25: rounds to zero
  unsigned int e = ax >> 23;                           // 102..112: a subnormal result
  unsigned int m = (ax & 0x7fffffu) | 0x800000u;
  unsigned int shift = 126u - e;
  unsigned int r = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (r & 1u))) r += 1u;
  return (unsigned short)(sign | r);
}
__device__ __forceinline__ float kir_round_bf16(float f) { return kir_bf16_to_f32(kir_f32_to_bf16(f)); }
__device__ __forceinline__ float kir_round_f16(float f) { return kir_f16_to_f32(kir_f32_to_f16(f)); }

// f64 -> f32 rounding to odd, so that a second rounding to a 16-bit float is correct (int casts).
__device__ __forceinline__ float kir_f64_to_f32_odd(double d) {
  float t = __double2float_rz(d);
  if ((double)t != d && d == d) t = __uint_as_float(__float_as_uint(t) | 1u);
  return t;
}

// max/min of floats: NaN if either is NaN; +0 is greater than -0.
__device__ __forceinline__ float kir_fmax(float a, float b) {
  if (a != a || b != b) return KIR_NAN;
  if (a == b) return __float_as_uint(a) >> 31 ? b : a;
  return a > b ? a : b;
}
__device__ __forceinline__ float kir_fmin(float a, float b) {
  if (a != a || b != b) return KIR_NAN;
  if (a == b) return __float_as_uint(a) >> 31 ? a : b;
  return a < b ? a : b;
}
__device__ __forceinline__ float kir_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float kir_silu(float x) { return __fmul_rn(x, kir_sigmoid(x)); }
__device__ __forceinline__ float kir_rsqrt(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }

// Integers wrap around (two's complement; u8 modulo 256). Division truncates toward zero and
// fails on a zero divisor; shifts fail outside [0, bits).
#define KIR_INT_OPS(T, U, BITS)                                                                  \
  __device__ __forceinline__ T kir_add(T a, T b) { return (T)((U)a + (U)b); }                   \
  __device__ __forceinline__ T kir_sub(T a, T b) { return (T)((U)a - (U)b); }                   \
  __device__ __forceinline__ T kir_mul(T a, T b) { return (T)((U)a * (U)b); }                   \
  __device__ __forceinline__ T kir_neg(T a) { return (T)(0 - (U)a); }                           \
  __device__ __forceinline__ T kir_abs(T a) { return a < 0 ? kir_neg(a) : a; }                  \
  __device__ __forceinline__ T kir_max(T a, T b) { return a > b ? a : b; }                      \
  __device__ __forceinline__ T kir_min(T a, T b) { return a < b ? a : b; }                      \
  __device__ __forceinline__ T kir_div(T a, T b) {                                              \
    if (b == 0) kir_fail("integer division by zero");                                           \
    return b == -1 ? kir_neg(a) : (T)(a / b);                                                   \
  }                                                                                             \
  __device__ __forceinline__ T kir_rem(T a, T b) {                                              \
    if (b == 0) kir_fail("integer division by zero");                                           \
    return b == -1 ? (T)0 : (T)(a % b);                                                         \
  }                                                                                             \
  __device__ __forceinline__ T kir_shl(T a, T s) {                                              \
    if (s < 0 || s >= BITS) kir_fail("shift amount outside [0, bits)");                         \
    return (T)((U)a << s);                                                                      \
  }                                                                                             \
  __device__ __forceinline__ T kir_shr(T a, T s) {                                              \
    if (s < 0 || s >= BITS) kir_fail("shift amount outside [0, bits)");                         \
    return (T)(a >> s);                                                                         \
  }
KIR_INT_OPS(int, unsigned int, 32)
KIR_INT_OPS(long long, unsigned long long, 64)
typedef unsigned char kir_u8;
__device__ __forceinline__ kir_u8 kir_add(kir_u8 a, kir_u8 b) { return (kir_u8)(a + b); }
__device__ __forceinline__ kir_u8 kir_sub(kir_u8 a, kir_u8 b) { return (kir_u8)(a - b); }
__device__ __forceinline__ kir_u8 kir_mul(kir_u8 a, kir_u8 b) { return (kir_u8)(a * b); }
__device__ __forceinline__ kir_u8 kir_neg(kir_u8 a) { return (kir_u8)(0 - a); }
__device__ __forceinline__ kir_u8 kir_abs(kir_u8 a) { return a; }
__device__ __forceinline__ kir_u8 kir_max(kir_u8 a, kir_u8 b) { return a > b ? a : b; }
__device__ __forceinline__ kir_u8 kir_min(kir_u8 a, kir_u8 b) { return a < b ? a : b; }
__device__ __forceinline__ kir_u8 kir_div(kir_u8 a, kir_u8 b) {
  if (b == 0) kir_fail("integer division by zero");
  return (kir_u8)(a / b);
}
__device__ __forceinline__ kir_u8 kir_rem(kir_u8 a, kir_u8 b) {
  if (b == 0) kir_fail("integer division by zero");
  return (kir_u8)(a % b);
}
__device__ __forceinline__ kir_u8 kir_shl(kir_u8 a, kir_u8 s) {
  if (s >= 8) kir_fail("shift amount outside [0, bits)");
  return (kir_u8)(a << s);
}
__device__ __forceinline__ kir_u8 kir_shr(kir_u8 a, kir_u8 s) {
  if (s >= 8) kir_fail("shift amount outside [0, bits)");
  return (kir_u8)(a >> s);
}

// float -> integer casts truncate toward zero and saturate; NaN becomes 0.
__device__ __forceinline__ int kir_f32_to_i32(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.0f) return 2147483647;
  if (x <= -2147483648.0f) return -2147483647 - 1;
  return (int)x;
}
__device__ __forceinline__ long long kir_f32_to_i64(float x) {
  if (x != x) return 0;
  if (x >= 9223372036854775808.0f) return 9223372036854775807LL;
  if (x <= -9223372036854775808.0f) return -9223372036854775807LL - 1;
  return (long long)x;
}
__device__ __forceinline__ unsigned char kir_f32_to_u8(float x) {
  if (x != x || x <= 0.0f) return 0;
  if (x >= 255.0f) return 255;
  return (unsigned char)x;
}
// Integer wrap-around between widths.
__device__ __forceinline__ int kir_to_i32(long long x) { return (int)(unsigned int)(unsigned long long)x; }

// Index arithmetic of dims and strides (floor division, as the IR's expressions).
__device__ __forceinline__ long long kir_floordiv(long long a, long long b) {
  if (b == 0) kir_fail("division by zero in a dim expression");
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long kir_floormod(long long a, long long b) { return a - kir_floordiv(a, b) * b; }
__device__ __forceinline__ long long kir_cdiv(long long a, long long b) { return -kir_floordiv(-a, b); }
__device__ __forceinline__ long long kir_min_ll(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long kir_max_ll(long long a, long long b) { return a > b ? a : b; }

// The NF4 codebook, indexed by the low 4 bits of a code.
__device__ __forceinline__ float kir_nf4(unsigned char code) {
  const float table[16] = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
      0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  return table[code & 15];
}

// Atomic adds on 16-bit floats and bytes: a compare-and-swap loop on the aligned 32-bit word
// that holds the element; the sum is an f32 addition rounded to the element's type.
__device__ __forceinline__ void kir_atomic_add_16(unsigned short* p, float v, bool bf16) {
  unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ull);
  unsigned int shift = ((unsigned long long)p & 2ull) ? 16u : 0u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    unsigned short h = (unsigned short)(assumed >> shift);
    float sum = __fadd_rn(bf16 ? kir_bf16_to_f32(h) : kir_f16_to_f32(h), v);
    unsigned int n = bf16 ? kir_f32_to_bf16(sum) : kir_f32_to_f16(sum);
    unsigned int next = (assumed & ~(0xffffu << shift)) | (n << shift);
    old = atomicCAS(word, assumed, next);
  } while (old != assumed);
}
__device__ __forceinline__ void kir_atomic_add_u8(unsigned char* p, unsigned char v) {
  unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ull);
  unsigned int shift = 8u * (unsigned int)((unsigned long long)p & 3ull);
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    unsigned int b = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (b << shift));
  } while (old != assumed);
}
// ---- end of helpers ----
"#;
