#include "device_fixture.h"

#include <cstdio>
#include <memory>

#include "oscar/core/error.h"

namespace oscar {
namespace {

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb"), &std::fclose) {
    if (!f_) fail("cannot write {}", path);
  }
  void bytes(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_.get()) != n) fail("writing {} failed", path_);
  }
  template <class T>
  void value(T v) { bytes(&v, sizeof v); }
  template <class T>
  void array(const std::vector<T>& v) { bytes(v.data(), v.size() * sizeof(T)); }

 private:
  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> f_;
};

}  // namespace

void write_device_fixture(const std::string& path, const cuda::HostModel& m, const KvFormat& kv,
                          const std::vector<int32_t>& tokens, const std::vector<float>& logits) {
  const ModelDims& s = m.dims;
  OSCAR_CHECK(logits.size() == tokens.size() * size_t(s.n_vocab), "fixture logits do not match the tokens");
  Writer w(path);
  w.bytes("OSCFIX3", 8);
  for (int v : {s.n_layers, s.n_embd, s.n_ff, s.n_heads, s.n_kv_heads, s.head_dim, s.n_vocab, int(s.qkv_bias),
                int(s.qk_norm), int(s.tied_embeddings), int(m.rope.style == RopeStyle::interleaved)})
    w.value<int32_t>(v);
  w.value<float>(s.rms_eps);
  w.value<double>(m.rope.position_scale);
  w.array(m.rope.inv_freq);
  for (int v : {kv.sink, kv.window, kv.group, int(kv.k_bias_split)}) w.value<int32_t>(v);
  for (int l = 0; l < kv.n_layers(); ++l) w.value<int32_t>(kv.bits(l));
  w.array(kv.k_clip);
  w.array(kv.v_clip);
  for (int l = 0; l < s.n_layers; ++l)
    for (const auto* per_layer : {&kv.rot_k, &kv.rot_v, &kv.k_shift}) {
      const bool has = !per_layer->empty() && !(*per_layer)[size_t(l)].empty();
      w.value<int32_t>(has);
      if (has) w.array((*per_layer)[size_t(l)]);
    }
  w.array(m.token_embd);
  if (!s.tied_embeddings) w.array(m.output);
  w.array(m.output_norm);
  for (const cuda::HostLayer& l : m.layers) {
    for (const auto* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) w.array(*t);
    w.array(l.attn_norm);
    w.array(l.ffn_norm);
    if (s.qkv_bias) w.array(l.bq), w.array(l.bk), w.array(l.bv);
    if (s.qk_norm) w.array(l.q_norm), w.array(l.k_norm);
  }
  w.value<int32_t>(int32_t(tokens.size()));
  w.array(tokens);
  w.array(logits);
}

}  // namespace oscar
