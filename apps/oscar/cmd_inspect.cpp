// oscar inspect: metadata and tensor table of a GGUF file, or a safetensors model's config.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/model/weight_source.h"

namespace oscar::cli {

namespace {
struct InspectOptions {
  std::string model;
  bool no_tensors = false;
};

void print_config(const ModelConfig& c) {
  fmt::print("arch {}  layers {}  n_embd {}  n_ff {}  heads {}/{}  head_dim {}  vocab {}  ctx {}  rope theta {} ({}{})\n",
             arch_name(c.arch), c.n_layers, c.n_embd, c.n_ff, c.n_heads, c.n_kv_heads, c.head_dim, c.n_vocab,
             c.n_ctx_train, c.rope_theta, c.rope_style == RopeStyle::neox ? "neox" : "interleaved",
             c.rope_scaling.type == "none" ? "" : ", scaling " + c.rope_scaling.type);
}

int inspect(const InspectOptions& o) {
  const bool is_gguf = !std::filesystem::is_directory(o.model) && !o.model.ends_with(".safetensors");
  if (!is_gguf) {
    auto src = open_weight_source(o.model);
    print_config(src->config());
    return 0;
  }
  const gguf::GgufFile f = gguf::GgufFile::open(o.model);
  fmt::print("GGUF v{}  {} metadata keys  {} tensors  alignment {}  data at {}\n", f.version(), f.metadata().size(),
             f.tensors().size(), f.alignment(), f.data_offset());
  for (const auto& [key, value] : f.metadata())
    fmt::print("  {:<44} {:<8} {}\n", key, gguf::value_type_name(value.type), value.to_display());
  if (!o.no_tensors) {
    fmt::print("\n  {:<36} {:<8} {:<22} {:>12}\n", "tensor", "type", "shape (ne)", "bytes");
    for (const auto& t : f.tensors())
      fmt::print("  {:<36} {:<8} {:<22} {:>12}\n", t.name, ggml_type_name(t.type), fmt::format("[{}]", fmt::join(t.ne, ", ")),
                 t.n_bytes);
  }
  std::map<std::string, int> counts;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    counts[ggml_type_name(t.type)]++;
    total += t.n_elements;
  }
  fmt::print("\n{} parameters; tensor types:", total);
  for (const auto& [name, n] : counts) fmt::print(" {} × {}", n, name);
  fmt::print("\n");
  try {
    print_config(open_weight_source(o.model)->config());
  } catch (const Error& e) {
    fmt::print("not loadable as a model: {}\n", e.what());
  }
  return 0;
}
}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "print a model file's metadata and tensor table");
  cmd->add_option("-m,--model,model", o->model, "model file (.gguf) or safetensors directory")->required();
  cmd->add_flag("--no-tensors", o->no_tensors, "omit the tensor table");
  cmd->callback([o] { inspect(*o); });
}

}  // namespace oscar::cli
