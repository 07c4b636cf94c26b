// The INT2/INT4/INT8 history part of decode attention on tensor cores, for one group per row
// (G = d, the OSCAR default). One CTA takes one chunk of one sequence's history for one KV
// head and writes its online-softmax partial (m, l, o) for every query head of the GQA
// group. Internal to decode_attention.cu; design in docs/cuda.md ("Tensor-core history").
//
// The arithmetic runs as MMAs on the raw codes, with each row's scale and zero factored
// out, so dequantization costs no multiply:
//   scores  S^T[token][head] = C_K[token][:] · q'[:][head]      then  s·(…) − s·z·Σq'
//   values  O^T[dim][head]   = C_V^T[dim][:] · (p·s_V)[:][head] then  − Σ_t p·s_V·z_V
// Values (and INT4 scores) are mma.m16n8k16 (f16 inputs, f32 accumulation): a code c placed
// in the low bits of an f16 is the subnormal c·2^-24, exactly, so unpacking is one AND per
// two codes; the 2^24 is put back in f32. INT2 and INT8 scores are integer mma.m16n8k32:
// codes as u8 (INT2: one AND per four codes; INT8: the code words as they are), against q'
// as an integer of 14 (INT2) or 16 (INT8) bits in two bytes (two MMAs), summed exactly in
// s32. q' is rounded (to f16, or to that integer, after scaling by a power of two per head),
// p·s_V to f16: those are the only roundings (docs/cuda.md gives the bounds the test checks).
#pragma once
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/device_primitives.cuh"

namespace oscar::cuda::detail {

// Compile-time geometry: kBits 2, 4 or 8, kDim 64 or 128, G = kDim.
template <int kBits, int kDim>
struct MmaGeometry {
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kCodeBytes = kDim * kBits / 8;  // = P, the parts stride (G = d)
  static constexpr int kRowBytes = kCodeBytes + 4;     // codes, fp16 scale, fp16 zero
  static constexpr int kPageRows = kDecodeHistBlockTokens;  // rows of a history page (64)
  static constexpr int kSlabRows = 16;                       // rows of one MMA tile (m16)
  static constexpr int kSlabBytes = kSlabRows * kRowBytes;   // a multiple of 16
  static constexpr int kCodesPerByte = 8 / kBits;
  static constexpr uint32_t kPairMask = ((1u << kBits) - 1u) * 0x00010001u;
  static constexpr int kHalf2PerWord = 16 / kBits;  // code pairs k < this at bits k·bits (+16)
  // Unpacking by AND alone: pair k is taken where it lies when it fits the 10 mantissa bits
  // of an f16 (then it reads as c·2^(pos − 24)), else from the word shifted right by kHighShift.
  // The power of two 2^pos is undone outside the MMA: in q for scores, in the output for values.
  static constexpr int kHighShift = kBits == 2 ? 10 : 8;
  __host__ __device__ static constexpr bool high(int k) { return kBits * k + kBits > 10; }
  __host__ __device__ static constexpr int pos(int k) { return high(k) ? kBits * k - kHighShift : kBits * k; }
  static constexpr int kBlocks = kDim / 16;         // k-blocks of QK = m-tiles of PV
  // QK: thread (g, t) of a warp reads bytes [t·P/4, (t+1)·P/4) of rows g and g + 8.
  static constexpr int kQkWords = kCodeBytes / 16;
  // PV: it reads bytes [g·P/8, (g+1)·P/8) of rows 2t, 2t+1, 2t+8, 2t+9 as 16-bit halves.
  static constexpr int kPvHalves = kCodeBytes / 16;
  // Each warp walks its own steps of kSlabsPerStep slabs (64 rows for INT2, 32 for INT4 and
  // INT8: one page or half of one, contiguous, so a step's K rows and its V rows are one bulk
  // copy each) through kStages buffers. INT8's steps are 8.4 KB: with 2 stages three CTAs fit
  // an SM (H100, d 128: against 3 stages and two CTAs, 0-3.5 % faster at five of the six
  // benchmark shapes and 1 % slower at (8, 32K); 4 stages and one CTA, 0.4-19 % slower).
  static constexpr int kSlabsPerStep = kBits == 2 ? 4 : 2;
  static constexpr int kStepRows = kSlabsPerStep * kSlabRows;
  static constexpr int kStepRowBytes = kStepRows * kRowBytes;   // K (or V) bytes of a step
  static constexpr int kStages = kBits == 4 ? 4 : kBits == 8 ? 2 : 3;
  static constexpr int kStepBytes = 2 * kStepRowBytes;  // K rows, then V rows
  static constexpr int kWarpBytes = kStages * kStepBytes;
  static constexpr int kMaxGroup = 8;  // the n of m16n8k16: query heads of a GQA group
  static constexpr int kIdSteps = 32;  // steps whose page ids a warp loads at once (one per lane)
  // The stage buffers also hold the warps' outputs [warp][head][d] for the merge after the walk.
  static constexpr int kRedBytes = kWarps * kMaxGroup * kDim * 4;
  static constexpr int kBufBytes = kWarps * kWarpBytes > kRedBytes ? kWarps * kWarpBytes : kRedBytes;
  static constexpr int kWarpStatOff = kBufBytes;  // m, l [warp][8]
  static constexpr int kBarOff = kWarpStatOff + 2 * kWarps * kMaxGroup * 4;  // mbarriers [warp][stage]
  static constexpr int kSmemBytes = kBarOff + kWarps * kStages * 8;
  static_assert(kBarOff % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kStepRowBytes % 16 == 0, "steps are copied in 16-byte parts");
  static_assert(kPageRows % kStepRows == 0, "a step lies in one page");
  static_assert(kQkWords >= 1 && kPvHalves >= 1, "a thread's share of a row is at least one word / half");
  static_assert(kQkWords * kHalf2PerWord == 2 * kBlocks, "QK: a thread's codes of a row fill its A fragments");
  static_assert(kPvHalves * kHalf2PerWord == 2 * kBlocks, "PV: a thread's codes of a token pair fill its A fragments");
  // Scores as integer MMAs (INT2, INT8): A register r (r < kBlocks, two per m16n8k32) holds 4
  // code bytes of word qk_word(r) of the thread's share of a row.
  static constexpr bool kIntScores = kBits != 4;
  __host__ __device__ static constexpr int qk_word(int r) { return kBits == 2 ? r / 4 : r; }
  static_assert(!kIntScores || qk_word(kBlocks - 1) == kQkWords - 1, "QK: the integer A registers use every word");
};

// Pair k of a word (w_hi = w >> kHighShift), as f16 subnormals c·2^(pos(k) − 24).
template <class M>
__device__ __forceinline__ uint32_t code_pair(uint32_t w, uint32_t w_hi, int k) {
  return (M::high(k) ? w_hi : w) & (M::kPairMask << M::pos(k));
}

// Dim of the low (hi = 0) or high (hi = 1) f16 of the i-th half2 a QK thread t unpacks from
// its words: byte j of the codes holds dims j + s·P in its bit fields s (the §1 parts layout).
template <class M>
__device__ __forceinline__ int qk_dim(int t, int i, int hi) {
  const int word = i / M::kHalf2PerWord, k = i % M::kHalf2PerWord;
  const int byte = t * (M::kCodeBytes / 4) + 4 * word + k / M::kCodesPerByte + 2 * hi;
  return byte + (k % M::kCodesPerByte) * M::kCodeBytes;
}
// INT2 and INT8 scores run as integer MMAs (m16n8k32, codes u8, q s8/u8). INT2: A register
// r of a QK thread holds, in its 4 bytes, the codes at bit field s = r % 4 of 4 consecutive
// code bytes of word r / 4, masked where they lie (s = 1, 3: the value is 4c) or from the
// word shifted right by 4 (s = 2, 3), so one AND gives 4 codes. INT8: register r is word r,
// 4 codes as they are. Dim of byte i of register r of thread t:
template <class M>
__device__ __forceinline__ int qk8_dim(int t, int r, int i) {
  const int byte = t * (M::kCodeBytes / 4) + 4 * M::qk_word(r) + i;
  return M::kCodesPerByte == 1 ? byte : byte + (r % 4) * M::kCodeBytes;
}
template <class M>
__device__ __forceinline__ uint32_t code_quad(uint32_t w, uint32_t w_hi, int r) {
  if constexpr (M::kCodesPerByte == 1) return w;
  return ((r % 4) < 2 ? w : w_hi) & ((r % 2) ? 0x0C0C0C0Cu : 0x03030303u);
}

// Dim of PV output row g (i even) or g + 8 (i odd) of m-tile i / 2 for lane group g.
template <class M>
__device__ __forceinline__ int pv_dim(int g, int i) {
  const int half = i / M::kHalf2PerWord, k = i % M::kHalf2PerWord;
  const int byte = g * (M::kCodeBytes / 8) + 2 * half + k / M::kCodesPerByte;
  return byte + (k % M::kCodesPerByte) * M::kCodeBytes;
}

// A step's scores (sc[j][e]) and which of its rows lie in the chunk, for kGroups slab groups.
template <int kGroups>
struct StepScores {
  float sc[kGroups][4];
  bool valid[kGroups][2];
};

__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// C += A·B on integers: A 16×32 u8 codes, B 32×8 s8 (the high byte of q) or u8 (its low byte).
__device__ __forceinline__ void mma_u8s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_u8u8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Transposes the 8×8 f16 matrix held one row-pair per thread (the mma C/A fragment layout).
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float half_lo(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w & 0xffffu))); }
__device__ __forceinline__ float half_hi(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w >> 16))); }
__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t lds16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// The split-KV workspace: (m, l) float pairs [B·n_heads][n_slots], then the partial outputs
// [B·n_heads][n_slots][d] from the next 16-byte boundary (the merge reads them as vectors).
__host__ __device__ inline int64_t partial_o_offset(int64_t batch, int64_t n_heads, int64_t n_slots) {
  return (2 * batch * n_heads * n_slots + 3) / 4 * 4;
}

// Stands in for a released history page (a correct caller never asks for one): zeros, as
// many as the longest step copies (d = 128: INT8's 32 rows).
constexpr int kZeroPageBytes = MmaGeometry<8, 128>::kStepRowBytes;
static_assert(kZeroPageBytes >= MmaGeometry<2, 128>::kStepRowBytes && kZeroPageBytes >= MmaGeometry<4, 128>::kStepRowBytes,
              "the zero page covers every step");
__device__ __align__(16) uint8_t g_zero_page[kZeroPageBytes];

// Writes "no keys" (m = −inf, l = 0) for the group's heads; the merge skips such slots.
__device__ __forceinline__ void write_empty_partial(const DecodeAttentionParams& p, int64_t head0, int group,
                                                    int slot, int n_slots) {
  if (int(threadIdx.x) < group)
    reinterpret_cast<float2*>(p.workspace)[(head0 + threadIdx.x) * n_slots + slot] = make_float2(-INFINITY, 0.0f);
}

// History rows [chunk·chunk_keys, …) of sequence b, KV head kvh (row r is token S + r);
// partial written to `slot` of n_slots.
// kPair = 2 (GQA ≤ 4 only) processes slabs in pairs, the second against q' in columns 4–7.
// kBias: p.key_bias (f32, log2 units) is added to each score (--k-bias-split).
template <int kBits, int kDim, int kPair, bool kBias>
__device__ void decode_history_mma(const DecodeAttentionParams& p, int kvh, int b, int chunk, int slot, int n_slots) {
  using M = MmaGeometry<kBits, kDim>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t head0 = int64_t(b) * p.n_heads + int64_t(kvh) * group;
  const int t_len = p.seq_len[b];
  const int hs = min(p.sink, t_len);
  const int n_rows = min(max(p.hist_end[b], hs), t_len) - hs;
  const int r0 = chunk * p.chunk_keys, r1 = min(n_rows, r0 + p.chunk_keys);
  if (r0 >= r1) return write_empty_partial(p, head0, group, slot, n_slots);

  // Warp w takes the chunk's steps w, w + 4, … (step j: rows r0 + j·kStepRows, …) and keeps
  // its own online-softmax state. Nothing below needs another warp until the end, so the
  // prologue has no barrier: each warp starts its copies as soon as its page ids arrive and
  // sets up q while they fly.
  const int n_chunk_steps = (r1 - r0 + M::kStepRows - 1) / M::kStepRows;
  const int n_steps = n_chunk_steps > warp ? (n_chunk_steps - warp + M::kWarps - 1) / M::kWarps : 0;
  const auto step_row = [&](int step) { return r0 + (step * M::kWarps + warp) * M::kStepRows; };
  uint8_t* wbuf = smem + warp * M::kWarpBytes;
  const int32_t* pages = p.hist_blocks + int64_t(b) * p.hist_blocks_stride;
  // Page ids come in blocks of 32 steps, lane i holding the page of step i of the block,
  // loaded a whole block ahead of their copies: the loads wait in DRAM queues as long as
  // the copies do, and a step's compute is shorter than that.
  const auto load_ids = [&](int block) {
    const int step = block * M::kIdSteps + lane;
    return step < n_steps ? pages[step_row(step) / M::kPageRows] : -1;
  };
  int ids = load_ids(0), ids_next = load_ids(1);
  // A step's rows start at the same offset in the K and the V pool: its page's, plus this
  // head's rows of the page, plus the step's place in the page, which is the same for every
  // step of a warp (chunks start on a page, and a warp's steps lie kWarps steps apart).
  constexpr int kKvPageBytes = M::kPageRows * M::kRowBytes;
  const int pool_page_bytes = p.n_kv_heads * kKvPageBytes;  // < 2^31: n_kv_heads is checked
  const int warp_off = kvh * kKvPageBytes + (step_row(0) % M::kPageRows) * M::kRowBytes;
  static_assert((M::kWarps * M::kStepRows) % M::kPageRows == 0, "each warp's steps sit at one place in their pages");

  // q' = q·log2(e)/√d·2^-e_h, rounded to f16 with max|q'| in [2^14, 2^15) (INT4) or to an
  // integer with max|q'| in [2^12, 2^13) (INT2) or [2^14, 2^15) (INT8) (kInt: the byte
  // layout of the integer MMAs, qk8_dim, where qv[r][i / 2][i % 2] is byte i of register r),
  // and Σq' per head. Thread (g, t) holds the dims of head g that its B fragments need (a
  // quarter of the row: the 4 lanes of a quad hold all of it), loaded now and used after the
  // first copies start.
  constexpr bool kInt = M::kIntScores;
  const float qscale = 1.4426950408889634f / sqrtf(float(kDim));
  const float* qg = p.q + (head0 + g) * kDim;
  float qv[M::kBlocks][2][2];
#pragma unroll
  for (int kb = 0; kb < M::kBlocks; ++kb)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi)
        qv[kb][r][hi] = g < group ? qg[kInt ? qk8_dim<M>(t, kb, 2 * r + hi) : qk_dim<M>(t, 2 * kb + r, hi)] : 0.0f;

  // A step's K rows and its V rows are two bulk copies by the TMA unit, issued by lane 0 after
  // it arms the stage's barrier with their bytes; all lanes wait on its phase. The
  // whole step is copied even where it runs past the chunk: its page holds those rows (they
  // may be unwritten, and are masked).
  static_assert(M::kStepRowBytes <= kZeroPageBytes, "a released page reads as a step of zeros");
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + M::kBarOff) + warp * M::kStages;
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < M::kStages; ++s) mbar_init(bars + s, 1);
    mbar_init_fence();
  }
  __syncwarp();
  // Steps are issued in order, each once, into stage `stage` (the caller's count of step
  // modulo kStages); the first of a block moves the id blocks along. Lane 0 arms the
  // stage's barrier with both copies' bytes and issues them (K rows, then V rows).
  const auto issue = [&](int step, int stage) {
    if (step % M::kIdSteps == 0 && step > 0) {
      ids = ids_next;
      ids_next = load_ids(step / M::kIdSteps + 1);
    }
    const int page = __shfl_sync(0xffffffffu, ids, step % M::kIdSteps);
    if (lane == 0) {
      uint8_t* dst = wbuf + stage * M::kStepBytes;
      uint64_t* bar = bars + stage;
      const int64_t off = int64_t(page) * pool_page_bytes + warp_off;
      mbar_arrive_expect(bar, unsigned(M::kStepBytes));
      bulk_copy_to_smem(dst, page >= 0 ? p.hist_k + off : g_zero_page, M::kStepRowBytes, bar);
      bulk_copy_to_smem(dst + M::kStepRowBytes, page >= 0 ? p.hist_v + off : g_zero_page, M::kStepRowBytes, bar);
    }
  };
#pragma unroll
  for (int s = 0; s < M::kStages - 1; ++s)
    if (s < n_steps) issue(s, s);

  // The exponent and Σq' of head g: over this thread's dims, then the quad's.
  float mx = 0.0f;
#pragma unroll
  for (int kb = 0; kb < M::kBlocks; ++kb)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        qv[kb][r][hi] *= qscale;
        mx = fmaxf(mx, fabsf(qv[kb][r][hi]));
      }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  int ex = 0;
  frexpf(mx, &ex);  // mx < 2^ex
  // f16: max|q'| in [2^14, 2^15), headroom for 2^-pos; INT2: [2^12, 2^13), so that 4q' fits
  // the 16 bits of a high s8 and a low u8 byte; INT8: [2^14, 2^15), q' itself in those bytes.
  constexpr bool kQuadQ = kBits == 2;  // INT2 registers hold c or 4c: q' is taken 4q' or q'
  const int e = mx > 0.0f ? ex - (kQuadQ ? 13 : 15) : 0;
  // B fragments of q' (k = dims in the QK order, n = head g). f16: the power of two 2^pos
  // each A register's codes carry is undone here (exact: q' is f16 already), qf[kb][0 | 1]
  // the two registers of k-block kb. Integers: qf[r][0 | 1] the high (s8) and low (u8)
  // bytes of 4q' where register r holds codes c (INT2, r % 4 even), of q' where it holds 4c
  // (INT2, r % 4 odd) or c (INT8).
  uint32_t qf[M::kBlocks][2];
  float qsum = 0.0f;
#pragma unroll
  for (int kb = 0; kb < M::kBlocks; ++kb) {
    if constexpr (kInt) {
      constexpr float kQMax = kQuadQ ? 8191.0f : 32767.0f;
      uint32_t hi8 = 0, lo8 = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int qi = int(fminf(fmaxf(rintf(ldexpf(qv[kb][i / 2][i % 2], -e)), -kQMax - 1.0f), kQMax));
        qsum += float(qi);
        const int q4 = kQuadQ && kb % 2 == 0 ? 4 * qi : qi;
        hi8 |= uint32_t((q4 >> 8) & 0xff) << (8 * i);
        lo8 |= uint32_t(q4 & 0xff) << (8 * i);
      }
      qf[kb][0] = hi8;
      qf[kb][1] = lo8;
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float undo = ldexpf(1.0f, -M::pos((2 * kb + r) % M::kHalf2PerWord));
        const float lo = __half2float(__float2half_rn(ldexpf(qv[kb][r][0], -e)));
        const float hi = __half2float(__float2half_rn(ldexpf(qv[kb][r][1], -e)));
        qsum += lo + hi;
        qf[kb][r] = pack_half2(lo * undo, hi * undo);
      }
    }
  }
  qsum += __shfl_xor_sync(0xffffffffu, qsum, 1);
  qsum += __shfl_xor_sync(0xffffffffu, qsum, 2);
  // With pairing, lane groups g >= 4 (padding at GQA <= 4) take a copy of head g - 4's q',
  // so each slab's product holds the group's scores twice: in columns 0-3 and again in
  // 4-7. Slab 2j's are kept from columns 0-3 (lanes t = 0, 1) and slab 2j + 1's from
  // columns 4-7 (t = 2, 3), so every step of the softmax works on real heads.
  if constexpr (kPair == 2) {
#pragma unroll
    for (int kb = 0; kb < M::kBlocks; ++kb)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t up = __shfl_up_sync(0xffffffffu, qf[kb][r], 16);  // from lane group g - 4
        if (g >= 4) qf[kb][r] = up;
      }
  }
  // This thread's slab within a pair (ls) and its heads hb, hb + 1 in C fragments.
  const int ls = kPair == 2 ? t >> 1 : 0;
  const int hb = kPair == 2 ? 2 * (t & 1) : 2 * t;
  // score = (s·Σq'c − s·z·Σq')·2^e = (s·C)·qa − (s·z)·qz for this thread's heads hb, hb + 1,
  // whose sums and exponents live in quads hb and hb + 1; the MMA's C is Σq'c·2^-24 (f16),
  // 4·Σq'c (INT2) or Σq'c (INT8).
  const float qinv = ldexpf(1.0f, e);
  float qa[2], qz[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int src = 4 * (hb + hh);
    const float inv = __shfl_sync(0xffffffffu, qinv, src), sum = __shfl_sync(0xffffffffu, qsum, src);
    qa[hh] = inv * (kInt ? (kQuadQ ? 0.25f : 1.0f) : 16777216.0f);
    qz[hh] = sum * inv;
  }

  // Running state for heads hb, hb + 1: max m (log2 units), this thread's share of l and of
  // Σ p·s_V·z_V, and O^T fragments (m-tile mt: rows g, g+8 × columns 2t, 2t+1; with
  // pairing, columns 4–7 gather slab 2j + 1's share of heads 0–3, added at the end).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, z_run[2] = {0.0f, 0.0f};
  float acc[M::kBlocks][4];
#pragma unroll
  for (int mt = 0; mt < M::kBlocks; ++mt)
#pragma unroll
    for (int e4 = 0; e4 < 4; ++e4) acc[mt][e4] = 0.0f;

  constexpr int kGroups = M::kSlabsPerStep / kPair;  // slab pairs (or single slabs) per step
  // A step is two pieces: its scores (qk), then its softmax and P·V (softmax_pv). Scores:
  // sc[j][e], e = (row g | g+8) × (head hb | hb+1) of slab kPair·j + ls; a step whose rows
  // all lie in the chunk (all but a warp's last) skips the masking.
  const auto qk = [&](int step, int stage, auto full_tag, StepScores<kGroups>& out) {
    auto& sc = out.sc;
    auto& valid = out.valid;
    constexpr bool kFull = decltype(full_tag)::value;
    const uint8_t* kbuf = wbuf + stage * M::kStepBytes;
    const int row_base = step_row(step);
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      // The key bias of this thread's rows g, g + 8 of its slab and heads hb, hb + 1
      // (token S + row), loaded before the MMAs so that the loads overlap them.
      [[maybe_unused]] float kbias[2][2] = {};
      if constexpr (kBias) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int r = row_base + (kPair * j + ls) * M::kSlabRows + g + 8 * rr;
#pragma unroll
          for (int hh = 0; hh < 2; ++hh)
            if ((kFull || r < r1) && hb + hh < group)
              kbias[rr][hh] = p.key_bias[(head0 + hb + hh) * p.key_bias_stride + p.sink + r];
        }
      }
      // Two accumulators halve the chain of dependent MMAs: one per slab of a pair, or
      // alternate k-blocks of a single slab (integers: the high and low bytes of q').
      int ci[kPair][2][4] = {};  // integers: per slab, the sums against the high and low bytes of q'
      float c2[2][4] = {};       // f16
#pragma unroll
      for (int sl = 0; sl < kPair; ++sl) {
        const uint8_t* kp = kbuf + (kPair * j + sl) * M::kSlabBytes;
        // The thread's code words of rows g and g + 8, and each shifted right to bring the
        // fields the masks cannot take in place within reach.
        constexpr int kShift = kInt ? 4 : M::kHighShift;  // (INT8 uses no shifted words)
        uint32_t wa[M::kQkWords], wb[M::kQkWords], wa_hi[M::kQkWords], wb_hi[M::kQkWords];
#pragma unroll
        for (int w = 0; w < M::kQkWords; ++w) {
          wa[w] = lds32(kp + g * M::kRowBytes + t * (M::kCodeBytes / 4) + 4 * w);
          wb[w] = lds32(kp + (g + 8) * M::kRowBytes + t * (M::kCodeBytes / 4) + 4 * w);
          wa_hi[w] = wa[w] >> kShift;
          wb_hi[w] = wb[w] >> kShift;
        }
        if constexpr (kInt) {
#pragma unroll
          for (int kb = 0; kb < M::kBlocks / 2; ++kb) {
            const int r0 = 2 * kb, r1 = 2 * kb + 1, w0 = M::qk_word(r0), w1 = M::qk_word(r1);
            const uint32_t a0 = code_quad<M>(wa[w0], wa_hi[w0], r0), a1 = code_quad<M>(wb[w0], wb_hi[w0], r0);
            const uint32_t a2 = code_quad<M>(wa[w1], wa_hi[w1], r1), a3 = code_quad<M>(wb[w1], wb_hi[w1], r1);
            mma_u8s8(ci[sl][0], a0, a1, a2, a3, qf[r0][0], qf[r1][0]);
            mma_u8u8(ci[sl][1], a0, a1, a2, a3, qf[r0][1], qf[r1][1]);
          }
        } else {
#pragma unroll
          for (int kb = 0; kb < M::kBlocks; ++kb) {
            const int i0 = 2 * kb, i1 = 2 * kb + 1;
            const int w0 = i0 / M::kHalf2PerWord, k0 = i0 % M::kHalf2PerWord;
            const int w1 = i1 / M::kHalf2PerWord, k1 = i1 % M::kHalf2PerWord;
            mma_16816(c2[kPair == 2 ? sl : kb & 1], code_pair<M>(wa[w0], wa_hi[w0], k0),
                      code_pair<M>(wb[w0], wb_hi[w0], k0), code_pair<M>(wa[w1], wa_hi[w1], k1),
                      code_pair<M>(wb[w1], wb_hi[w1], k1), qf[kb][0], qf[kb][1]);
          }
        }
      }
      float c[4];
#pragma unroll
      for (int e4 = 0; e4 < 4; ++e4) {
        if constexpr (kInt) {
          const int hi = kPair == 2 && ls ? ci[kPair - 1][0][e4] : ci[0][0][e4];
          const int lo = kPair == 2 && ls ? ci[kPair - 1][1][e4] : ci[0][1][e4];
          c[e4] = float(hi * 256 + lo);
        } else {
          c[e4] = kPair == 2 ? (ls ? c2[1][e4] : c2[0][e4]) : c2[0][e4] + c2[1][e4];
        }
      }
      const int slab = kPair * j + ls;
      const uint8_t* kp = kbuf + slab * M::kSlabBytes;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = g + 8 * rr;
        const int r = row_base + slab * M::kSlabRows + row;
        valid[j][rr] = kFull || r < r1;  // r >= r0: chunks start on a page
        const uint32_t sz = lds32(kp + row * M::kRowBytes + M::kCodeBytes);
        const float s = half_lo(sz), zs = s * half_hi(sz);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float v = fmaf(s * c[2 * rr + hh], qa[hh], -zs * qz[hh]);
          if constexpr (kBias) v += kbias[rr][hh];  // (+ 0 is no identity in IEEE: kept out of the plain walk)
          sc[j][2 * rr + hh] = valid[j][rr] ? v : -INFINITY;
        }
      }
    }

  };
  const auto softmax_pv = [&](int stage, auto full_tag, const StepScores<kGroups>& in) {
    const auto& sc = in.sc;
    const auto& valid = in.valid;
    constexpr bool kFull = decltype(full_tag)::value;
    const uint8_t* vbuf = wbuf + stage * M::kStepBytes + M::kStepRowBytes;
    // Online softmax over the step, per head: max across the lane groups (and the two
    // slabs of a pair, held by lanes t and t ^ 2).
    float alpha[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kGroups; ++j) mx = fmaxf(mx, fmaxf(sc[j][hh], sc[j][2 + hh]));
      if constexpr (kPair == 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m_run[hh], mx);
      alpha[hh] = m_run[hh] == m_new ? 1.0f : fast_exp2(m_run[hh] - m_new);  // 0 from −inf
      m_run[hh] = m_new;
      l_run[hh] *= alpha[hh];
      z_run[hh] *= alpha[hh];
    }
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int mt = 0; mt < M::kBlocks; ++mt) {
        acc[mt][0] *= alpha[0];
        acc[mt][1] *= alpha[1];
        acc[mt][2] *= alpha[0];
        acc[mt][3] *= alpha[1];
      }
    }

#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      // P'^T B fragments: p·s_V rounded to f16, transposed from (token, column) to
      // (column, token). With pairing, lane groups g < 4 then hold slab 2j's weights and
      // g >= 4 slab 2j + 1's; each slab's MMA takes its own half, zeros in the other.
      const uint8_t* vp_mine = vbuf + (kPair * j + ls) * M::kSlabBytes;
      uint32_t pr[2];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = g + 8 * rr;
        const uint32_t sz = lds32(vp_mine + row * M::kRowBytes + M::kCodeBytes);
        const float s = half_lo(sz), z = half_hi(sz);
        float pw[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float pe = (kFull || valid[j][rr]) ? fast_exp2(sc[j][2 * rr + hh] - m_run[hh]) : 0.0f;
          l_run[hh] += pe;
          pw[hh] = (kFull || valid[j][rr]) ? pe * s : 0.0f;
        }
        pr[rr] = pack_half2(pw[0], pw[1]);
        if (kFull || valid[j][rr]) {
          z_run[0] = fmaf(half_lo(pr[rr]), z, z_run[0]);
          z_run[1] = fmaf(half_hi(pr[rr]), z, z_run[1]);
        }
      }
      const uint32_t bt0 = transpose8x8(pr[0]), bt1 = transpose8x8(pr[1]);
#pragma unroll
      for (int sl = 0; sl < kPair; ++sl) {
        const uint8_t* vp = vbuf + (kPair * j + sl) * M::kSlabBytes;
        const bool mine = kPair == 1 || (g >= 4) == (sl == 1);
        const uint32_t b0 = mine ? bt0 : 0u, b1 = mine ? bt1 : 0u;
        // C_V^T A fragments: codes of dims (g-th share of the row) × tokens (2t, 2t+1 | 2t+8, 2t+9).
        uint32_t x[2][M::kPvHalves], x_hi[2][M::kPvHalves];  // [token pair][half]: (token 2t·, 2t·+1)
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          const uint8_t* ra = vp + (2 * t + 8 * pair) * M::kRowBytes + g * (M::kCodeBytes / 8);
          const uint8_t* rb = ra + M::kRowBytes;
          if constexpr (M::kPvHalves == 1) {
            x[pair][0] = lds16(ra) | (lds16(rb) << 16);
          } else {
#pragma unroll
            for (int w = 0; w < M::kPvHalves / 2; ++w) {
              const uint32_t a = lds32(ra + 4 * w), bw = lds32(rb + 4 * w);
              x[pair][2 * w] = __byte_perm(a, bw, 0x5410);
              x[pair][2 * w + 1] = __byte_perm(a, bw, 0x7632);
            }
          }
        }
#pragma unroll
        for (int pair = 0; pair < 2; ++pair)
#pragma unroll
          for (int hf = 0; hf < M::kPvHalves; ++hf) x_hi[pair][hf] = x[pair][hf] >> M::kHighShift;
#pragma unroll
        for (int mt = 0; mt < M::kBlocks; ++mt) {
          const int i0 = 2 * mt, i1 = 2 * mt + 1;
          const int h0 = i0 / M::kHalf2PerWord, k0 = i0 % M::kHalf2PerWord;
          const int h1 = i1 / M::kHalf2PerWord, k1 = i1 % M::kHalf2PerWord;
          mma_16816(acc[mt], code_pair<M>(x[0][h0], x_hi[0][h0], k0), code_pair<M>(x[0][h1], x_hi[0][h1], k1),
                    code_pair<M>(x[1][h0], x_hi[1][h0], k0), code_pair<M>(x[1][h1], x_hi[1][h1], k1), b0, b1);
        }
      }
    }
  };
  const auto is_full = [&](int step) { return step_row(step) + M::kStepRows <= r1; };
  // Stages and barrier parities are counted along, not divided out of the step number.
  const auto next_stage = [](int stage) { return stage + 1 == M::kStages ? 0 : stage + 1; };
  const auto wait_stage = [&](int stage, unsigned parity) { mbar_wait(bars + stage, parity); };
  int issue_stage = (M::kStages - 1) % M::kStages;  // stage of step kStages − 1, the next issued
  // Calls f with std::true_type when `full`, else std::false_type: the masking is a
  // compile-time choice, each branch one block of code.
  const auto with_full = [](bool full, auto&& f) {
    if (full)
      f(std::true_type{});
    else
      f(std::false_type{});
  };
  int stage = 0;
  unsigned parity = 0u;
  for (int step = 0; step < n_steps; ++step) {
    if (step + M::kStages - 1 < n_steps) issue(step + M::kStages - 1, issue_stage);
    issue_stage = next_stage(issue_stage);
    wait_stage(stage, parity);
    StepScores<kGroups> cur;
    with_full(is_full(step), [&](auto full) {
      qk(step, stage, full, cur);
      softmax_pv(stage, full, cur);
    });
    stage = next_stage(stage);
    if (stage == 0) parity ^= 1u;
    __syncwarp();  // every lane is done with this stage before it is refilled
  }

  // This warp's totals over its lane groups (l also over the two slabs of a pair: z stays
  // per column, as it is subtracted there), then the CTA's: the 4 warps merged in shared memory.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
    for (int off = 4; off < 32; off *= 2) {
      l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], off);
      z_run[hh] += __shfl_xor_sync(0xffffffffu, z_run[hh], off);
    }
    if constexpr (kPair == 2) l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], 2);
  }
  __syncthreads();  // all warps are done with the stage buffers
  float* red = reinterpret_cast<float*>(smem);  // [warp][column][d]
  float* wm = reinterpret_cast<float*>(smem + M::kWarpStatOff);
  float* wl = wm + M::kWarps * M::kMaxGroup;
#pragma unroll
  for (int mt = 0; mt < M::kBlocks; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int i = 2 * mt + rr;
      const int dim = pv_dim<M>(g, i);
      const float unscale = ldexpf(1.0f, 24 - M::pos(i % M::kHalf2PerWord));  // codes were c·2^(pos − 24)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        red[(warp * M::kMaxGroup + 2 * t + hh) * kDim + dim] = acc[mt][2 * rr + hh] * unscale - z_run[hh];
    }
  if (g == 0 && (kPair == 1 || t < 2)) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      wm[warp * M::kMaxGroup + hb + hh] = m_run[hh];
      wl[warp * M::kMaxGroup + hb + hh] = l_run[hh];
    }
  }
  __syncthreads();
  float2* part_ml = reinterpret_cast<float2*>(p.workspace);
  float* part_o = p.workspace + partial_o_offset(p.batch, p.n_heads, n_slots);
  for (int i = tid; i < group * kDim; i += M::kThreads) {
    const int h = i / kDim, x = i % kDim;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < M::kWarps; ++w) m = fmaxf(m, wm[w * M::kMaxGroup + h]);
    float o = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < M::kWarps; ++w) {
      const float mw = wm[w * M::kMaxGroup + h];
      const float f = mw == -INFINITY ? 0.0f : exp2f(mw - m);
      float ow = red[(w * M::kMaxGroup + h) * kDim + x];
      if constexpr (kPair == 2) ow += red[(w * M::kMaxGroup + h + 4) * kDim + x];  // slab 2j + 1's share
      o = fmaf(f, ow, o);
      l = fmaf(f, wl[w * M::kMaxGroup + h], l);
    }
    part_o[((head0 + h) * n_slots + slot) * kDim + x] = o;
    if (x == 0) part_ml[(head0 + h) * n_slots + slot] = make_float2(m, l);
  }
}

}  // namespace oscar::cuda::detail
