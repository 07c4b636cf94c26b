// The calibration pipeline as a library (calib::calibrate) on a tiny random model: a rotation
// per layer, orthonormal and finite, for keys and values; the recipe's clips unless a search
// runs; the key means of the keys it saw; a manifest that names the sources, the tokens and
// the spectra; and bad options refused before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "../tiny_model.h"
#include "oscar/calib/calibrate.h"
#include "oscar/core/error.h"

namespace oscar::calib {
namespace {

namespace fs = std::filesystem;

// The tiny model's 50 ids as single letters (a–z, A–X; byte-level BPE without merges), so
// that text of random letters is one token a letter.
char letter(int id) { return id < 26 ? char('a' + id) : char('A' + id - 26); }
Tokenizer letter_tokenizer() {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int i = 0; i < 50; ++i) d.tokens.push_back(std::string(1, letter(i)));
  return Tokenizer(d);
}

fs::path write_text(const std::string& name, int n_tokens, uint32_t seed) {
  const fs::path p = fs::temp_directory_path() / name;
  std::mt19937 rng(seed);
  std::ofstream f(p);
  for (int i = 0; i < n_tokens; ++i) f << letter(int(rng() % 50));
  return p;
}

LoadedModel tiny_loaded() {
  LoadedModel m;
  m.transformer = std::make_unique<Transformer>(test::tiny_model(true, 5, 2, 16));
  m.tokenizer = std::make_unique<Tokenizer>(letter_tokenizer());
  return m;
}

double orthonormality_error(const std::vector<float>& r, int d) {
  double worst = 0.0;
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += double(r[size_t(i * d + k)]) * r[size_t(j * d + k)];
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

TEST(Calibrate, FitsAnOrthonormalRotationPerLayerAndRecordsWhatItSaw) {
  const fs::path a = write_text("oscar_calib_a.txt", 900, 1), b = write_text("oscar_calib_b.txt", 900, 2);
  LoadedModel m = tiny_loaded();
  CalibrationOptions o;
  o.tokens = 512, o.prompts = 4, o.group = 16, o.sink = 4, o.recent = 8;
  o.text_desc = "two files";
  const Calibration cal = calibrate(m, {parse_calib_source(a.string()), parse_calib_source(b.string() + ":3")}, o);
  const RotationSet& rs = cal.rotations;
  ASSERT_EQ(rs.layers.size(), 2u);
  EXPECT_EQ(rs.head_dim, 16);
  EXPECT_EQ(rs.group_size, 16);
  EXPECT_EQ(rs.sink_tokens, 4);
  EXPECT_EQ(rs.recent_tokens, 8);
  for (const LayerRotation& l : rs.layers) {
    EXPECT_LT(orthonormality_error(l.k_rotation, 16), 1e-4) << "layer " << l.layer;
    EXPECT_LT(orthonormality_error(l.v_rotation, 16), 1e-4) << "layer " << l.layer;
    EXPECT_FLOAT_EQ(l.k_clip, 0.96f);
    EXPECT_FLOAT_EQ(l.v_clip, 0.92f);
    ASSERT_EQ(l.k_mean.size(), 2u * 16u);  // one centre per KV head
    for (float x : l.k_mean) EXPECT_TRUE(std::isfinite(x));
    // Eigenvalues of a covariance: not negative, and not all zero.
    for (const std::vector<float>* eig : {&l.k_eigenvalues, &l.v_eigenvalues}) {
      ASSERT_EQ(eig->size(), 16u);
      double sum = 0.0;
      for (float e : *eig) {
        EXPECT_GE(e, -1e-6f);
        sum += e;
      }
      EXPECT_GT(sum, 0.0) << "layer " << l.layer;
    }
  }
  EXPECT_EQ(cal.manifest["calibration_text"], "two files");
  EXPECT_EQ(cal.manifest["tokens"], 512);
  ASSERT_EQ(cal.manifest["calibration_sources"].size(), 2u);
  // Weight 3 against 1: three quarters of the tokens come from the second file.
  EXPECT_EQ(cal.manifest["calibration_sources"][1]["tokens"], 384);
  EXPECT_EQ(cal.manifest["eigenvalue_spectra"].size(), 2u);
  EXPECT_TRUE(cal.manifest.contains("seconds"));
  fs::remove(a), fs::remove(b);
}

TEST(Calibrate, RefusesBadOptionsBeforeRunning) {
  const fs::path a = write_text("oscar_calib_c.txt", 300, 3);
  LoadedModel m = tiny_loaded();
  CalibrationOptions o;
  o.tokens = 8, o.prompts = 16;  // fewer tokens than prompts
  EXPECT_THROW(calibrate(m, {parse_calib_source(a.string())}, o), Error);
  o.tokens = 64, o.prompts = 4, o.k_objective = "nope_r_h_pbr";
  EXPECT_THROW(calibrate(m, {parse_calib_source(a.string())}, o), Error);
  o.k_objective = "qqt_r_h_pbr";
  EXPECT_THROW(calibrate(m, {}, o), Error);
  fs::remove(a);
}

}  // namespace
}  // namespace oscar::calib
