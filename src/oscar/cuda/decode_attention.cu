// Split-KV ("flash decoding") attention for one decode step over the mixed cache:
// decode_chunk_kernel computes, per (sequence, KV head, chunk of keys), the online-softmax
// partial (max m, sum l, unnormalized output o) of every query head of the GQA group;
// decode_merge_kernel combines the chunks of each (sequence, head). Design: docs/cuda.md.
#include "oscar/cuda/decode_attention.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "oscar/cuda/decode_history_mma.cuh"
#include "oscar/cuda/device_primitives.cuh"
#include "oscar/cuda/launch.h"
#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 128;  // 4 warps; QK maps 64 keys × 2 halves onto them
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kDecodeTileKeys;
static_assert(kTile * 2 == kThreads, "QK assigns two threads to each key of a tile");
static_assert(kTile % kDecodeFpBlockTokens == 0 && kTile % kDecodeHistBlockTokens == 0,
              "tiles are whole pages (page-aligned), so a tile's rows sit at one stride in shared memory");

// Compile-time geometry of one instantiation. kBits = 0 is the BF16-only cache (and the
// split kernel's BF16-window CTAs, whose one tile needs kStages = 1).
template <int kBits, int kDim, int kMaxGroup, int kStages = 2>
struct Geometry {
  static constexpr bool kHist = kBits != 0;
  // PV splits a row into units of 8 dims. For packed rows a unit is kUnitBits bytes of
  // codes: with k = 8/bits codes per byte it holds k runs of kRunLen = bits consecutive
  // dims (the §1 "parts" layout); fp rows use the same dims so that a thread's
  // accumulators mean the same dims whatever the tile's format.
  static constexpr int kUnitBits = kHist ? kBits : 8;
  static constexpr int kRuns = 8 / kUnitBits;
  static constexpr int kRunLen = kUnitBits;
  static constexpr int kUnits = kDim / 8;
  static constexpr int kSlices = kThreads / kUnits;  // keys a PV pass handles in parallel
  static constexpr int kCodeBytes = kDim * kUnitBits / 8;
  // fp rows get 16 bytes of padding: the 2d-byte stride would put every row of a warp's
  // 16-byte loads in the same banks.
  static constexpr int kFpRowBytes = kDim * 2 + 16;
  static constexpr int kFpTileBytes = kTile * kFpRowBytes;
  // A history tile is 4 whole pages copied verbatim; G = 32 gives the longest rows.
  static constexpr int kQuantTileBytes = kHist ? kTile * (kCodeBytes + 4 * kDim / 32) : 0;
  // Only the BF16-only kernel stages fp tiles in shared memory. With a history, the fp keys
  // (sink and recent window: a few hundred of a chunk's keys at most) are read straight
  // from global memory, so the stages are sized for packed tiles (3 KB for INT2 at d 128
  // instead of 17 KB) and several CTAs fit on a SM.
  static constexpr int kStageBytes = ((kHist ? kQuantTileBytes : kFpTileBytes) + 15) / 16 * 16;
  // QK: the row is split into kQkParts parts and a thread takes kQkKeys keys of one part,
  // so each q value it reads from shared memory meets kQkKeys keys.
  static constexpr int kQkParts = kHist ? 4 : 2;
  static constexpr int kQkKeyThreads = kThreads / kQkParts;
  static constexpr int kQkKeys = kTile / kQkKeyThreads;
  static constexpr int kMaxQGroups = 4;  // d / G at most (G >= 32, d <= 128)

  // Shared memory: [kStages][K, V][kStageBytes] (also the final reduction buffer) | q
  // [kMaxGroup][d] | Σq per group [kMaxGroup][4] | partial scores [kQkParts][kMaxGroup][kTile]
  // | p [kTile][kMaxGroup] | m, l, alpha [kMaxGroup].
  static constexpr size_t kRedBytes = size_t(kWarps) * kMaxGroup * kDim * 4;
  static constexpr size_t kBufBytes =
      2 * kStages * size_t(kStageBytes) > kRedBytes ? 2 * kStages * size_t(kStageBytes) : kRedBytes;
  static constexpr size_t kQOff = kBufBytes;
  static constexpr size_t kQSumOff = kQOff + size_t(kMaxGroup) * kDim * 4;
  static constexpr size_t kPartOff = kQSumOff + size_t(kMaxGroup) * kMaxQGroups * 4;
  static constexpr size_t kPOff = kPartOff + size_t(kQkParts) * kMaxGroup * kTile * 4;
  static constexpr size_t kStatOff = kPOff + size_t(kTile) * kMaxGroup * 4;
  static constexpr size_t kSmemBytes = kStatOff + 3 * size_t(kMaxGroup) * 4;
  static_assert(kBufBytes % 16 == 0 && kQOff % 16 == 0 && kPartOff % 16 == 0, "16-byte aligned regions");
  static_assert(kQkKeyThreads % 32 == 0 && kTile % kQkKeyThreads == 0, "QK lane mapping");
  // Every part starts on a 4-byte word of codes, and (P = G·bits/8 >= 8) so does every group.
  static_assert(!kHist || (kCodeBytes / kQkParts) % 4 == 0, "QK part of a packed row");
  static_assert(kThreads % kUnits == 0 && kUnits <= 32 && 32 % kUnits == 0, "PV lane mapping");
};

// A run of keys of one format inside one 64-token page-aligned window: tokens
// base + [lo, hi). fp windows start at multiples of 64 (row r in fp page r / 16 at row
// r % 16), history windows at S + 64·i (one history page).
struct Tile {
  int base, lo, hi;
  bool hist;
};

// Walks the chunk [cs, ce) as sink-fp, history, recent-fp segments, in 64-key windows.
struct TileCursor {
  int a0, e0, a1, e1, a2, e2, sink;
  int seg = -1, base = 0;

  __device__ int seg_begin(int s) const { return s == 0 ? a0 : s == 1 ? a1 : a2; }
  __device__ int seg_end(int s) const { return s == 0 ? e0 : s == 1 ? e1 : e2; }

  __device__ bool next(Tile& t) {
    if (seg >= 0 && base + kTile < seg_end(seg)) {
      base += kTile;
    } else {
      do {
        ++seg;
      } while (seg < 3 && seg_begin(seg) >= seg_end(seg));
      if (seg >= 3) return false;
      const int origin = seg == 1 ? sink : 0;
      base = origin + (seg_begin(seg) - origin) / kTile * kTile;
    }
    t.base = base;
    t.lo = max(seg_begin(seg), base) - base;
    t.hi = min(seg_end(seg), base + kTile) - base;
    t.hist = seg == 1;
    return true;
  }
};

// Stands in for a row of a released fp page (which a correct caller never asks for): zeros,
// as the staged path's zero-filling copy gives.
__device__ __align__(16) uint8_t g_zero_fp_row[2 * 128];

// BF16 row of token tok (K or V pool) in global memory, for kernels that do not stage fp tiles.
template <int kDim>
__device__ __forceinline__ const uint8_t* fp_row_global(const DecodeAttentionParams& p, const uint16_t* pool, int b,
                                                        int kvh, int tok) {
  const int page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + tok / kDecodeFpBlockTokens];
  if (page < 0) return g_zero_fp_row;
  const int64_t row = (int64_t(page) * p.n_kv_heads + kvh) * kDecodeFpBlockTokens + tok % kDecodeFpBlockTokens;
  return reinterpret_cast<const uint8_t*>(pool) + row * (2 * kDim);
}

// Byte e (0..3) of w as a float, exactly: 0x4B0000ee is 2^23 + e, so one byte permute and
// one subtraction replace an int→float conversion (which runs at a quarter of the rate).
__device__ __forceinline__ float byte_to_float(uint32_t w, int e) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | unsigned(e))) - 8388608.0f;
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// fp16 (scale, zero) pair of a group → (s, −z·s), so that x̂ = (c − z)·s = fma(c, s, −z·s).
__device__ __forceinline__ float2 load_scale_zero(const uint8_t* p) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
  const float s = __half2float(__ushort_as_half(uint16_t(w & 0xffffu)));
  const float z = __half2float(__ushort_as_half(uint16_t(w >> 16)));
  return make_float2(s, -z * s);
}

// Issues the cp.async copies of 16-byte part `part` of token tok's BF16 K and V rows into
// offset dst of sk and sv (zeros for a released page).
template <class Geo>
__device__ __forceinline__ void fp_row_part_load(const DecodeAttentionParams& p, int b, int kvh, int tok, int part,
                                                 int dst, uint8_t* sk, uint8_t* sv) {
  const int page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + tok / kDecodeFpBlockTokens];
  const int64_t row = (int64_t(page) * p.n_kv_heads + kvh) * kDecodeFpBlockTokens + tok % kDecodeFpBlockTokens;
  const int64_t off = page >= 0 ? row * (Geo::kFpRowBytes - 16) + part * 16 : 0;
  cp_async16(sk + dst, reinterpret_cast<const uint8_t*>(p.fp_k) + off, page >= 0);
  cp_async16(sv + dst, reinterpret_cast<const uint8_t*>(p.fp_v) + off, page >= 0);
}

// Issues the cp.async copies of one tile's K and V rows into shared memory.
template <class Geo>
__device__ void tile_load(const DecodeAttentionParams& p, const Tile& t, int b, int kvh, int row_bytes, uint8_t* sk,
                          uint8_t* sv) {
  const int tid = threadIdx.x;
  if (!t.hist) {
    if constexpr (Geo::kHist) return;  // fp rows are read from global memory (see Geometry)
    constexpr int kParts = Geo::kFpRowBytes / 16 - 1;  // 16-byte parts of a 2d-byte row
    const int n = (t.hi - t.lo) * kParts;
    for (int c = tid; c < n; c += kThreads) {
      const int r = t.lo + c / kParts, part = c % kParts;
      fp_row_part_load<Geo>(p, b, kvh, t.base + r, part, r * Geo::kFpRowBytes + part * 16, sk, sv);
    }
    return;
  }
  // History: a page is kSlotRows·row_bytes contiguous bytes (a multiple of 16). Copy, per
  // page slot of the tile, the 16-byte parts covering rows [r0, r1) of that page.
  constexpr int kSlotRows = kDecodeHistBlockTokens;
  const int page_parts = kSlotRows * row_bytes / 16;
  const int n = (kTile / kSlotRows) * page_parts;
  const int64_t page_bytes = int64_t(kSlotRows) * row_bytes;
  for (int c = tid; c < n; c += kThreads) {
    const int slot = c / page_parts, part = c % page_parts;
    const int r0 = max(t.lo, slot * kSlotRows) - slot * kSlotRows;
    const int r1 = min(t.hi, slot * kSlotRows + kSlotRows) - slot * kSlotRows;
    if (r0 >= r1 || part < r0 * row_bytes / 16 || part >= (r1 * row_bytes + 15) / 16) continue;
    const int page_index = (t.base - p.sink) / kSlotRows + slot;
    const int page = p.hist_blocks[int64_t(b) * p.hist_blocks_stride + page_index];
    const int64_t off = page >= 0 ? (int64_t(page) * p.n_kv_heads + kvh) * page_bytes + part * 16 : 0;
    const int dst = slot * int(page_bytes) + part * 16;
    cp_async16(sk + dst, p.hist_k + off, page >= 0);
    cp_async16(sv + dst, p.hist_v + off, page >= 0);
  }
}

// Issues the cp.async copies of BF16 keys [k0, k0 + n) of a sequence's sink-and-recent run
// (key k is token k below hs = the sink's end, token he + k − hs after it) into rows 0..n−1
// of sk and sv. The split kernel's window CTAs take n <= kTile keys this way, all requested
// at once: read from global memory where they were used, as chains of dependent loads
// (page id, then rows, tile by tile), each round trip queued behind the history walk's
// bulk copies, 24 such CTAs took 26–41 µs for 128 keys at (1, 128K) and ended after every
// history CTA (H100, %globaltimer per CTA; an L2 prefetch of their pages did not help).
template <class Geo>
__device__ void window_load(const DecodeAttentionParams& p, int b, int kvh, int k0, int n, int hs, int he, uint8_t* sk,
                            uint8_t* sv) {
  constexpr int kParts = Geo::kFpRowBytes / 16 - 1;  // 16-byte parts of a 2d-byte row
  for (int c = int(threadIdx.x); c < n * kParts; c += kThreads) {
    const int r = c / kParts, part = c % kParts, key = k0 + r;
    fp_row_part_load<Geo>(p, b, kvh, key < hs ? key : he + (key - hs), part, r * Geo::kFpRowBytes + part * 16, sk, sv);
  }
}

// Partial scores q_h · k for kKeys keys over part `part` of kParts of their rows (the parts
// are summed in the softmax step). fp row: dims [part·d/kParts, (part+1)·d/kParts). Each q
// float4 read from shared memory meets all kKeys keys.
template <int kDim, int kMaxGroup, int kParts, int kKeys>
__device__ __forceinline__ void qk_fp(const uint8_t* const (&rows)[kKeys], int part, const float* sq,
                                      float (&sc)[kKeys][kMaxGroup]) {
  constexpr int kPartDims = kDim / kParts;
#pragma unroll
  for (int i = 0; i < kPartDims / 8; ++i) {
    float x[kKeys][8];
#pragma unroll
    for (int k = 0; k < kKeys; ++k) {
      const uint4 w = *reinterpret_cast<const uint4*>(rows[k] + part * kPartDims * 2 + 16 * i);
      x[k][0] = bf16_lo(w.x); x[k][1] = bf16_hi(w.x); x[k][2] = bf16_lo(w.y); x[k][3] = bf16_hi(w.y);
      x[k][4] = bf16_lo(w.z); x[k][5] = bf16_hi(w.z); x[k][6] = bf16_lo(w.w); x[k][7] = bf16_hi(w.w);
    }
    const int dim0 = part * kPartDims + 8 * i;
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      const float4 qa = *reinterpret_cast<const float4*>(sq + h * kDim + dim0);
      const float4 qb = *reinterpret_cast<const float4*>(sq + h * kDim + dim0 + 4);
#pragma unroll
      for (int k = 0; k < kKeys; ++k) {
        float a = sc[k][h];
        a = fmaf(qa.x, x[k][0], a); a = fmaf(qa.y, x[k][1], a); a = fmaf(qa.z, x[k][2], a); a = fmaf(qa.w, x[k][3], a);
        a = fmaf(qb.x, x[k][4], a); a = fmaf(qb.y, x[k][5], a); a = fmaf(qb.z, x[k][6], a); a = fmaf(qb.w, x[k][7], a);
        sc[k][h] = a;
      }
    }
  }
}

// Packed rows: code bytes [part·cb/kParts, (part+1)·cb/kParts), 4 at a time. Word at byte o
// of the codes lies in group g = o / P (P = G·bits/8 bytes per group) at offset j; its byte e
// holds dims g·G + j + e + s·P in bits [s·bits, (s+1)·bits): k runs of 4 consecutive dims,
// each meeting one float4 of q (shared by the kKeys keys).
// INT2/INT4, factored: q·x̂ over a group = s·(Σ q_i·c_i) − s·z·Σ q_i, so the inner loop is
// code × q only; Σq per (head, group) comes precomputed in sqsum [kMaxGroup][4], and the
// −s·z·Σq term is added by the thread whose part holds the group's first byte (j = 0; a group
// starts on a word). INT8 keeps x̂ = fma(c, s, −z·s) per element (its codes reach 255, so the
// two factored terms would cancel more).
template <int kBits, int kDim, int kMaxGroup, int kParts, int kKeys>
__device__ __forceinline__ void qk_quant(const uint8_t* const (&rows)[kKeys], int part, int group_size, int gb_log2,
                                         const float* sq, const float* sqsum, float (&sc)[kKeys][kMaxGroup]) {
  constexpr int kCodeBytes = kDim * kBits / 8;
  constexpr int kPartBytes = kCodeBytes / kParts;
  constexpr int kWords = kPartBytes / 4;
  constexpr int kRuns = 8 / kBits;
  constexpr bool kFactored = kBits != 8;
  constexpr uint32_t kMask = kBits == 2 ? 0x03030303u : kBits == 4 ? 0x0f0f0f0fu : 0xffffffffu;
  const int gb = 1 << gb_log2;
  float2 sz[kKeys];
  float t[kKeys][kMaxGroup];  // factored: Σ q·c of the current group
#pragma unroll
  for (int k = 0; k < kKeys; ++k) {
    sz[k] = make_float2(0.f, 0.f);
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) t[k][h] = 0.0f;
  }
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    const int o = part * kPartBytes + 4 * w;
    const int g = o >> gb_log2, j = o & (gb - 1);
    if (w == 0 || j == 0) {
      if constexpr (kFactored) {
        if (w != 0) {  // close the previous group
#pragma unroll
          for (int k = 0; k < kKeys; ++k)
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h) {
              sc[k][h] = fmaf(sz[k].x, t[k][h], sc[k][h]);
              t[k][h] = 0.0f;
            }
        }
      }
#pragma unroll
      for (int k = 0; k < kKeys; ++k) {
        sz[k] = load_scale_zero(rows[k] + kCodeBytes + 4 * g);  // (s, −z·s)
        if constexpr (kFactored) {
          if (j == 0) {
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h) sc[k][h] = fmaf(sz[k].y, sqsum[h * 4 + g], sc[k][h]);
          }
        }
      }
    }
    uint32_t word[kKeys];
#pragma unroll
    for (int k = 0; k < kKeys; ++k) word[k] = *reinterpret_cast<const uint32_t*>(rows[k] + o);
#pragma unroll
    for (int s = 0; s < kRuns; ++s) {
      float x[kKeys][4];
#pragma unroll
      for (int k = 0; k < kKeys; ++k) {
        const uint32_t v = (word[k] >> (s * kBits)) & kMask;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (kFactored)
            x[k][e] = byte_to_float(v, e);
          else
            x[k][e] = fmaf(byte_to_float(v, e), sz[k].x, sz[k].y);
        }
      }
      const int dim0 = g * group_size + j + s * gb;
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) {
        const float4 qv = *reinterpret_cast<const float4*>(sq + h * kDim + dim0);
#pragma unroll
        for (int k = 0; k < kKeys; ++k) {
          float& a = kFactored ? t[k][h] : sc[k][h];
          a = fmaf(qv.x, x[k][0], a); a = fmaf(qv.y, x[k][1], a); a = fmaf(qv.z, x[k][2], a); a = fmaf(qv.w, x[k][3], a);
        }
      }
    }
  }
  if constexpr (kFactored) {
#pragma unroll
    for (int k = 0; k < kKeys; ++k)
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) sc[k][h] = fmaf(sz[k].x, t[k][h], sc[k][h]);
  }
}

// The 8 values of this thread's PV unit in one V row (see Geometry): x[s·kRunLen + e] is
// dim unit_dim0 + s·P + e.
template <class Geo, int kBits>
__device__ __forceinline__ void pv_unit_quant(const uint8_t* row, int unit_byte, int g, float (&x)[8]) {
  constexpr uint32_t kMask = kBits == 2 ? 0x03030303u : kBits == 4 ? 0x0f0f0f0fu : 0xffffffffu;
  uint32_t wd[2] = {0u, 0u};
  if constexpr (kBits == 2) {
    wd[0] = *reinterpret_cast<const uint16_t*>(row + unit_byte);
  } else {
    wd[0] = *reinterpret_cast<const uint32_t*>(row + unit_byte);
    if constexpr (kBits == 8) wd[1] = *reinterpret_cast<const uint32_t*>(row + unit_byte + 4);
  }
  const float2 sz = load_scale_zero(row + Geo::kCodeBytes + 4 * g);
#pragma unroll
  for (int s = 0; s < Geo::kRuns; ++s)
#pragma unroll
    for (int e = 0; e < Geo::kRunLen; ++e) {
      const uint32_t v = (wd[e >> 2] >> (s * kBits)) & kMask;
      x[s * Geo::kRunLen + e] = fmaf(byte_to_float(v, e & 3), sz.x, sz.y);
    }
}

template <class Geo>
__device__ __forceinline__ void pv_unit_fp(const uint8_t* row, int unit_dim0, int run_stride, float (&x)[8]) {
#pragma unroll
  for (int s = 0; s < Geo::kRuns; ++s) {
    const uint8_t* src = row + (unit_dim0 + s * run_stride) * 2;
    float* dst = x + s * Geo::kRunLen;
    if constexpr (Geo::kRunLen == 2) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(src);
      dst[0] = bf16_lo(w); dst[1] = bf16_hi(w);
    } else if constexpr (Geo::kRunLen == 4) {
      const uint2 w = *reinterpret_cast<const uint2*>(src);
      dst[0] = bf16_lo(w.x); dst[1] = bf16_hi(w.x); dst[2] = bf16_lo(w.y); dst[3] = bf16_hi(w.y);
    } else {
      const uint4 w = *reinterpret_cast<const uint4*>(src);
      dst[0] = bf16_lo(w.x); dst[1] = bf16_hi(w.x); dst[2] = bf16_lo(w.y); dst[3] = bf16_hi(w.y);
      dst[4] = bf16_lo(w.z); dst[5] = bf16_hi(w.z); dst[6] = bf16_lo(w.w); dst[7] = bf16_hi(w.w);
    }
  }
}

// Body of the chunk kernels (kThreads threads, KV head kvh of sequence b): keys
// [chunk·chunk_keys, …) of the sequence, or with kWindowsOnly of its BF16 keys alone (sink,
// then recent window, counted without the history; chunk_keys <= kTile, staged in one
// go), with the partial written to `slot` of n_slots. gb_log2 = log2(G·bits/8), the bytes
// (= the run stride P in dims) of one group's codes; for bits = 0 it is log2(d). kBias:
// p.key_bias is added to each score (--k-bias-split).
template <int kBits, int kDim, int kMaxGroup, bool kWindowsOnly, bool kBias>
__device__ __forceinline__ void decode_chunk(const DecodeAttentionParams& p, int kvh, int b, int gb_log2, int chunk,
                                             int chunk_keys, int slot, int n_slots) {
  // Window CTAs hold BF16 keys only: one staged tile, with the BF16 unit mapping.
  using Geo = std::conditional_t<kWindowsOnly, Geometry<0, kDim, kMaxGroup, 1>, Geometry<kBits, kDim, kMaxGroup>>;
  if constexpr (kWindowsOnly) gb_log2 = kDim == 128 ? 7 : 6;
  extern __shared__ __align__(16) uint8_t smem[];
  float* sq = reinterpret_cast<float*>(smem + Geo::kQOff);       // [kMaxGroup][d], pre-scaled
  float* sqsum = reinterpret_cast<float*>(smem + Geo::kQSumOff); // [kMaxGroup][4] Σq per group
  float* spart = reinterpret_cast<float*>(smem + Geo::kPartOff); // [kQkParts][kMaxGroup][kTile]
  float* sp = reinterpret_cast<float*>(smem + Geo::kPOff);       // [kTile][kMaxGroup]
  float* sm = reinterpret_cast<float*>(smem + Geo::kStatOff);    // running max (log2 units)
  float* sl = sm + kMaxGroup;                                    // running sum
  float* salpha = sl + kMaxGroup;                                // rescale of this tile

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int t_len = p.seq_len[b];
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t head0 = int64_t(b) * p.n_heads + int64_t(kvh) * group;
  const int group_size = kBits == 0 ? kDim : p.group;
  const int row_bytes = kBits == 0 ? 0 : kDim * kBits / 8 + 4 * (kDim / group_size);  // §1 row
  const int hs = min(p.sink, t_len);
  int he = hs;
  if constexpr (kBits != 0) he = min(max(p.hist_end[b], hs), t_len);
  // The chunk's keys as the three segments sink [a0, e0), history [a1, e1), recent [a2, e2).
  const int i0 = chunk * chunk_keys;
  const int n_keys = kWindowsOnly ? hs + (t_len - he) : t_len;
  if (i0 >= n_keys) return write_empty_partial(p, head0, group, slot, n_slots);
  const int i1 = min(n_keys, i0 + chunk_keys);
  TileCursor cursor{i0, min(i1, hs), max(i0, hs), min(i1, he), max(i0, he), i1, p.sink};  // not for kWindowsOnly

  // The first tile's copies go out before anything else waits on memory: a window CTA's
  // whole chunk (one tile, staged at rows 0..n−1), else the chunk's first tile.
  Tile cur;
  bool have = true;  // the chunk holds at least one key
  if constexpr (kWindowsOnly) {
    cur = Tile{0, 0, i1 - i0, false};
    window_load<Geo>(p, b, kvh, i0, i1 - i0, hs, he, smem, smem + Geo::kStageBytes);
  } else {
    have = cursor.next(cur);
    tile_load<Geo>(p, cur, b, kvh, row_bytes, smem, smem + Geo::kStageBytes);
  }
  cp_async_commit();

  // q of the group's heads, times log2(e)/sqrt(d) so that scores are exp2 exponents.
  const float qscale = 1.4426950408889634f / sqrtf(float(kDim));
  const float* qb = p.q + (int64_t(b) * p.n_heads + int64_t(kvh) * group) * kDim;
  for (int i = tid; i < kMaxGroup * kDim; i += kThreads) sq[i] = i / kDim < group ? qb[i] * qscale : 0.0f;
  if (tid < kMaxGroup) {
    sm[tid] = -INFINITY;
    sl[tid] = 0.0f;
  }
  if constexpr (Geo::kHist && kBits != 8) {
    // Σq per (head, quantization group) for the factored INT2/INT4 scores; read after the
    // barrier at the top of the tile loop.
    __syncthreads();
    const int n_groups = kDim / group_size;
    for (int h = warp; h < kMaxGroup; h += kWarps)
      for (int g = 0; g < n_groups; ++g) {
        float v = 0.0f;
        for (int i = lane; i < group_size; i += 32) v += sq[h * kDim + g * group_size + i];
        v = warp_sum(v);
        if (lane == 0) sqsum[h * 4 + g] = v;
      }
  }

  // PV unit of this thread: 8 dims, the same in every tile (see Geometry).
  const int unit = tid % Geo::kUnits, slice = tid / Geo::kUnits;
  const int unit_byte = unit * Geo::kUnitBits;
  const int unit_g = unit_byte >> gb_log2;
  const int run_stride = 1 << gb_log2;
  const int unit_dim0 = unit_g * group_size + (unit_byte & (run_stride - 1));
  float acc[kMaxGroup][8];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;

  int stage = 0;
  while (have) {
    Tile nxt{};
    const bool have_next = !kWindowsOnly && cursor.next(nxt);
    cp_async_wait<0>();
    // The current tile is visible to all, and every thread is done with the other stage.
    __syncthreads();
    if (have_next) {
      uint8_t* nk = smem + size_t(2 * (stage ^ 1)) * Geo::kStageBytes;
      tile_load<Geo>(p, nxt, b, kvh, row_bytes, nk, nk + Geo::kStageBytes);
    }
    cp_async_commit();
    const uint8_t* sk = smem + size_t(2 * stage) * Geo::kStageBytes;
    const uint8_t* sv = sk + Geo::kStageBytes;

    // Scores: thread (part, r0) takes keys r0 + k·kQkKeyThreads (k < kQkKeys) over one part
    // of their rows. A warp lies in one part, so its q reads are broadcasts.
    {
      constexpr int kKeys = Geo::kQkKeys;
      const int r0 = tid % Geo::kQkKeyThreads, part = tid / Geo::kQkKeyThreads;
      bool valid[kKeys];
      bool any = false;
#pragma unroll
      for (int k = 0; k < kKeys; ++k) {
        const int r = r0 + k * Geo::kQkKeyThreads;
        valid[k] = r >= cur.lo && r < cur.hi;
        any = any || valid[k];
      }
      if (any) {
        float sc[kKeys][kMaxGroup];
#pragma unroll
        for (int k = 0; k < kKeys; ++k)
#pragma unroll
          for (int h = 0; h < kMaxGroup; ++h) sc[k][h] = 0.0f;
        const uint8_t* rows[kKeys];
        if constexpr (Geo::kHist) {
          // A key outside [lo, hi) computes on row lo (valid data) and is not stored.
          if (cur.hist) {
#pragma unroll
            for (int k = 0; k < kKeys; ++k) rows[k] = sk + (valid[k] ? r0 + k * Geo::kQkKeyThreads : cur.lo) * row_bytes;
            qk_quant<kBits, kDim, kMaxGroup, Geo::kQkParts, kKeys>(rows, part, group_size, gb_log2, sq, sqsum, sc);
          } else {
#pragma unroll
            for (int k = 0; k < kKeys; ++k)
              rows[k] = fp_row_global<kDim>(p, p.fp_k, b, kvh,
                                            cur.base + (valid[k] ? r0 + k * Geo::kQkKeyThreads : cur.lo));
            qk_fp<kDim, kMaxGroup, Geo::kQkParts, kKeys>(rows, part, sq, sc);
          }
        } else {
#pragma unroll
          for (int k = 0; k < kKeys; ++k)
            rows[k] = sk + (valid[k] ? r0 + k * Geo::kQkKeyThreads : cur.lo) * Geo::kFpRowBytes;
          qk_fp<kDim, kMaxGroup, Geo::kQkParts, kKeys>(rows, part, sq, sc);
        }
#pragma unroll
        for (int k = 0; k < kKeys; ++k)
          if (valid[k]) {
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h)
              spart[(part * kMaxGroup + h) * kTile + r0 + k * Geo::kQkKeyThreads] = sc[k][h];
          }
      }
    }
    __syncthreads();

    // Online softmax: warp w owns heads w, w + 4; lane owns keys lane, lane + 32.
    for (int h = warp; h < kMaxGroup; h += kWarps) {
      float s[2], pr[2];
      for (int k = 0; k < 2; ++k) {
        const int r = lane + 32 * k;
        float v = -INFINITY;
        if (h < group && r >= cur.lo && r < cur.hi) {
          v = spart[h * kTile + r];
#pragma unroll
          for (int q = 1; q < Geo::kQkParts; ++q) v += spart[(q * kMaxGroup + h) * kTile + r];
          if constexpr (kBias) {  // the key's token: a window CTA's row r is its BF16 key i0 + r
            const int key = i0 + r;
            const int tok = kWindowsOnly ? (key < hs ? key : he + (key - hs)) : cur.base + r;
            v += p.key_bias[(head0 + h) * p.key_bias_stride + tok];
          }
        }
        s[k] = v;
      }
      if (h < group) {
        const float m_old = sm[h];
        const float m_new = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
        pr[0] = exp2f(s[0] - m_new);
        pr[1] = exp2f(s[1] - m_new);
        const float sum = warp_sum(pr[0] + pr[1]);
        __syncwarp();  // every lane has read sm[h] before lane 0 writes it (compute-sanitizer racecheck)
        if (lane == 0) {
          const float alpha = exp2f(m_old - m_new);  // 0 on the first tile (m_old = −inf)
          salpha[h] = alpha;
          sl[h] = sl[h] * alpha + sum;
          sm[h] = m_new;
        }
      } else {  // padding heads of a group that is not a power of two
        pr[0] = pr[1] = 0.0f;
        if (lane == 0) salpha[h] = 1.0f;
      }
      sp[lane * kMaxGroup + h] = pr[0];
      sp[(lane + 32) * kMaxGroup + h] = pr[1];
    }
    __syncthreads();

    // Weighted sum of V: thread (unit, slice) takes keys lo + slice, lo + slice + kSlices, …
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      const float a = salpha[h];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] *= a;
    }
    for (int r = cur.lo + slice; r < cur.hi; r += Geo::kSlices) {
      float x[8];
      if constexpr (Geo::kHist) {
        if (cur.hist)
          pv_unit_quant<Geo, kBits>(sv + r * row_bytes, unit_byte, unit_g, x);
        else
          pv_unit_fp<Geo>(fp_row_global<kDim>(p, p.fp_v, b, kvh, cur.base + r), unit_dim0, run_stride, x);
      } else {
        pv_unit_fp<Geo>(sv + r * Geo::kFpRowBytes, unit_dim0, run_stride, x);
      }
      float pw[kMaxGroup];
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) pw[h] = sp[r * kMaxGroup + h];
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = fmaf(pw[h], x[i], acc[h][i]);
    }
    cur = nxt;
    have = have_next;
    stage ^= 1;
  }

  // Sum the slices: first those sharing a warp (shuffles), then the 4 warps (shared memory).
#pragma unroll
  for (int off = Geo::kUnits; off < 32; off *= 2)
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], off);
  __syncthreads();  // the stage buffers are free
  float* red = reinterpret_cast<float*>(smem);  // [kWarps][kMaxGroup][d]
  if (lane < Geo::kUnits) {
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h)
#pragma unroll
      for (int s = 0; s < Geo::kRuns; ++s)
#pragma unroll
        for (int e = 0; e < Geo::kRunLen; ++e)
          red[(warp * kMaxGroup + h) * kDim + unit_dim0 + s * run_stride + e] = acc[h][s * Geo::kRunLen + e];
  }
  __syncthreads();
  float2* part_ml = reinterpret_cast<float2*>(p.workspace);
  float* part_o = p.workspace + partial_o_offset(p.batch, p.n_heads, n_slots);
  for (int i = tid; i < group * kDim; i += kThreads) {
    const int h = i / kDim, x = i % kDim;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[(w * kMaxGroup + h) * kDim + x];
    part_o[((head0 + h) * n_slots + slot) * kDim + x] = v;
  }
  if (tid < group) part_ml[(head0 + tid) * n_slots + slot] = make_float2(sm[tid], sl[tid]);
}

// Resident CTAs per SM the register budget of a kernel with a history is sized for: its
// shared memory is small (< 64 KB), so registers set the occupancy — 5 CTAs (≤ 96
// registers) up to GQA 2, 4 (≤ 128) at GQA 4, 3 at GQA 8 (64 accumulators).
constexpr int hist_ctas_per_sm(int max_group) { return max_group <= 2 ? 5 : max_group <= 4 ? 4 : 3; }

// BF16 keys of the tensor-core split go in chunks of one tile (64 keys), each staged in one
// go by its own CTA (window_load): a few hundred keys per sequence, spread over CTAs that
// run beside the history walk.
constexpr int kWindowChunk = kTile;

// BF16-only cache (≈ 80 KB of shared memory, 2 CTAs per SM): the compiler's register choice.
template <int kDim, int kMaxGroup, bool kBias>
__global__ void __launch_bounds__(kThreads) decode_chunk_kernel_fp(const DecodeAttentionParams p, int gb_log2,
                                                                   int n_slots) {
  decode_chunk<0, kDim, kMaxGroup, false, kBias>(p, blockIdx.y, blockIdx.z, gb_log2, blockIdx.x, p.chunk_keys,
                                                 blockIdx.x, n_slots);
}

// Every key on the CUDA cores (G < d, or tensor_cores = false).
template <int kBits, int kDim, int kMaxGroup, bool kBias>
__global__ void __launch_bounds__(kThreads, hist_ctas_per_sm(kMaxGroup))
    decode_chunk_kernel_hist(const DecodeAttentionParams p, int gb_log2, int n_slots) {
  decode_chunk<kBits, kDim, kMaxGroup, false, kBias>(p, blockIdx.y, blockIdx.z, gb_log2, blockIdx.x, p.chunk_keys,
                                                     blockIdx.x, n_slots);
}

// INT2/INT4/INT8 with G = d, one launch so both kinds of CTA overlap: grid (KV head, sequence,
// z), z < the history's chunks walking a history chunk (tensor cores), the rest taking the
// BF16 keys (CUDA cores); slots per (sequence, head) are the windows' first, then the
// history's. The block scheduler hands out CTAs in index order (x fastest, z slowest), so
// every history CTA is placed before any window CTA and the short window CTAs fill in
// beside them (H100, against the windows first: (1, 32K) 7 % and (32, 32K) 5 % faster,
// other shapes within 3 %).
// The split kernel holds the history walk's fragments too (≈ 100+ registers): 4 CTAs per SM
// (3 at GQA 8), which is also what its shared memory allows.
constexpr int split_ctas_per_sm(int max_group) { return max_group <= 4 ? 4 : 3; }

// The history walk pairs slabs at GQA 3–4, where half of the MMA's 8 columns are padding
// (at GQA ≤ 2 pairing would fit too, but its registers spill at 128).
template <int kMaxGroup>
constexpr int kHistPair = kMaxGroup == 4 ? 2 : 1;

template <int kBits, int kDim, int kMaxGroup, bool kBias>
__global__ void __launch_bounds__(kThreads, split_ctas_per_sm(kMaxGroup))
    decode_split_kernel(const DecodeAttentionParams p, int gb_log2, int n_window_slots, int n_slots) {
  const int kvh = blockIdx.x, b = blockIdx.y, n_hist_slots = n_slots - n_window_slots;
  if (int(blockIdx.z) < n_hist_slots) {
    const int chunk = blockIdx.z;
    decode_history_mma<kBits, kDim, kHistPair<kMaxGroup>, kBias>(p, kvh, b, chunk, n_window_slots + chunk, n_slots);
  } else {
    const int w = int(blockIdx.z) - n_hist_slots;
    decode_chunk<kBits, kDim, kMaxGroup, true, kBias>(p, kvh, b, gb_log2, w, kWindowChunk, w, n_slots);
  }
  // The merge kernel may be scheduled as this grid's last CTAs finish (see launch): its
  // launch then overlaps their tail instead of following it. At the start of each CTA
  // instead, the merge's CTAs sat waiting beside the walk for its whole length, and a
  // decode step in a CUDA graph at (1, 128K) took 3 % longer (H100).
  allow_dependent_launch();
}

// grid (n_heads, B), kMergeThreads threads: out = Σ_c 2^(m_c − M)·o_c / Σ_c 2^(m_c − M)·l_c
// over the slots that saw keys (l > 0; an empty slot has m = −inf, l = 0 and no o). A long
// sequence has a hundred slots or more, so they are spread over the warps (each lane holds
// d/32 dims of a slot's o, one vector load) and the warps' sums are added at the end.
constexpr int kMergeThreads = 256;

template <int kDim>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const DecodeAttentionParams p, int n_slots) {
  wait_for_prior_grid();  // the partials (launched as a programmatic dependent of the split)
  allow_dependent_launch();  // the output projection is scheduled meanwhile
  constexpr int kWarpsM = kMergeThreads / 32, kVec = kDim / 32;
  using Vec = std::conditional_t<kVec == 4, float4, float2>;
  __shared__ float s_red[kWarpsM];
  __shared__ float s_o[kWarpsM][kDim];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t head = int64_t(b) * p.n_heads + h;
  const float2* ml = reinterpret_cast<const float2*>(p.workspace) + head * n_slots;
  const float* po = p.workspace + partial_o_offset(p.batch, p.n_heads, n_slots) + head * n_slots * kDim;
  const auto block_reduce = [&](float v, bool is_max) {
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // s_red is free
    if (lane == 0) s_red[warp] = v;
    __syncthreads();
    float r = s_red[0];
#pragma unroll
    for (int w = 1; w < kWarpsM; ++w) r = is_max ? fmaxf(r, s_red[w]) : r + s_red[w];
    return r;
  };
  float m = -INFINITY;
  for (int c = tid; c < n_slots; c += kMergeThreads) {
    const float2 v = ml[c];
    if (v.y > 0.0f) m = fmaxf(m, v.x);
  }
  m = block_reduce(m, true);
  float l = 0.0f, o[kVec] = {};
  // Each slot's o is loaded whether or not the slot saw keys (an empty slot's o was never
  // written and is dropped by a select, not a branch), so the loads of several slots are in
  // flight together instead of each waiting for its (m, l).
#pragma unroll 4
  for (int c = warp; c < n_slots; c += kWarpsM) {
    const float2 v = ml[c];
    const Vec x = *reinterpret_cast<const Vec*>(po + int64_t(c) * kDim + lane * kVec);
    const bool seen = v.y > 0.0f;
    const float w = seen ? exp2f(v.x - m) : 0.0f;
    if (lane == 0 && seen) l = fmaf(w, v.y, l);
    const float* xs = reinterpret_cast<const float*>(&x);
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[i] = seen ? fmaf(w, xs[i], o[i]) : o[i];
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) s_o[warp][lane * kVec + i] = o[i];
  l = block_reduce(l, false);  // its barriers also publish s_o
  for (int x = tid; x < kDim; x += kMergeThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsM; ++w) sum += s_o[w][x];
    p.out[head * kDim + x] = l > 0.0f ? sum / l : 0.0f;
  }
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("decode_attention: " + what); }


int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The tensor-core split: INT2/INT4/INT8 with one quantization group per row.
bool uses_split(const DecodeAttentionParams& p) {
  return p.tensor_cores && (p.bits == 2 || p.bits == 4 || p.bits == 8) && p.group == p.head_dim;
}

// Partial slots per (sequence, head): chunks of all keys, or with the split the BF16-key
// chunks followed by the history chunks.
struct SlotCounts {
  int64_t window = 0, total = 0;
};
// The split's window pieces per sequence (its BF16 keys, max_window_keys or every key when
// that is 0, in kWindowChunk pieces) and its history rows per sequence, as the grid and the
// default chunk size them.
int64_t split_window_slots(const DecodeAttentionParams& p) {
  return ceil_div(p.max_window_keys > 0 ? std::min(p.max_window_keys, p.max_seq_len) : p.max_seq_len, kWindowChunk);
}
int64_t split_history_rows(const DecodeAttentionParams& p) { return std::max<int64_t>(p.max_seq_len - p.sink, 0); }

SlotCounts slot_counts(const DecodeAttentionParams& p) {
  if (!uses_split(p)) return {0, ceil_div(p.max_seq_len, p.chunk_keys)};
  const int64_t window = split_window_slots(p);
  return {window, window + ceil_div(split_history_rows(p), p.chunk_keys)};
}

void check_params(const DecodeAttentionParams& p) {
  const auto need = [](bool ok, const std::string& what) {
    if (!ok) fail(what);
  };
  need(p.batch >= 0 && p.batch <= 65535, "batch " + std::to_string(p.batch) + " outside [0, 65535]");
  // (The history walk's page offsets are n_kv_heads · page bytes in 32 bits.)
  need(p.n_kv_heads <= 65535, "n_kv_heads " + std::to_string(p.n_kv_heads) + " above 65535");
  const std::string shape = kv_shape_problem(p.head_dim, p.n_heads, p.n_kv_heads, p.bits, p.group, kDecodeMaxGroup,
                                             p.hist_end, p.hist_k, p.hist_v, p.hist_blocks);
  need(shape.empty(), shape);
  need(p.sink >= 0, "sink " + std::to_string(p.sink) + " < 0");
  need(p.max_window_keys >= 0, "max_window_keys " + std::to_string(p.max_window_keys) + " < 0");
  need(p.chunk_keys >= kTile && p.chunk_keys % kTile == 0,
       "chunk_keys " + std::to_string(p.chunk_keys) + " is not a positive multiple of 64");
  need(p.max_seq_len >= 0 && p.max_seq_len <= INT32_MAX - p.chunk_keys, "max_seq_len out of range");
  // The split kernel's chunks and window pieces of one sequence are its grid's z (≤ 65535).
  need(!uses_split(p) || slot_counts(p).total <= 65535,
       "max_seq_len " + std::to_string(p.max_seq_len) + " needs more than 65535 chunks of " + std::to_string(p.chunk_keys) +
           " keys");
  need(p.q && p.seq_len && p.fp_k && p.fp_v && p.fp_blocks && p.out, "a required pointer is null");
  need(aligned16(p.fp_k) && aligned16(p.fp_v), "fp pools must be 16-byte aligned");
  need(p.max_seq_len == 0 || p.workspace, "workspace is null");
  need(!p.key_bias || p.key_bias_stride >= p.max_seq_len,
       "key_bias_stride " + std::to_string(p.key_bias_stride) + " < max_seq_len " + std::to_string(p.max_seq_len));
}

// Above 48 KB a kernel must opt in to dynamic shared memory (once per process and kernel:
// the static lives in each kKernel's own instantiation).
template <auto kKernel>
void allow_smem(size_t bytes) {
  static const cudaError_t attr = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  check_cuda(attr, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

// Dynamic shared memory of the split kernel: the history walk's (MmaGeometry) or the window
// CTAs' (one staged BF16 tile), whichever is larger; the walk's, for every instantiation.
template <int kBits, int kDim, int kMaxGroup>
constexpr size_t split_smem_bytes() {
  constexpr size_t kWalk = MmaGeometry<kBits, kDim>::kSmemBytes, kWindow = Geometry<0, kDim, kMaxGroup, 1>::kSmemBytes;
  static_assert(kWindow <= kWalk, "the window CTAs' tile would cost the walk occupancy");
  return kWalk;
}

// CTAs of the tensor-core split kernel one SM holds (registers and shared memory limit it);
// 0 when the runtime cannot tell.
// (The kernel without the key bias: the chunk size does not depend on it.)
template <int kBits, int kDim, int kMaxGroup>
int split_ctas_per_sm() {
  constexpr size_t kSmem = split_smem_bytes<kBits, kDim, kMaxGroup>();
  constexpr auto kKernel = decode_split_kernel<kBits, kDim, kMaxGroup, false>;
  allow_smem<kKernel>(kSmem);  // else > 48 KB reads as 0 CTAs
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kThreads, kSmem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

template <int kBits, int kDim, int kMaxGroup, bool kBias>
void launch(const DecodeAttentionParams& p, cudaStream_t stream) {
  using Geo = Geometry<kBits, kDim, kMaxGroup>;
  const SlotCounts slots = slot_counts(p);
  const int n_slots = int(slots.total);
  if (n_slots > 0) {
    const int gb_log2 = log2_exact(kBits == 0 ? kDim : p.group * kBits / 8);
    const dim3 grid(unsigned(n_slots), unsigned(p.n_kv_heads), unsigned(p.batch));
    if constexpr (kBits != 0) {
      if (uses_split(p)) {
        constexpr size_t kSmem = split_smem_bytes<kBits, kDim, kMaxGroup>();
        allow_smem<decode_split_kernel<kBits, kDim, kMaxGroup, kBias>>(kSmem);
        const dim3 split_grid(unsigned(p.n_kv_heads), unsigned(p.batch), unsigned(n_slots));
        decode_split_kernel<kBits, kDim, kMaxGroup, kBias>
            <<<split_grid, kThreads, kSmem, stream>>>(p, gb_log2, int(slots.window), n_slots);
        check_cuda(cudaGetLastError(), "decode_split_kernel launch");
      }
    }
    if (!uses_split(p)) {
      if constexpr (kBits == 0) {
        allow_smem<decode_chunk_kernel_fp<kDim, kMaxGroup, kBias>>(Geo::kSmemBytes);
        decode_chunk_kernel_fp<kDim, kMaxGroup, kBias><<<grid, kThreads, Geo::kSmemBytes, stream>>>(p, gb_log2, n_slots);
      } else {
        allow_smem<decode_chunk_kernel_hist<kBits, kDim, kMaxGroup, kBias>>(Geo::kSmemBytes);
        decode_chunk_kernel_hist<kBits, kDim, kMaxGroup, kBias>
            <<<grid, kThreads, Geo::kSmemBytes, stream>>>(p, gb_log2, n_slots);
      }
      check_cuda(cudaGetLastError(), "decode_chunk_kernel launch");
    }
  }
  // A programmatic dependent launch: the merge is scheduled while the kernel before it
  // drains (H100, launched on their own: INT2 at (1, 8K) 0.0156 -> 0.0139 ms, (1, 32K)
  // 0.0205 -> 0.0187, (1, 128K) 0.0434 -> 0.0407, whole waves within 1 %; in a decode
  // step's CUDA graph, where launches cost little anyway, no change).
  detail::launch_dependent(decode_merge_kernel<kDim>, dim3(unsigned(p.n_heads), unsigned(p.batch)),
                           dim3(kMergeThreads), 0, stream, "decode_merge_kernel", p, n_slots);
}

// The key bias is a template flag, so that kernels without it stay as they were.
template <int kBits, int kDim, int kMaxGroup>
void dispatch_bias(const DecodeAttentionParams& p, cudaStream_t stream) {
  if (p.key_bias) return launch<kBits, kDim, kMaxGroup, true>(p, stream);
  return launch<kBits, kDim, kMaxGroup, false>(p, stream);
}

template <int kBits, int kDim>
void dispatch_group(const DecodeAttentionParams& p, cudaStream_t stream) {
  const int group = p.n_heads / p.n_kv_heads;  // padded up to a power of two
  if (group == 1) return dispatch_bias<kBits, kDim, 1>(p, stream);
  if (group == 2) return dispatch_bias<kBits, kDim, 2>(p, stream);
  if (group <= 4) return dispatch_bias<kBits, kDim, 4>(p, stream);
  return dispatch_bias<kBits, kDim, 8>(p, stream);
}

template <int kBits>
void dispatch_dim(const DecodeAttentionParams& p, cudaStream_t stream) {
  if (p.head_dim == 64) return dispatch_group<kBits, 64>(p, stream);
  return dispatch_group<kBits, 128>(p, stream);
}

template <int kBits, int kDim>
int split_ctas_per_sm(int group) {
  if (group == 1) return split_ctas_per_sm<kBits, kDim, 1>();
  if (group == 2) return split_ctas_per_sm<kBits, kDim, 2>();
  if (group <= 4) return split_ctas_per_sm<kBits, kDim, 4>();
  return split_ctas_per_sm<kBits, kDim, 8>();
}

int split_ctas_per_sm(const DecodeAttentionParams& p) {
  const int group = p.n_heads / p.n_kv_heads;
  if (p.bits == 2) return p.head_dim == 64 ? split_ctas_per_sm<2, 64>(group) : split_ctas_per_sm<2, 128>(group);
  if (p.bits == 8) return p.head_dim == 64 ? split_ctas_per_sm<8, 64>(group) : split_ctas_per_sm<8, 128>(group);
  return p.head_dim == 64 ? split_ctas_per_sm<4, 64>(group) : split_ctas_per_sm<4, 128>(group);
}

}  // namespace

int decode_attention_default_chunk(int batch, int n_kv_heads, int64_t max_seq_len, int n_sm) {
  // About 8 CTAs per SM: 2 waves of the quantized kernels (3-5 resident CTAs per SM), 4 of
  // the BF16-only one (2 resident); chunks of 128 keys at least (2 tiles, so the copy of one
  // overlaps the other) and at most 8192.
  const int64_t target = 8 * int64_t(n_sm > 0 ? n_sm : 132);
  int chunk = 128;
  while (chunk < 8192 && int64_t(batch) * n_kv_heads * ((max_seq_len + chunk - 1) / chunk) > target) chunk *= 2;
  return chunk;
}

int decode_attention_default_chunk(const DecodeAttentionParams& p, int n_sm) {
  if (!uses_split(p)) return decode_attention_default_chunk(p.batch, p.n_kv_heads, p.max_seq_len, n_sm);
  // Chunks of 16 steps of each warp's walk (INT2 4096 rows, INT4 and INT8 2048): long enough
  // that a CTA's fixed costs (q setup, the copy pipeline filling, its partial and the merge's read
  // of it) are a small part of it. Shorter, halving, only while the history CTAs would
  // number fewer than 1.75 per SM (a few sequences: (1, 32K) takes 1024, (1, 8K) 512, the
  // floor). Twice as long where that grid is about a wave or more than two (large
  // batches), or where the 16-step grid would spill a little past one wave (its second
  // wave mostly empty) and the longer one does not. Measured on the H100 (GQA 4, d 128;
  // docs/cuda.md), INT2, each against the next best: (1, 128K) 4096 0.0383 ms (3072:
  // 0.0404, 3968: 0.039, 5120: 0.042), (1, 32K) 1024 0.0185 (512: 0.020, 2048: 0.019),
  // (1, 8K) 512 0.0127 (256: 0.0133, 1024: 0.0138), (8, 32K) 4096 0.0687 (2048: 0.0711,
  // 8192: 0.081), (32, 32K) 8192 0.230 (4096: 0.2325), (64, 8K) 8192 0.143 (4096: 0.146);
  // INT4: (1, 128K) 4096 0.062 (2048, 1.3 waves: 0.0724), (8, 32K) 2048 0.116 (1024:
  // 0.1175, 4672: 0.135), (32, 32K) 4096 0.408 (2048: 0.417, 8192: 0.422), (64, 8K) 4096
  // 0.232 (2048: 0.2375, 8128: 0.248). The BF16-window CTAs are not counted: they are short.
  const int64_t sms = n_sm > 0 ? n_sm : 132, target = 16 * sms;
  const int per_sm = n_sm > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 ? split_ctas_per_sm(p) : 0;
  const int64_t heads = int64_t(p.batch) * p.n_kv_heads;
  const int64_t hist = split_history_rows(p);
  const int64_t capacity = int64_t(per_sm) * n_sm;  // resident CTAs: one wave
  const auto hist_ctas = [&](int64_t c) { return heads * ceil_div(hist, c); };
  const auto enough = [&](int64_t c) { return hist_ctas(c) * 4 >= 7 * sms; };
  const auto whole_waves = [&](int64_t c) {  // at most one wave, or two and more
    return hist_ctas(c) <= capacity || hist_ctas(c) * 10 >= 19 * capacity;
  };
  const int step_rows = p.bits == 2   ? MmaGeometry<2, 128>::kStepRows
                        : p.bits == 8 ? MmaGeometry<8, 128>::kStepRows
                                      : MmaGeometry<4, 128>::kStepRows;
  const int base = 16 * MmaGeometry<2, 128>::kWarps * step_rows;
  int chunk = base;
  while (chunk > 512 && !enough(chunk)) chunk /= 2;
  if (capacity > 0 && chunk == base && enough(2 * base) && whole_waves(2 * base) &&
      (hist_ctas(2 * base) * 10 >= 9 * capacity || !whole_waves(base)))
    chunk = 2 * base;
  while (chunk < 65536 && heads * ceil_div(p.max_seq_len, chunk) > target) chunk *= 2;
  return chunk;
}

size_t decode_attention_workspace_bytes(const DecodeAttentionParams& p) {
  if (p.chunk_keys <= 0) fail("chunk_keys must be set before sizing the workspace");
  const int64_t n_slots = slot_counts(p).total;
  const int64_t o_floats = int64_t(p.batch) * p.n_heads * n_slots * p.head_dim;
  return size_t(partial_o_offset(p.batch, p.n_heads, n_slots) + o_floats) * sizeof(float);
}

void decode_attention(const DecodeAttentionParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.batch == 0) return;
  switch (p.bits) {
    case 0: return dispatch_dim<0>(p, stream);
    case 2: return dispatch_dim<2>(p, stream);
    case 4: return dispatch_dim<4>(p, stream);
    default: return dispatch_dim<8>(p, stream);
  }
}

}  // namespace oscar::cuda
