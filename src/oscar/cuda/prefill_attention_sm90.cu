// Prefill attention on Hopper's warpgroup MMA (design: docs/cuda.md, "Prefill attention").
//
// Same inputs and results as the mma.sync kernel in prefill_attention.cu, for d = 128.
// A CTA takes one KV head and 128 query rows (a row is a (token, query head of the GQA
// group) pair, token-major). Its first warpgroup copies key tiles of 128 into 128-byte-
// swizzled shared memory (cp.async, two buffers each for K and V, handed over on mbarriers);
// the other two each own 64 rows and compute. S = Q·Kᵀ is one m64n128k16 wgmma chain with Q
// and K from shared memory; P·V takes P from registers (the accumulator's layout is the A
// fragment's) and V MN-major. A warpgroup issues the next tile's scores together with this
// tile's P·V, and the two take turns to issue (named barriers), so that one's softmax runs
// on the CUDA cores while the tensor cores work through the other's products.
//
// The INT2/4/8 history is read from the BF16 scratch prefill_attention dequantized it into.
// A key tile is read from one source per key when every row of the CTA agrees which form a
// key takes (the sink and keys past every row's history end: BF16; keys before every row's
// history end: history). A tile that crosses the rows' history ends is taken twice, once
// from each source with the other's keys masked: the online softmax accepts any partition
// of a row's keys into tiles.
#include "oscar/cuda/prefill_attention_sm90.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>

#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/device_primitives.cuh"
#include "oscar/cuda/host_checks.h"
#include "oscar/cuda/wgmma.cuh"

namespace oscar::cuda::detail {
// A named namespace, not an anonymous one: the host pass sees no caller of the device
// helpers and would warn about each.
namespace prefill_sm90 {

constexpr int kDim = 128;
constexpr int kLoaders = 128;                  // warpgroup 0 copies the key tiles
constexpr int kMath = 256;                     // warpgroups 1 and 2 compute
constexpr int kThreads = kLoaders + kMath;
constexpr int kRows = 128;                     // query rows per CTA, 64 per computing warpgroup
// Registers per thread after the split (setmaxnreg); the CTA starts with 168 × 384.
constexpr int kLoaderRegs = 56, kMathRegs = 224;
static_assert(kLoaderRegs * kLoaders + kMathRegs * kMath <= 168 * kThreads, "register split exceeds the CTA's");
constexpr int kKeys = 128;     // keys per tile
constexpr int kTileBytes = kKeys * kDim * 2;  // [2 halves of 64 dims][128 rows][128 B], swizzled
constexpr int kHalfBytes = kTileBytes / 2;
constexpr int kChunks = kDim / 8;  // 16-byte chunks per row
constexpr int kPage = kDecodeFpBlockTokens;
constexpr size_t kSmemBytes = 5 * size_t(kTileBytes) + 1024;  // Q, K ×2, V ×2, alignment slack
static_assert(kRows == kKeys, "the Q block and the key tiles share one swizzled layout");
static_assert(kChunks == 16 && kKeys % kPage == 0, "a tile row is 16 chunks; a tile is whole fp pages");

enum TileKind : int { kMerged = 0, kFpOnly = 1, kHistOnly = 2 };

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile (128-byte swizzle per half).
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t((chunk >> 3) * kHalfBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// The CTA's key ranges (from its tokens' key counts len and clamped history ends h):
// keys [0, len_max); rows' history ends in [h_lo, h_hi]; BF16 past the sink from fp_lo;
// history rows in the scratch below hist_hi; tiles [d_lo, d_hi) cross [h_lo, h_hi) and are
// taken twice; n_virtual tiles in all.
struct Plan {
  int len_max, len_min, h_lo, h_hi, fp_lo, hist_hi, d_lo, d_hi, n_virtual;
};

// Virtual tile v: its first key and kind.
__device__ __forceinline__ void virtual_tile(const Plan& b, int v, int& j0, int& kind) {
  const int nd = b.d_hi - b.d_lo;
  int t = v;
  kind = kMerged;
  if (v >= b.d_lo + 2 * nd) {
    t = v - nd;
  } else if (v >= b.d_lo) {
    t = b.d_lo + (v - b.d_lo) / 2;
    kind = (v - b.d_lo) % 2 ? kHistOnly : kFpOnly;
  }
  j0 = t * kKeys;
}

// K or V rows of virtual tile v into the tile at dst. A key no row reads in that form, or
// on a released page, becomes zeros (stale rows may hold NaN, and 0·NaN is NaN).
template <int kBits>
__device__ __forceinline__ void load_tile(const PrefillAttentionInputs& p, const Plan& b, int v, int kvh,
                                          int scratch_rows, bool value, uint32_t dst, int loader) {
  int j0, kind;
  virtual_tile(b, v, j0, kind);
  const uint16_t* fp = value ? p.fp_v : p.fp_k;
  const uint16_t* hist = p.scratch + (value ? size_t(p.n_kv_heads) * scratch_rows * kDim : 0);
  const int sink = p.sink, ch = loader % kChunks, key0 = loader / kChunks;
  // This loader copies chunk ch of keys key0 + 8k, k < 16 (two per fp page); their rows share
  // key0's swizzle, 8 rows (1024 bytes) apart.
  constexpr int kPerThread = kKeys * kChunks / kLoaders, kKeyStep = kLoaders / kChunks;
  static_assert(kPage % kKeyStep == 0 && kKeyStep % 8 == 0, "a loader's keys share a swizzle, whole per page");
  const uint32_t dst0 = dst + swizzled(key0, ch);
  // The common tiles, with one source for all their keys: history rows (consecutive in the
  // scratch), or BF16 rows of pages that every key of the tile is wanted from.
  const bool all_hist = kBits != 0 && kind != kFpOnly && j0 >= sink && j0 + kKeys <= b.hist_hi &&
                        (kind == kHistOnly || j0 + kKeys <= b.h_lo);
  const bool all_fp = kind == kMerged && (kBits == 0 || j0 >= b.h_hi) && j0 >= b.fp_lo && j0 + kKeys <= b.len_max;
  if (all_hist) {
    const uint16_t* src = hist + (size_t(kvh) * scratch_rows + size_t(j0 - sink + key0)) * kDim + ch * 8;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) cp_async16_shared(dst0 + k * kKeyStep * 128, src + k * kKeyStep * kDim, true);
    return;
  }
  if (all_fp) {
    const uint16_t* src = fp + (size_t(kvh) * kPage + key0) * kDim + ch * 8;
    const int32_t* pages = p.fp_blocks + j0 / kPage;
    const size_t page_elems = size_t(p.n_kv_heads) * kPage * kDim;
    constexpr int kPerPage = kPage / kKeyStep;
#pragma unroll
    for (int k = 0; k < kPerThread; k += kPerPage) {
      const int page = __ldg(pages + k / kPerPage);
      const uint16_t* row = page >= 0 ? src + size_t(page) * page_elems : fp;
#pragma unroll
      for (int e = 0; e < kPerPage; ++e)
        cp_async16_shared(dst0 + (k + e) * kKeyStep * 128, row + e * kKeyStep * kDim, page >= 0);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int key = key0 + k * kKeyStep, j = j0 + key;
    const bool from_hist = kind == kMerged ? (kBits != 0 && j >= sink && j < b.h_lo) : kind == kHistOnly;
    const uint16_t* src = fp;
    bool ok;
    if (from_hist) {
      ok = j >= sink && j < b.hist_hi;
      if (ok) src = hist + (size_t(kvh) * scratch_rows + size_t(j - sink)) * kDim + ch * 8;
    } else {
      ok = j < b.len_max && (j < sink || j >= b.fp_lo);
      const int page = ok ? __ldg(p.fp_blocks + j / kPage) : -1;
      ok = page >= 0;
      if (ok) src = fp + ((size_t(page) * p.n_kv_heads + kvh) * kPage + size_t(j % kPage)) * kDim + ch * 8;
    }
    cp_async16_shared(dst0 + k * kKeyStep * 128, src, ok);
  }
}

// S (this warpgroup's 64 rows × 128 keys) = Q·Kᵀ: 8 k-steps of 16 dims. The descriptors are
// those of the tiles' first chunk; a k-step moves the start address (16-byte units).
__device__ __forceinline__ void issue_scores(uint64_t q_desc, uint64_t k_desc, float (&s)[64]) {
#pragma unroll
  for (int kk = 0; kk < kDim / 16; ++kk) {
    const uint64_t off = ((kk / 4) * kHalfBytes + (kk % 4) * 32) >> 4;
    wgmma_m64n128k16_ss(s, q_desc + off, k_desc + off, kk > 0);
  }
}

// O (64 rows × 128 dims) += P·V: 8 k-steps of 16 keys (2048 bytes), V MN-major.
__device__ __forceinline__ void issue_pv(const uint32_t (&pa)[32], uint64_t v_desc, float (&o)[64]) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
    wgmma_m64n128k16_rs_mn(o, a, v_desc + uint64_t(kk * 16 * 128 >> 4));
  }
}

__device__ __forceinline__ void mbar_init_s(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_s(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival on bar once all of this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait_s(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
// Named barriers 1 and 2 (0 is __syncthreads) order the two computing warpgroups' turns.
__device__ __forceinline__ void turn_wait(int id) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kMath) : "memory"); }
__device__ __forceinline__ void turn_pass(int id) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kMath) : "memory"); }

template <int kBits>
__global__ void __launch_bounds__(kThreads, 1) prefill_attention_sm90_kernel(const PrefillAttentionInputs p) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)  // (the host pass parses the body)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ Plan s_plan;
  // Per buffer: K landed / K free again / V landed / V free again.
  __shared__ __align__(8) uint64_t s_bars[4][2];
  const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;
  const uint32_t q_s = base;
  const auto k_s = [base](int buf) { return base + uint32_t(1 + buf) * kTileBytes; };  // buf 0, 1
  const auto v_s = [base](int buf) { return base + uint32_t(3 + buf) * kTileBytes; };
  const auto bar = [&](int which, int buf) { return smem_addr(&s_bars[which][buf]); };
  enum { kFullK = 0, kFreeK = 1, kFullV = 2, kFreeV = 3 };

  const int tid = threadIdx.x, wg = tid / 128;
  const int gqa = p.n_heads / p.n_kv_heads, tokens_per_cta = kRows / gqa;
  // Later tokens have more keys: hand them out first.
  const int tok0 = (gridDim.x - 1 - blockIdx.x) * tokens_per_cta, kvh = blockIdx.y;
  const int n_tok = min(tokens_per_cta, p.n_tokens - tok0);
  const int sink = p.sink;
  const int scratch_rows = kBits == 0 ? 0 : max(p.max_hist_end - sink, 0);

  if (tid == 0) {
    Plan b{0, INT_MAX, INT_MAX, 0, INT_MAX, 0, 0, 0, 0};
    for (int i = 0; i < n_tok; ++i) {
      const int len = p.seq_len[tok0 + i];
      const int h = kBits == 0 ? sink : max(sink, min(p.hist_end[tok0 + i], len));
      b.len_max = max(b.len_max, len), b.len_min = min(b.len_min, len);
      b.h_lo = min(b.h_lo, h), b.h_hi = max(b.h_hi, h);
      if (h < len) b.fp_lo = min(b.fp_lo, h);
    }
    b.hist_hi = min(b.h_hi, sink + scratch_rows);
    const int n_tiles = (b.len_max + kKeys - 1) / kKeys;
    if (kBits != 0 && b.h_lo < b.h_hi) b.d_lo = b.h_lo / kKeys, b.d_hi = (b.h_hi + kKeys - 1) / kKeys;
    b.n_virtual = n_tiles + (b.d_hi - b.d_lo);
    s_plan = b;
    for (int buf = 0; buf < 2; ++buf) {
      mbar_init_s(bar(kFullK, buf), kLoaders), mbar_init_s(bar(kFullV, buf), kLoaders);
      mbar_init_s(bar(kFreeK, buf), kMath / 32), mbar_init_s(bar(kFreeV, buf), kMath / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }

  // Q rows to shared memory as BF16, scaled so that softmax runs in base 2.
  const float qscale = 1.4426950408889634f * rsqrtf(float(kDim));
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int row = i / kChunks, ch = i % kChunks, tok = row / gqa;
    uint4 packed = make_uint4(0u, 0u, 0u, 0u);
    if (tok < n_tok) {
      const float* src = p.q + (size_t(tok0 + tok) * p.n_heads + kvh * gqa + row % gqa) * kDim + ch * 8;
      const float4 a = *reinterpret_cast<const float4*>(src), e = *reinterpret_cast<const float4*>(src + 4);
      packed = make_uint4(pack_bf16(a.x * qscale, a.y * qscale), pack_bf16(a.z * qscale, a.w * qscale),
                          pack_bf16(e.x * qscale, e.y * qscale), pack_bf16(e.z * qscale, e.w * qscale));
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_s + swizzled(row, ch)), "r"(packed.x),
                 "r"(packed.y), "r"(packed.z), "r"(packed.w)
                 : "memory");
  }
  fence_proxy_async_smem();
  __syncthreads();
  const Plan b = s_plan;
  const int nv = b.n_virtual;

  if (wg == 0) {
    // The loaders: tile v's K into buffer v % 2 once tile v − 2's scores are done with it,
    // its V once tile v − 2's P·V is (a fresh barrier passes the wait of parity 1).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kLoaderRegs));
    for (int v = 0; v < nv; ++v) {
      const int buf = v % 2;
      const uint32_t parity = ((v / 2) & 1) ^ 1;
      mbar_wait_s(bar(kFreeK, buf), parity);
      load_tile<kBits>(p, b, v, kvh, scratch_rows, false, k_s(buf), tid);
      mbar_arrive_on_copies(bar(kFullK, buf));
      mbar_wait_s(bar(kFreeV, buf), parity);
      load_tile<kBits>(p, b, v, kvh, scratch_rows, true, v_s(buf), tid);
      mbar_arrive_on_copies(bar(kFullV, buf));
    }
    cp_async_wait<0>();
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMathRegs));

  const int mwg = wg - 1, mtid = tid - kLoaders, lane = tid % 32, g = lane / 4, c = lane % 4;
  // This thread's two rows (g and g + 8 of its warp's 16): key count and history end.
  int row_len[2], row_hist[2];
  float* row_out[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = mtid / 32 * 16 + g + 8 * r, tok = row / gqa;
    const bool valid = tok < n_tok;
    row_len[r] = valid ? p.seq_len[tok0 + tok] : 0;
    row_hist[r] = valid && kBits != 0 ? max(sink, min(p.hist_end[tok0 + tok], row_len[r])) : sink;
    row_out[r] = valid ? p.out + (size_t(tok0 + tok) * p.n_heads + kvh * gqa + row % gqa) * kDim : nullptr;
  }

  // Descriptors: Q (this warpgroup's rows) and K K-major, V MN-major (the two halves of d
  // LBO apart); buffer 1 is one tile (kTileBytes >> 4 in the start field) past buffer 0.
  const uint64_t q_desc = wgmma_desc_sw128(q_s + mwg * 64 * 128, 16, 1024);
  const uint64_t k_desc0 = wgmma_desc_sw128(k_s(0), 16, 1024), v_desc0 = wgmma_desc_sw128(v_s(0), kHalfBytes, 1024);
  const auto k_desc = [k_desc0](int buf) { return k_desc0 + uint64_t(buf) * (kTileBytes >> 4); };
  const auto v_desc = [v_desc0](int buf) { return v_desc0 + uint64_t(buf) * (kTileBytes >> 4); };
  // Each warp hands a buffer back once its own products have read it.
  const auto release = [&](int which, int buf) {
    __syncwarp();
    if (lane == 0) mbar_arrive_s(bar(which, buf));
  };
  // Turns: warpgroup 1 issues first; each passes the turn after issuing. The other's last
  // pass would have no taker and is skipped.
  const int my_turn = 1 + mwg, other_turn = 2 - mwg;
  const auto pass_turn = [&](bool last) {
    if (!(last && mwg == 1)) turn_pass(other_turn);
  };

  float s[64], o[64];
  uint32_t pa[32];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.0f, o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // Masks virtual tile v's scores in s, folds them into the running max m and sum l, leaves
  // 2^(s − m) in s and the factor for the old accumulator in scale.
  const auto softmax = [&](int v, float (&scale)[2]) {
    int j0, kind;
    virtual_tile(b, v, j0, kind);
    if (kind != kMerged || j0 + kKeys > b.len_min) {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int j = j0 + 8 * (i / 4) + 2 * c + (i & 1), r = (i / 2) & 1;
        bool valid = j < row_len[r];
        if (kind != kMerged) valid = valid && ((kind == kHistOnly) == (kBits != 0 && j >= sink && j < row_hist[r]));
        if (!valid) s[i] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < 64; ++i)
        if (((i / 2) & 1) == r) mx = fmaxf(mx, s[i]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float base_r = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
      scale[r] = fast_exp2(m[r] - base_r);                      // m = −inf: 0 (o and l are 0)
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < 64; ++i)
        if (((i / 2) & 1) == r) {
          s[i] = fast_exp2(s[i] - base_r);
          sum += s[i];
        }
      l[r] = l[r] * scale[r] + sum;
    }
  };
  // P as the A fragments of the 8 k-steps: keys 16kk + 2c (+1) and 16kk + 8 + 2c (+1).
  const auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      pa[4 * kk + 0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
      pa[4 * kk + 1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
      pa[4 * kk + 2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
      pa[4 * kk + 3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };

  if (nv > 0) {
    if (mwg == 1) turn_pass(1);  // warpgroup 1 (mwg 0) goes first
    // Turn 0: tile 0's scores.
    mbar_wait_s(bar(kFullK, 0), 0);
    fence_proxy_async_smem();
    turn_wait(my_turn);
    wgmma_fence();
    issue_scores(q_desc, k_desc(0), s);
    wgmma_commit();
    pass_turn(false);
    wgmma_wait<0>();
    wgmma_fence_operand(s);
    release(kFreeK, 0);
    float scale[2];
    softmax(0, scale);
    pack_p();
  }
  // Turns 1 … nv − 1: tile v's P·V beside tile v + 1's scores, then that softmax.
  for (int v = 0; v + 1 < nv; ++v) {
    const int nb = (v + 1) % 2, cb = v % 2;
    mbar_wait_s(bar(kFullK, nb), ((v + 1) / 2) & 1);
    mbar_wait_s(bar(kFullV, cb), (v / 2) & 1);
    fence_proxy_async_smem();
    turn_wait(my_turn);
    wgmma_fence();
    wgmma_fence_operand(s);
    wgmma_fence_operand(o);
    issue_scores(q_desc, k_desc(nb), s);
    wgmma_commit();
    issue_pv(pa, v_desc(cb), o);
    wgmma_commit();
    pass_turn(false);
    wgmma_wait<1>();  // the scores; P·V still runs
    wgmma_fence_operand(s);
    release(kFreeK, nb);
    float scale[2];
    softmax(v + 1, scale);
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    release(kFreeV, cb);
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= scale[(i / 2) & 1];
    pack_p();
  }
  if (nv > 0) {  // turn nv: the last tile's P·V
    const int cb = (nv - 1) % 2;
    mbar_wait_s(bar(kFullV, cb), ((nv - 1) / 2) & 1);
    fence_proxy_async_smem();
    turn_wait(my_turn);
    wgmma_fence();
    wgmma_fence_operand(o);
    issue_pv(pa, v_desc(cb), o);
    wgmma_commit();
    pass_turn(true);
    wgmma_wait<0>();
    wgmma_fence_operand(o);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (!row_out[r]) continue;
#pragma unroll
    for (int jb = 0; jb < 16; ++jb)
      *reinterpret_cast<float2*>(row_out[r] + 8 * jb + 2 * c) =
          make_float2(o[4 * jb + 2 * r] * inv, o[4 * jb + 2 * r + 1] * inv);
  }
#endif
}

template <int kBits>
void launch(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr auto kernel = prefill_attention_sm90_kernel<kBits>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (attr != cudaSuccess) fail("prefill_attention", std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(attr));
  const int tokens_per_cta = kRows / (p.n_heads / p.n_kv_heads);
  const dim3 grid(unsigned((p.n_tokens + tokens_per_cta - 1) / tokens_per_cta), unsigned(p.n_kv_heads));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  check_launch("prefill_attention (sm90)");
}

bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

}  // namespace prefill_sm90

using namespace prefill_sm90;

bool prefill_attention_sm90_applies(const PrefillAttentionParams& p) {
  static const bool sm90 = device_is_sm90();
  return sm90 && p.head_dim == kDim && !p.key_bias.coef && aligned16(p.q) &&
         reinterpret_cast<uintptr_t>(p.out) % 8 == 0;
}

void prefill_attention_sm90(const PrefillAttentionParams& p, cudaStream_t stream) {
  switch (p.bits) {
    case 0: return launch<0>(p, stream);
    case 2: return launch<2>(p, stream);
    case 4: return launch<4>(p, stream);
    default: return launch<8>(p, stream);
  }
}

}  // namespace oscar::cuda::detail
