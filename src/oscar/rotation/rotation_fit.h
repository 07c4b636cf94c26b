// The math of OSCAR calibration (spec sections 1 and 2), free of any model code: streaming
// float64 covariance accumulators for the ktk, vtv, qqt and sst objectives of one layer, the
// symmetric eigendecomposition, the eigenvalue-sorted bit-reversal permutation, and the
// rotation compositions (R acts on row vectors on the right: k' = k·R).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oscar {

// ---- Rotation compositions -------------------------------------------------------------
// Σ = U Λ Uᵀ with U's columns the eigenvectors (eigenvalues ascending); H the normalized
// Sylvester Hadamard of order d; P = P_br the eigenvalue-sorted bit-reversal permutation
// (always built from Σ's eigenvalues, whatever stands before it). Our reading of each name:
// the factors are multiplied in the order they are named (r = U, h = H, pbr/br = P).
//   identity  I            no rotation (the naive INT2 baseline)
//   hadamard  H            QuaRot-style baseline; eigenvalues reported as all ones
//   plain     U            eigenbasis: coordinate i of k·U has variance λ_i
//   r_h       U·H          eigenbasis, then Hadamard: every coordinate gets variance mean(λ)
//   br        U·P          eigenbasis with the eigen-directions spread by bit reversal:
//                          coordinate br(i) holds the i-th largest direction
//   pbr       P            P alone, applied to the original coordinates (index i ↔ λ_i)
//   r_h_pbr   U·H·P        the validated default (K: qqt_r_h_pbr, V: sst_r_h_pbr)
//   h_r_pbr   H·U·P        literal product; U and P still come from Σ itself (not from HΣH)
//   h_pbr_r   H·P·U        literal product, as above
//   h_pbr     H·P          literal product, as above
//   br_h128   U·P·H₁₂₈     H₁₂₈ = block-diagonal Hadamard with blocks of min(d, 128): equal to
//                          H for d ≤ 128; for d = 256 it mixes within each 128-wide group only
// Objective names are "<source>_<composition>" with source ∈ {qqt, sst, ktk, vtv}, or a
// bare composition ("hadamard", "identity", …).
const std::vector<std::string>& rotation_compositions();
// "qqt_r_h_pbr" → {"qqt", "r_h_pbr"}; "hadamard" → {"", "hadamard"}. Throws oscar::Error
// naming the objective when the source or the composition is unknown.
std::pair<std::string, std::string> split_objective(const std::string& objective);

// Reverses the low `bits` bits of i.
int bit_reverse(int i, int bits);
// perm with perm[br(i)] = s[i], s = eigen-indices sorted by eigenvalue descending (ties: lower
// index first); P_br = I[:, perm], so (x·P_br)[j] = x[perm[j]]. d must be a power of two.
std::vector<int> bit_reversal_permutation(const Eigen::VectorXd& eigenvalues);
// I[:, perm]: column j is e_{perm[j]}.
Eigen::MatrixXd permutation_matrix(const std::vector<int>& perm);

struct SymmetricEigen {
  Eigen::VectorXd eigenvalues;   // [d] ascending
  Eigen::MatrixXd eigenvectors;  // [d, d] columns; each column's largest-|·| entry made positive
};
// Symmetrizes (Σ + Σᵀ)/2 first. Throws oscar::Error for a non-square or non-finite Σ.
SymmetricEigen symmetric_eigen(const Eigen::MatrixXd& sigma);

struct FittedRotation {
  std::vector<float> rotation;     // [d, d] row-major float32 (as stored in RotationZoo files)
  std::vector<float> eigenvalues;  // [d] ascending, raw eigh output (all ones for hadamard/identity)
  Eigen::MatrixXd rotation_f64;    // [d, d] the same matrix in float64
};
// composition: a name of rotation_compositions() or a full objective ("qqt_r_h_pbr").
// sigma [d, d], d a power of two (refused otherwise, naming d). For identity and hadamard
// only sigma's size is used.
FittedRotation fit_rotation(const Eigen::MatrixXd& sigma, const std::string& composition);
Eigen::MatrixXd rotation_matrix(const Eigen::MatrixXd& sigma, const std::string& composition);

// Σ_i w_i · Σ_i / tr(Σ_i) / Σ_i w_i: covariances of several calibration sources pooled with
// equal weight per unit of weight, whatever the size of each source's activations (a
// source whose queries are twice as large would otherwise steer the eigenvectors four times
// as much). The result has unit trace. Throws oscar::Error for no matrices, a size mismatch,
// a weight that is not finite and > 0, or a trace that is not finite and > 0.
Eigen::MatrixXd pool_covariances(const std::vector<Eigen::MatrixXd>& sigmas, const std::vector<double>& weights);

// ---- Covariance accumulation --------------------------------------------------------------
// One layer's second moments in float64, no mean subtraction, streamed chunk by chunk:
//   ktk: Σ_K = Σ_{t,h} k kᵀ / (N·n_kv)                     vtv: likewise for v
//   qqt: C_Q,h = Σ_{t, q-heads [h·r,(h+1)·r)} q qᵀ / (N·r);  Σ_Q = mean_h C_Q,h
//   sst: w_t = k_tᵀ C_Q,h k_t;  Σ_V = mean_h (Σ_t w_t v_t v_tᵀ) / (Σ_t w_t)
// sst needs the final C_Q,h, hence two passes over the calibration text: pass 1 feeds
// add_pass1 (q, k, v); freeze_query_covariance() fixes C_Q,h; pass 2 feeds add_pass2 (k, v).
// Sums are kept per KV head (lower triangles while accumulating), so per-head rotations are a
// matter of calling objective(name, h). Memory: about 5·n_kv·d² doubles.
struct CovarianceAccumulator {
  CovarianceAccumulator() = default;
  CovarianceAccumulator(int n_heads, int n_kv_heads, int head_dim);

  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // KV heads; n_heads % n_kv_heads == 0
  int head_dim = 0;    // d
  int64_t q_tokens = 0, k_tokens = 0, v_tokens = 0;  // tokens seen in pass 1, per input
  int64_t sst_tokens = 0;                            // tokens seen in pass 2
  bool frozen = false;                               // C_Q,h fixed (pass 2 may run)
  std::vector<Eigen::MatrixXd> qq_sum;   // [n_kv][d, d] Σ q qᵀ over tokens and the group's q-heads
  std::vector<Eigen::MatrixXd> kk_sum;   // [n_kv][d, d] Σ_t k kᵀ
  std::vector<Eigen::MatrixXd> vv_sum;   // [n_kv][d, d] Σ_t v vᵀ
  std::vector<Eigen::MatrixXd> cq;       // [n_kv][d, d] frozen C_Q,h (full, symmetric)
  std::vector<Eigen::MatrixXd> wvv_sum;  // [n_kv][d, d] Σ_t w_t v vᵀ
  std::vector<double> w_sum;             // [n_kv] Σ_t w_t

  // Pass 1. q [n_tokens, n_heads, d]; k, v [n_tokens, n_kv_heads, d]; any may be null.
  void add_pass1(const float* q, const float* k, const float* v, int64_t n_tokens);
  // Fixes C_Q,h from pass 1 (throws when no query was seen). Pass 1 is closed afterwards.
  void freeze_query_covariance();
  // Pass 2. k, v [n_tokens, n_kv_heads, d], both required.
  void add_pass2(const float* k, const float* v, int64_t n_tokens);
  // Adds another accumulator's sums (same shape, both frozen or both not): shards of the text
  // accumulated in parallel. Before the freeze it adds the pass-1 sums; after it only the
  // pass-2 (sst) sums: copy the frozen accumulator once per shard before any pass-2 data,
  // feed each copy its shard, then merge the copies into one (pass-1 state left as it is).
  void merge(const CovarianceAccumulator& other);

  // The objective ("ktk", "vtv", "qqt", "sst") as a full symmetric [d, d] matrix: the mean
  // over KV heads (h = −1) or one KV head's term. Throws when its data is missing.
  Eigen::MatrixXd objective(const std::string& name, int h = -1) const;
  Eigen::MatrixXd query_covariance(int h) const { return objective("qqt", h); }

 private:
  Eigen::MatrixXd buf_a_, buf_b_;  // scratch: [d, chunk columns]
};

}  // namespace oscar
