#include "oscar/engine/cuda/device_weight_loader.h"

#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "oscar/core/clock.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/cuda/weight_convert.h"
#include "oscar/engine/cuda/device_model_loader.h"
#include "oscar/model/rotation_absorb.h"
#include "oscar/ops/rope.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and we fault pages in as we copy
#endif

namespace oscar {
namespace {

// 64 MiB a chunk: large enough that a copy runs at the bus's pace, small enough that the
// two pinned buffers and their device twins stay a rounding error beside the model.
constexpr uint64_t k_chunk_bytes = 64ull << 20;

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("--device cuda: {}: {}", what, cudaGetErrorString(e));
}

cuda::StoredType stored_type(GgmlType t, const std::string& name) {
  switch (t) {
    case GgmlType::f32: return cuda::StoredType::f32;
    case GgmlType::f16: return cuda::StoredType::f16;
    case GgmlType::bf16: return cuda::StoredType::bf16;
    case GgmlType::q4_0: return cuda::StoredType::q4_0;
    case GgmlType::q4_1: return cuda::StoredType::q4_1;
    case GgmlType::q5_0: return cuda::StoredType::q5_0;
    case GgmlType::q5_1: return cuda::StoredType::q5_1;
    case GgmlType::q8_0: return cuda::StoredType::q8_0;
    case GgmlType::q4_k: return cuda::StoredType::q4_k;
    case GgmlType::q5_k: return cuda::StoredType::q5_k;
    case GgmlType::q6_k: return cuda::StoredType::q6_k;
    default: fail("--device cuda: tensor '{}' is {}, which the device cannot convert to BF16", name, ggml_type_name(t));
  }
}

// The process's read-only file mappings (/proc/self/maps: a path and no 'w'): only their
// pages may be dropped after a copy. MADV_DONTNEED on anonymous memory would zero it.
std::vector<std::pair<uintptr_t, uintptr_t>> read_only_file_maps() {
  std::vector<std::pair<uintptr_t, uintptr_t>> maps;
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, path;
    unsigned long inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode) || inode == 0 || perms.size() < 2 || perms[1] == 'w')
      continue;
    const size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    maps.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16), std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return maps;
}

uintptr_t page_size() {
  static const uintptr_t p = uintptr_t(sysconf(_SC_PAGESIZE));
  return p;
}

// The whole pages inside [p, p + n).
std::pair<uintptr_t, uintptr_t> inner_pages(const void* p, size_t n) {
  const uintptr_t ps = page_size(), lo = (uintptr_t(p) + ps - 1) & ~(ps - 1), hi = (uintptr_t(p) + n) & ~(ps - 1);
  return {lo, std::max(lo, hi)};
}

}  // namespace

struct FileWeightLoader::Staging {
  void* host[2] = {nullptr, nullptr};  // pinned
  void* dev[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the chunk that used buffer b has been consumed
};

FileWeightLoader::FileWeightLoader(const ModelWeights& w, std::vector<std::vector<float>> rot_v)
    : w_(w), rot_v_(std::move(rot_v)), staging_(std::make_unique<Staging>()), file_maps_(read_only_file_maps()) {
  const int d = w.config.head_dim;
  for (size_t l = 0; l < rot_v_.size(); ++l) {
    float* r = nullptr;
    if (!rot_v_[l].empty()) {
      if (rot_v_[l].size() != size_t(d) * size_t(d))
        fail("--device cuda: layer {}'s R_V has {} values, head_dim² is {}", l, rot_v_[l].size(), d * d);
      check(cudaMalloc(&r, rot_v_[l].size() * sizeof(float)), "allocating R_V");
      check(cudaMemcpy(r, rot_v_[l].data(), rot_v_[l].size() * sizeof(float), cudaMemcpyHostToDevice), "uploading R_V");
    }
    rot_v_dev_.push_back(r);
  }
  for (int b = 0; b < 2; ++b) {
    check(cudaHostAlloc(&staging_->host[b], k_chunk_bytes, cudaHostAllocDefault), "allocating pinned staging memory");
    check(cudaMalloc(&staging_->dev[b], k_chunk_bytes), "allocating device staging memory");
    check(cudaEventCreateWithFlags(&staging_->done[b], cudaEventDisableTiming), "creating staging events");
  }
}

FileWeightLoader::~FileWeightLoader() {
  for (int b = 0; b < 2; ++b) {
    if (staging_->done[b]) {
      cudaEventSynchronize(staging_->done[b]);
      cudaEventDestroy(staging_->done[b]);
    }
    if (staging_->host[b]) cudaFreeHost(staging_->host[b]);
    if (staging_->dev[b]) cudaFree(staging_->dev[b]);
  }
  if (scratch_) cudaFree(scratch_);
  for (float* r : rot_v_dev_)
    if (r) cudaFree(r);
}

float* FileWeightLoader::absorb_scratch(size_t n) const {
  if (n > scratch_elems_) {
    if (scratch_) {
      check(cudaDeviceSynchronize(), "waiting for the previous absorption");
      cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_elems_ = 0;
    }
    check(cudaMalloc(&scratch_, n * sizeof(float)), "allocating the R_V absorption scratch");
    scratch_elems_ = n;
  }
  return scratch_;
}

template <class Sink>
void FileWeightLoader::stream_bytes(const uint8_t* src, uint64_t bytes, int block_elems, int block_bytes,
                                    cudaStream_t stream, const Sink& sink) const {
  const uint64_t chunk = k_chunk_bytes / uint64_t(block_bytes) * uint64_t(block_bytes);
  const bool file_backed = std::any_of(file_maps_.begin(), file_maps_.end(), [&](const auto& m) {
    return m.first <= uintptr_t(src) && uintptr_t(src) + bytes <= m.second;
  });
  for (uint64_t off = 0, k = 0; off < bytes; off += chunk, ++k) {
    const uint64_t n = std::min(chunk, bytes - off);
    const int b = int(k & 1);
    check(cudaEventSynchronize(staging_->done[b]), "waiting for a staging buffer");
    auto* host = static_cast<uint8_t*>(staging_->host[b]);
    default_pool().parallel_for(int64_t(n), 4 << 20, [&](int64_t lo, int64_t hi) {
      if (file_backed) {  // one call maps the piece's pages instead of a fault per 64 KB
        const auto [p0, p1] = inner_pages(src + off + uint64_t(lo), size_t(hi - lo));
        if (p1 > p0) madvise(reinterpret_cast<void*>(p0), p1 - p0, MADV_POPULATE_READ);
      }
      std::memcpy(host + lo, src + off + uint64_t(lo), size_t(hi - lo));
      if (file_backed) {  // the page cache keeps them; this process need not
        const auto [p0, p1] = inner_pages(src + off + uint64_t(lo), size_t(hi - lo));
        if (p1 > p0) madvise(reinterpret_cast<void*>(p0), p1 - p0, MADV_DONTNEED);
      }
    });
    bytes_read_ += int64_t(n);
    check(cudaMemcpyAsync(staging_->dev[b], host, n, cudaMemcpyHostToDevice, stream), "copying weights to the device");
    sink(static_cast<const void*>(staging_->dev[b]), int64_t(off / uint64_t(block_bytes)) * block_elems,
         int64_t(n / uint64_t(block_bytes)) * block_elems);
    check(cudaEventRecord(staging_->done[b], stream), "recording a staging event");
  }
}

void FileWeightLoader::load(const cuda::WeightTarget& t, cudaStream_t stream) const {
  using cuda::WeightKind;
  const ModelConfig& c = w_.config;
  const LayerWeights* l = t.layer >= 0 && t.layer < int(w_.layers.size()) ? &w_.layers[size_t(t.layer)] : nullptr;
  if (t.layer >= 0 && !l) fail("--device cuda: the model has no layer {} ({})", t.layer, t.name);
  if (t.f32) {  // norms and biases: small f32 vectors on the host
    const std::vector<float>* v = nullptr;
    switch (t.kind) {
      case WeightKind::output_norm: v = &w_.output_norm; break;
      case WeightKind::attn_norm: v = &l->attn_norm; break;
      case WeightKind::ffn_norm: v = &l->ffn_norm; break;
      case WeightKind::bq: v = &l->bq; break;
      case WeightKind::bk: v = &l->bk; break;
      case WeightKind::bv: v = &l->bv; break;
      case WeightKind::q_norm: v = &l->q_norm; break;
      case WeightKind::k_norm: v = &l->k_norm; break;
      default: fail("--device cuda: {} is not a vector", t.name);
    }
    if (int64_t(v->size()) != t.rows * t.cols)
      fail("--device cuda: {} has {} values, the device model {}", t.name, v->size(), t.rows * t.cols);
    std::vector<float> rotated;
    if (t.kind == WeightKind::bv && size_t(t.layer) < rot_v_.size() && !rot_v_[size_t(t.layer)].empty()) {
      rotated = *v;  // b_v' = Rᵀ b_v per KV head, as absorb_v_rotation folds it
      const int d = c.head_dim;
      for (size_t h = 0; h < rotated.size() / size_t(d); ++h)
        rotate_value_column(rot_v_[size_t(t.layer)], d, rotated.data() + h * size_t(d), 1);
      v = &rotated;
    }
    // Pageable memory: the copy has left the host vector when this returns.
    check(cudaMemcpyAsync(t.f32, v->data(), v->size() * sizeof(float), cudaMemcpyHostToDevice, stream),
          "uploading " + t.name);
    if (!rotated.empty()) check(cudaStreamSynchronize(stream), "uploading " + t.name);
    return;
  }
  const WeightMatrix* m = nullptr;
  switch (t.kind) {
    case WeightKind::token_embd: m = &w_.token_embd; break;
    case WeightKind::output: m = &w_.output_matrix(); break;
    case WeightKind::wq: m = &l->wq; break;
    case WeightKind::wk: m = &l->wk; break;
    case WeightKind::wv: m = &l->wv; break;
    case WeightKind::wo: m = &l->wo; break;
    case WeightKind::w_gate: m = &l->w_gate; break;
    case WeightKind::w_up: m = &l->w_up; break;
    case WeightKind::w_down: m = &l->w_down; break;
    default: fail("--device cuda: {} is not a matrix", t.name);
  }
  if (m->rows() != t.rows || m->cols() != t.cols)
    fail("--device cuda: {} is [{}, {}], the device model wants [{}, {}]", t.name, m->rows(), m->cols(), t.rows, t.cols);
  const cuda::StoredType type = stored_type(m->type(), t.name);
  const cuda::StoredBlock blk = cuda::stored_block(type);
  if (m->bytes() != uint64_t(t.rows) * uint64_t(t.cols) / uint64_t(blk.elements) * uint64_t(blk.bytes))
    fail("--device cuda: {} holds {} bytes, not whole {} blocks of its shape", t.name, m->bytes(),
         cuda::stored_type_name(type));
  const float* r = (t.kind == WeightKind::wv || t.kind == WeightKind::wo) && size_t(t.layer) < rot_v_dev_.size()
                       ? rot_v_dev_[size_t(t.layer)]
                       : nullptr;
  try {
    if (!r) {
      stream_bytes(m->row(0), m->bytes(), blk.elements, blk.bytes, stream, [&](const void* chunk, int64_t first, int64_t n) {
        cuda::stored_to_bf16(type, chunk, t.bf16 + first, n, stream);
      });
      return;
    }
    float* f = absorb_scratch(size_t(t.rows) * size_t(t.cols));
    stream_bytes(m->row(0), m->bytes(), blk.elements, blk.bytes, stream, [&](const void* chunk, int64_t first, int64_t n) {
      cuda::stored_to_f32(type, chunk, f + first, n, stream);
    });
    const int d = c.head_dim;
    if (t.kind == WeightKind::wv)
      cuda::absorb_value_rows(f, r, t.bf16, int(t.rows / d), d, t.cols, stream);
    else
      cuda::absorb_output_columns(f, r, t.bf16, t.rows, int(t.cols / d), d, stream);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("--device cuda: loading {}: {}", t.name, e.what());
  }
}

std::unique_ptr<cuda::DeviceModel> load_device_model(const Transformer& t, const cuda::KvCacheLimits& limits,
                                                     cuda::GemmPrecision precision, DeviceLoadStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  KvFormat kv = device_kv_format(t);
  // R_V (or H) still to be applied goes into the weights on the device instead of the
  // prologue: the device model then has no value rotation at run time.
  std::vector<std::vector<float>> rot_v = std::move(kv.rot_v);
  kv.rot_v.clear();
  check_device_model(t.config());
  const RopeFreqs rope = rope_freqs(t.config());
  try {
    FileWeightLoader loader(t.weights(), std::move(rot_v));
    auto dm = std::make_unique<cuda::DeviceModel>(t.config(), rope, kv, limits, loader, precision);
    if (stats) {
      stats->seconds = seconds_since(t0);
      stats->file_bytes = loader.bytes_read();
      stats->device_bytes = int64_t(dm->weight_bytes());
    }
    return dm;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("--device cuda: {}", e.what());
  }
}

}  // namespace oscar
