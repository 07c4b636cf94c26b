#include "oscar/rotation/rotation_fit.h"

#include <cblas.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "oscar/core/error.h"
#include "oscar/rotation/hadamard.h"

namespace oscar {

// ---- Rotation compositions -------------------------------------------------------------

const std::vector<std::string>& rotation_compositions() {
  static const std::vector<std::string> names = {"identity", "hadamard", "plain",   "r_h",     "br",     "pbr",
                                                 "r_h_pbr",  "h_r_pbr",  "h_pbr_r", "h_pbr",   "br_h128"};
  return names;
}

std::pair<std::string, std::string> split_objective(const std::string& objective) {
  const auto& names = rotation_compositions();
  auto known = [&](const std::string& c) { return std::find(names.begin(), names.end(), c) != names.end(); };
  if (known(objective)) return {"", objective};
  for (const char* source : {"qqt", "sst", "ktk", "vtv"}) {
    const std::string prefix = std::string(source) + "_";
    if (objective.rfind(prefix, 0) == 0 && known(objective.substr(prefix.size())))
      return {source, objective.substr(prefix.size())};
  }
  fail("unknown rotation objective '{}' (expected [qqt|sst|ktk|vtv]_<composition> with composition one of {})",
       objective, fmt::join(names, ", "));
}

int bit_reverse(int i, int bits) {
  int r = 0;
  for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
  return r;
}

std::vector<int> bit_reversal_permutation(const Eigen::VectorXd& eigenvalues) {
  const int d = static_cast<int>(eigenvalues.size());
  if (!is_power_of_two(d)) fail("bit-reversal permutation needs a power-of-two dimension, got d = {}", d);
  std::vector<int> s(static_cast<size_t>(d));
  std::iota(s.begin(), s.end(), 0);
  std::stable_sort(s.begin(), s.end(), [&](int a, int b) { return eigenvalues[a] > eigenvalues[b]; });
  const int bits = std::countr_zero(static_cast<unsigned>(d));
  std::vector<int> perm(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) perm[static_cast<size_t>(bit_reverse(i, bits))] = s[static_cast<size_t>(i)];
  return perm;
}

Eigen::MatrixXd permutation_matrix(const std::vector<int>& perm) {
  const Eigen::Index d = static_cast<Eigen::Index>(perm.size());
  Eigen::MatrixXd p = Eigen::MatrixXd::Zero(d, d);
  for (Eigen::Index j = 0; j < d; ++j) p(perm[static_cast<size_t>(j)], j) = 1.0;
  return p;
}

SymmetricEigen symmetric_eigen(const Eigen::MatrixXd& sigma) {
  if (sigma.rows() != sigma.cols() || sigma.rows() == 0)
    fail("eigendecomposition needs a non-empty square matrix, got {}×{}", sigma.rows(), sigma.cols());
  if (!sigma.allFinite()) fail("eigendecomposition: the {}×{} matrix has non-finite entries", sigma.rows(), sigma.cols());
  const Eigen::MatrixXd sym = 0.5 * (sigma + sigma.transpose());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(sym, Eigen::ComputeEigenvectors);
  if (solver.info() != Eigen::Success) fail("eigendecomposition of a {}×{} matrix did not converge", sym.rows(), sym.cols());
  SymmetricEigen e{solver.eigenvalues(), solver.eigenvectors()};
  // Eigenvector signs are arbitrary; fix them so that fits are reproducible across Eigen versions.
  for (Eigen::Index j = 0; j < e.eigenvectors.cols(); ++j) {
    Eigen::Index imax = 0;
    e.eigenvectors.col(j).cwiseAbs().maxCoeff(&imax);
    if (e.eigenvectors(imax, j) < 0.0) e.eigenvectors.col(j) *= -1.0;
  }
  return e;
}

namespace {

Eigen::MatrixXd hadamard_f64(int d, int block) {
  Eigen::MatrixXd h = Eigen::MatrixXd::Zero(d, d);
  const std::vector<double> hb = hadamard_matrix_f64(block);
  for (int b0 = 0; b0 < d; b0 += block)
    for (int i = 0; i < block; ++i)
      for (int j = 0; j < block; ++j)
        h(b0 + i, b0 + j) = hb[static_cast<size_t>(i) * static_cast<size_t>(block) + static_cast<size_t>(j)];
  return h;
}

}  // namespace

namespace {

// The rotation of composition `comp` (already split from its objective) for Σ of size d;
// `eig` is computed on demand (identity and hadamard need none).
Eigen::MatrixXd compose(const Eigen::MatrixXd& sigma, const std::string& comp, const SymmetricEigen* eig) {
  if (sigma.rows() != sigma.cols()) fail("rotation fit: Σ is {}×{}, not square", sigma.rows(), sigma.cols());
  const int d = static_cast<int>(sigma.rows());
  if (!is_power_of_two(d)) fail("rotation fit '{}': head_dim d = {} is not a power of two", comp, d);
  if (comp == "identity") return Eigen::MatrixXd::Identity(d, d);
  const Eigen::MatrixXd H = hadamard_f64(d, d);
  if (comp == "hadamard") return H;

  SymmetricEigen local;
  if (!eig) {
    local = symmetric_eigen(sigma);
    eig = &local;
  }
  const Eigen::MatrixXd& U = eig->eigenvectors;
  const Eigen::MatrixXd P = permutation_matrix(bit_reversal_permutation(eig->eigenvalues));
  if (comp == "plain") return U;
  if (comp == "r_h") return U * H;
  if (comp == "br") return U * P;
  if (comp == "pbr") return P;
  if (comp == "r_h_pbr") return U * H * P;
  if (comp == "h_r_pbr") return H * U * P;
  if (comp == "h_pbr_r") return H * P * U;
  if (comp == "h_pbr") return H * P;
  if (comp == "br_h128") return U * P * hadamard_f64(d, std::min(d, 128));
  fail("rotation fit: composition '{}' has no implementation", comp);
}

}  // namespace

Eigen::MatrixXd rotation_matrix(const Eigen::MatrixXd& sigma, const std::string& composition) {
  return compose(sigma, split_objective(composition).second, nullptr);
}

FittedRotation fit_rotation(const Eigen::MatrixXd& sigma, const std::string& composition) {
  const auto [source, comp] = split_objective(composition);
  const bool baseline = comp == "identity" || comp == "hadamard";
  FittedRotation f;
  SymmetricEigen eig;
  if (!baseline) eig = symmetric_eigen(sigma);
  f.rotation_f64 = compose(sigma, comp, baseline ? nullptr : &eig);
  const Eigen::Index d = f.rotation_f64.rows();
  f.rotation.resize(static_cast<size_t>(d * d));
  for (Eigen::Index i = 0; i < d; ++i)
    for (Eigen::Index j = 0; j < d; ++j) f.rotation[static_cast<size_t>(i * d + j)] = static_cast<float>(f.rotation_f64(i, j));
  f.eigenvalues.assign(static_cast<size_t>(d), 1.0f);  // the baselines report all ones
  for (Eigen::Index i = 0; !baseline && i < d; ++i) f.eigenvalues[static_cast<size_t>(i)] = static_cast<float>(eig.eigenvalues[i]);
  return f;
}

Eigen::MatrixXd pool_covariances(const std::vector<Eigen::MatrixXd>& sigmas, const std::vector<double>& weights) {
  if (sigmas.empty() || sigmas.size() != weights.size())
    fail("pool_covariances: {} matrices and {} weights", sigmas.size(), weights.size());
  const Eigen::Index d = sigmas[0].rows();
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(d, d);
  double w_sum = 0.0;
  for (size_t i = 0; i < sigmas.size(); ++i) {
    const Eigen::MatrixXd& s = sigmas[i];
    if (s.rows() != d || s.cols() != d)
      fail("pool_covariances: matrix {} is {}x{}, expected {}x{}", i, s.rows(), s.cols(), d, d);
    const double tr = s.trace(), w = weights[i];
    if (!std::isfinite(w) || w <= 0.0) fail("pool_covariances: weight {} of source {} is not > 0", w, i);
    if (!std::isfinite(tr) || tr <= 0.0) fail("pool_covariances: source {} has trace {}, not > 0", i, tr);
    out += (w / tr) * s;
    w_sum += w;
  }
  return out / w_sum;
}

// ---- Covariance accumulation --------------------------------------------------------------

namespace {

// Tokens per chunk: the scratch holds d × (chunk · r) doubles; a few hundred columns keep the
// rank-k updates at GEMM speed.
constexpr int64_t kChunkTokens = 256;

// Columns of `dst` [d, n_tok·cols_per_tok] ← float rows src[t·stride + c·d .. +d) for t < n_tok.
void gather_columns(Eigen::MatrixXd& dst, const float* src, int64_t n_tok, int cols_per_tok, int64_t stride, int d) {
  double* out = dst.data();
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = src + t * stride;
    for (int c = 0; c < cols_per_tok; ++c) {
      const float* x = row + static_cast<int64_t>(c) * d;
      for (int i = 0; i < d; ++i) out[i] = x[i];
      out += d;
    }
  }
}

// sum [d, d] (lower triangle) += a·aᵀ, a [d, n] column-major: BLAS syrk (OpenBLAS picks its
// AVX2 kernels at run time, which Eigen compiled for baseline x86-64 cannot).
void rank_update(Eigen::MatrixXd& sum, const Eigen::MatrixXd& a, int64_t n) {
  const int d = static_cast<int>(sum.rows());
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, d, static_cast<int>(n), 1.0, a.data(), d, 1.0, sum.data(), d);
}

Eigen::MatrixXd full_from_lower(const Eigen::MatrixXd& lower) {
  return lower.selfadjointView<Eigen::Lower>();
}

}  // namespace

CovarianceAccumulator::CovarianceAccumulator(int n_heads_, int n_kv_heads_, int head_dim_)
    : n_heads(n_heads_), n_kv_heads(n_kv_heads_), head_dim(head_dim_) {
  if (n_kv_heads <= 0 || n_heads <= 0 || n_heads % n_kv_heads != 0)
    fail("covariance accumulator: n_heads {} is not a positive multiple of n_kv_heads {}", n_heads, n_kv_heads);
  if (head_dim <= 0) fail("covariance accumulator: head_dim {} must be positive", head_dim);
  const Eigen::MatrixXd zero = Eigen::MatrixXd::Zero(head_dim, head_dim);
  qq_sum.assign(static_cast<size_t>(n_kv_heads), zero);
  kk_sum = qq_sum;
  vv_sum = qq_sum;
  wvv_sum = qq_sum;
  w_sum.assign(static_cast<size_t>(n_kv_heads), 0.0);
}

void CovarianceAccumulator::add_pass1(const float* q, const float* k, const float* v, int64_t n_tokens) {
  if (frozen) fail("covariance accumulator: pass-1 data after freeze_query_covariance()");
  if (n_tokens <= 0) return;
  const int d = head_dim, r = n_heads / n_kv_heads;
  buf_a_.resize(d, kChunkTokens * r);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kChunkTokens) {
    const int64_t nt = std::min(kChunkTokens, n_tokens - t0);
    for (int h = 0; h < n_kv_heads; ++h) {
      const size_t hs = static_cast<size_t>(h);
      if (q) {
        gather_columns(buf_a_, q + (t0 * n_heads + static_cast<int64_t>(h) * r) * d, nt, r,
                       static_cast<int64_t>(n_heads) * d, d);
        rank_update(qq_sum[hs], buf_a_, nt * r);
      }
      if (k) {
        gather_columns(buf_a_, k + (t0 * n_kv_heads + h) * d, nt, 1, static_cast<int64_t>(n_kv_heads) * d, d);
        rank_update(kk_sum[hs], buf_a_, nt);
      }
      if (v) {
        gather_columns(buf_a_, v + (t0 * n_kv_heads + h) * d, nt, 1, static_cast<int64_t>(n_kv_heads) * d, d);
        rank_update(vv_sum[hs], buf_a_, nt);
      }
    }
  }
  if (q) q_tokens += n_tokens;
  if (k) k_tokens += n_tokens;
  if (v) v_tokens += n_tokens;
}

void CovarianceAccumulator::freeze_query_covariance() {
  if (q_tokens == 0) fail("covariance accumulator: freeze_query_covariance() before any query was seen");
  cq.resize(static_cast<size_t>(n_kv_heads));
  for (int h = 0; h < n_kv_heads; ++h) cq[static_cast<size_t>(h)] = objective("qqt", h);
  frozen = true;
}

void CovarianceAccumulator::add_pass2(const float* k, const float* v, int64_t n_tokens) {
  if (!frozen) fail("covariance accumulator: pass-2 (sst) data before freeze_query_covariance()");
  if (!k || !v) fail("covariance accumulator: pass 2 needs both k and v");
  if (n_tokens <= 0) return;
  const int d = head_dim;
  const int64_t stride = static_cast<int64_t>(n_kv_heads) * d;
  buf_a_.resize(d, kChunkTokens);
  buf_b_.resize(d, kChunkTokens);
  Eigen::VectorXd w(kChunkTokens);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kChunkTokens) {
    const int64_t nt = std::min(kChunkTokens, n_tokens - t0);
    for (int h = 0; h < n_kv_heads; ++h) {
      const size_t hs = static_cast<size_t>(h);
      // w_t = k_tᵀ C_Q,h k_t. C_Q,h is PSD, so w_t ≥ 0 up to rounding (≈1e-16 relative); the
      // clamp lets Σ_t w_t v vᵀ be one syrk of the columns v_t·√w_t.
      gather_columns(buf_a_, k + (t0 * n_kv_heads + h) * d, nt, 1, stride, d);
      cblas_dsymm(CblasColMajor, CblasLeft, CblasLower, d, static_cast<int>(nt), 1.0, cq[hs].data(), d, buf_a_.data(), d,
                  0.0, buf_b_.data(), d);
      w.head(nt) = buf_a_.leftCols(nt).cwiseProduct(buf_b_.leftCols(nt)).colwise().sum().transpose().cwiseMax(0.0);
      w_sum[hs] += w.head(nt).sum();
      gather_columns(buf_a_, v + (t0 * n_kv_heads + h) * d, nt, 1, stride, d);
      buf_a_.leftCols(nt) *= w.head(nt).cwiseSqrt().asDiagonal();
      rank_update(wvv_sum[hs], buf_a_, nt);
    }
  }
  sst_tokens += n_tokens;
}

void CovarianceAccumulator::merge(const CovarianceAccumulator& o) {
  if (o.n_heads != n_heads || o.n_kv_heads != n_kv_heads || o.head_dim != head_dim)
    fail("covariance accumulator: cannot merge shape (n_heads {}, n_kv {}, d {}) into (n_heads {}, n_kv {}, d {})",
         o.n_heads, o.n_kv_heads, o.head_dim, n_heads, n_kv_heads, head_dim);
  if (o.frozen != frozen) fail("covariance accumulator: cannot merge a frozen and an unfrozen accumulator");
  for (size_t h = 0; h < static_cast<size_t>(n_kv_heads); ++h) {
    if (!frozen) {  // after the freeze both hold the same pass-1 sums (the shards share C_Q,h)
      qq_sum[h] += o.qq_sum[h];
      kk_sum[h] += o.kk_sum[h];
      vv_sum[h] += o.vv_sum[h];
    }
    wvv_sum[h] += o.wvv_sum[h];
    w_sum[h] += o.w_sum[h];
  }
  if (!frozen) {
    q_tokens += o.q_tokens;
    k_tokens += o.k_tokens;
    v_tokens += o.v_tokens;
  }
  sst_tokens += o.sst_tokens;
}

Eigen::MatrixXd CovarianceAccumulator::objective(const std::string& name, int h) const {
  if (h < -1 || h >= n_kv_heads) fail("covariance accumulator: KV head {} out of range [0, {})", h, n_kv_heads);
  const std::vector<Eigen::MatrixXd>* sums = nullptr;
  std::vector<double> denom(static_cast<size_t>(n_kv_heads));
  const int r = n_kv_heads > 0 ? n_heads / n_kv_heads : 0;
  auto need = [&](int64_t n, const char* what) {
    if (n <= 0) fail("covariance accumulator: objective '{}' has no data ({} tokens)", what, n);
  };
  if (name == "qqt") {
    need(q_tokens, "qqt");
    sums = &qq_sum;
    std::fill(denom.begin(), denom.end(), static_cast<double>(q_tokens) * r);
  } else if (name == "ktk") {
    need(k_tokens, "ktk");
    sums = &kk_sum;
    std::fill(denom.begin(), denom.end(), static_cast<double>(k_tokens));
  } else if (name == "vtv") {
    need(v_tokens, "vtv");
    sums = &vv_sum;
    std::fill(denom.begin(), denom.end(), static_cast<double>(v_tokens));
  } else if (name == "sst") {
    need(sst_tokens, "sst");
    sums = &wvv_sum;
    for (size_t i = 0; i < denom.size(); ++i) {
      if (!(w_sum[i] > 0.0)) fail("covariance accumulator: sst weights of KV head {} sum to {}", i, w_sum[i]);
      denom[i] = w_sum[i];
    }
  } else {
    fail("covariance accumulator: unknown objective '{}' (valid: ktk, vtv, qqt, sst)", name);
  }
  if (h >= 0) return full_from_lower((*sums)[static_cast<size_t>(h)]) / denom[static_cast<size_t>(h)];
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(head_dim, head_dim);
  for (size_t i = 0; i < static_cast<size_t>(n_kv_heads); ++i) m += full_from_lower((*sums)[i]) / denom[i];
  return m / n_kv_heads;
}

}  // namespace oscar
