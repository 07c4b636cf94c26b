// oscar rotations: inspect rotation files (orthogonality, clips, spectra), embed them
// into a GGUF model so one file carries the model and its OSCAR KV format, and tune them
// (cmd_rotations_tune.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "calibrate_tune.h"
#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/rotation/rotation_gguf.h"

namespace oscar::cli {

namespace {
// max |RᵀR − I| in double; identity (empty) gives 0.
double orthogonality_error(const std::vector<float>& R, int d) {
  double worst = 0.0;
  for (int i = 0; i < d && !R.empty(); ++i)
    for (int j = 0; j < d; ++j) {
      double acc = 0.0;
      for (int k = 0; k < d; ++k) acc += double(R[size_t(k * d + i)]) * R[size_t(k * d + j)];
      worst = std::max(worst, std::abs(acc - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

std::string spectrum(const std::vector<float>& eig) {
  if (eig.empty()) return "-";
  const auto [lo, hi] = std::minmax_element(eig.begin(), eig.end());
  double sum = 0.0;
  for (float e : eig) sum += e;
  return fmt::format("max {:.3g}, min {:.3g}, max/mean {:.1f}", *hi, *lo, *hi / (sum / double(eig.size())));
}

int inspect(const std::string& path) {
  const RotationSet rs = load_rotations(path);
  fmt::print("{}: {} layers, head_dim {}, group {}, sink {}, recent {}, K {}, V {}\n", path, rs.layers.size(),
             rs.head_dim, rs.group_size, rs.sink_tokens, rs.recent_tokens, rs.k_objective, rs.v_objective);
  fmt::print("{:>5} {:>12} {:>12} {:>7} {:>7}  {:<40} {}\n", "layer", "|KᵀK−I|", "|VᵀV−I|", "k_clip", "v_clip",
             "K spectrum", "V spectrum");
  double worst = 0.0;
  for (const LayerRotation& l : rs.layers) {
    const double ek = orthogonality_error(l.k_rotation, rs.head_dim), ev = orthogonality_error(l.v_rotation, rs.head_dim);
    worst = std::max({worst, ek, ev});
    fmt::print("{:>5} {:>12.2e} {:>12.2e} {:>7.3f} {:>7.3f}  {:<40} {}\n", l.layer, ek, ev, l.k_clip, l.v_clip,
               spectrum(l.k_eigenvalues), spectrum(l.v_eigenvalues));
  }
  fmt::print("worst orthogonality error {:.2e}\n", worst);
  if (!rs.kv_layers.empty())
    fmt::print("per-layer KV types over int2-oscar (--kv-budget {:.2f} bits): {}\n", rs.kv_budget_bits, rs.kv_layers);
  return 0;
}

int embed(const std::string& model, const std::string& rot, const std::string& out) {
  const gguf::GgufFile f = gguf::GgufFile::open(model);
  const RotationSet rs = load_rotations(rot);
  const int64_t layers = f.get_int(f.get_string("general.architecture") + ".block_count");
  if (layers != int64_t(rs.layers.size()))
    fail("rotations have {} layers, the model {} has {}", rs.layers.size(), model, layers);
  embed_rotations(f, rs, out);
  fmt::print(stderr, "wrote {} with {} layers of OSCAR rotations\n", out, rs.layers.size());
  return 0;
}
}  // namespace

void add_rotations_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("rotations", "inspect OSCAR rotations or embed them into a GGUF model");
  cmd->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  CLI::App* ins = cmd->add_subcommand("inspect", "orthogonality error, clip ratios and spectra per layer");
  ins->add_option("path", *path, "rotation directory or GGUF")->required();
  ins->callback([path] { inspect(*path); });
  auto model = std::make_shared<std::string>(), rot = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* emb = cmd->add_subcommand("embed", "write a copy of a GGUF model with the rotations inside");
  emb->add_option("-m,--model", *model, "GGUF model")->required()->check(CLI::ExistingFile);
  emb->add_option("-r,--rotations", *rot, "rotation directory")->required();
  emb->add_option("-o,--out", *out, "output GGUF")->required();
  emb->callback([model, rot, out] { embed(*model, *rot, *out); });
  add_rotations_tune_command(*cmd);
}

}  // namespace oscar::cli
