// The rotary-layout claim of models/llama_hf.h, checked on the model itself: Llama weights with
// q/k rows permuted as llama.cpp's converter permutes them, run with interleaved RoPE, give the
// same logits as the unpermuted (HF) rows run with half-split RoPE. Also: safetensors weights
// through SafetensorsWeights (in-place views, misaligned data copied, shape/dtype errors).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "models/llama.h"
#include "models/weight_source.h"

namespace tessera::models {
namespace {

class MapWeights final : public WeightSource {
 public:
  std::map<std::string, Tensor> t;
  bool has(const std::string& name) const override { return t.count(name) != 0; }
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) const override {
    auto it = t.find(name);
    if (it == t.end()) throw_error(ErrorCode::kCorruptData, "missing " + name);
    EXPECT_EQ(it->second.numel(), rows * cols) << name;
    return it->second;
  }
};

Tensor random_matrix(std::mt19937& rng, int64_t rows, int64_t cols, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::empty(DType::kF32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data<float>()[i] = u(rng);
  return t;
}

// llama.cpp's convert_hf_to_gguf permute(): per head, rows (j * hd/2 + i) -> (2 * i + j).
Tensor permute_rows(const Tensor& w, int64_t n_heads, int64_t head_dim) {
  const int64_t cols = w.dim(1), half = head_dim / 2;
  Tensor out = Tensor::empty(DType::kF32, {w.dim(0), cols});
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(out.data<float>() + (h * head_dim + 2 * i + j) * cols,
                    w.data<float>() + (h * head_dim + j * half + i) * cols, cols * sizeof(float));
  return out;
}

TEST(llama_hf, HalfSplitOnHfRowsEqualsInterleavedOnPermutedRows) {
  LlmConfig c;
  c.architecture = "llama";
  c.n_layers = 2;
  c.d_model = 96;
  c.n_heads = 6;
  c.n_kv_heads = 2;  // GQA: k_proj is permuted with the KV head count
  c.head_dim = 16;
  c.d_ff = 160;
  c.vocab = 101;
  c.context_length = 64;
  c.norm_eps = 1e-5f;
  c.rope.n_rot = c.head_dim;
  c.rope.theta_base = 10000.f;
  std::mt19937 rng(7);
  MapWeights hf;
  const int64_t d = c.d_model, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  auto mat = [&](const std::string& n, int64_t r, int64_t k) {
    hf.t[n] = random_matrix(rng, r, k, -1.f / std::sqrt(float(k)), 1.f / std::sqrt(float(k)));
  };
  mat("token_embd.weight", c.vocab, d);
  mat("output.weight", c.vocab, d);
  hf.t["output_norm.weight"] = random_matrix(rng, 1, d, 0.8f, 1.2f);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    hf.t[p + "attn_norm.weight"] = random_matrix(rng, 1, d, 0.8f, 1.2f);
    hf.t[p + "ffn_norm.weight"] = random_matrix(rng, 1, d, 0.8f, 1.2f);
    mat(p + "attn_q.weight", q, d);
    mat(p + "attn_k.weight", kv, d);
    mat(p + "attn_v.weight", kv, d);
    mat(p + "attn_output.weight", d, q);
    mat(p + "ffn_gate.weight", c.d_ff, d);
    mat(p + "ffn_up.weight", c.d_ff, d);
    mat(p + "ffn_down.weight", d, c.d_ff);
  }
  MapWeights gguf = hf;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    gguf.t[p + "attn_q.weight"] = permute_rows(hf.t[p + "attn_q.weight"], c.n_heads, c.head_dim);
    gguf.t[p + "attn_k.weight"] = permute_rows(hf.t[p + "attn_k.weight"], c.n_kv_heads, c.head_dim);
  }
  LlmConfig c_hf = c, c_gguf = c;
  c_hf.rope.layout = ref::RopeLayout::kHalfSplit;
  c_gguf.rope.layout = ref::RopeLayout::kInterleaved;
  auto m_hf = llama_create(c_hf, hf);
  auto m_gguf = llama_create(c_gguf, gguf);
  auto m_wrong = llama_create(c_gguf, hf);  // unpermuted rows with interleaved RoPE: wrong

  const int64_t n = 23;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % c.vocab);
  const std::vector<int32_t> blocks = {2, 0, 1};  // 3 blocks of 8 rows, deliberately shuffled
  const SeqChunk chunk{.start = 0, .n_tokens = static_cast<int32_t>(n), .blocks = blocks,
                       .logits = true};
  ThreadPool pool(2);
  auto run = [&](CausalLm& m) {
    KvCache cache = m.make_kv_cache(/*n_blocks=*/3, /*block_size=*/8, DType::kF32);
    std::vector<float> logits(n * c.vocab, std::nanf(""));
    m.forward(ids, {&chunk, 1}, cache, logits.data(), /*all_logits=*/true, pool);
    return logits;
  };
  const auto a = run(*m_hf), b = run(*m_gguf), w = run(*m_wrong);
  double num = 0, den = 0, wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << i;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
    wrong += double(w[i] - b[i]) * (w[i] - b[i]);
  }
  EXPECT_LT(num / den, 1e-12) << "nMSE half-split/HF rows vs interleaved/permuted rows";
  EXPECT_GT(wrong / den, 1e-4) << "the test must be able to see a wrong layout";
}

TEST(llama_hf, SafetensorsWeightsViewCopyAndErrors) {
  // One F16 tensor [2, 3] at data offset 0 of a file whose header length is odd (misaligned
  // data), one BF16 [3] and one I64 [1].
  std::string header = R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
                       R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[12,18]},)"
                       R"("i":{"dtype":"I64","shape":[1],"data_offsets":[18,26]}})";
  if (header.size() % 2 == 0) header += ' ';
  std::vector<uint8_t> bytes(8 + header.size() + 26);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  const uint16_t halves[6] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600};  // 1..6
  std::memcpy(bytes.data() + 8 + header.size(), halves, 12);
  const uint16_t bf[3] = {0x3f80, 0x4000, 0x4040};  // 1, 2, 3
  std::memcpy(bytes.data() + 8 + header.size() + 12, bf, 6);
  auto f = safetensors::File::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  // A checkpoint over a parsed file needs Checkpoint::open; exercise the weights through a
  // temporary file instead.
  const std::string path = ::testing::TempDir() + "/w.safetensors";
  FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(fp);
  std::fwrite(bytes.data(), 1, bytes.size(), fp);
  std::fclose(fp);
  auto ck = safetensors::Checkpoint::open(path);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  SafetensorsWeights w(**ck, [](std::string_view n) -> std::optional<std::string> {
    if (n == "W") return "w";
    if (n == "B") return "b";
    if (n == "I") return "i";
    return std::nullopt;
  });
  Tensor t = w.matrix("W", 2, 3);  // misaligned in the mapping: copied
  EXPECT_EQ(t.dtype(), DType::kF16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 2, 0u);
  EXPECT_EQ(t.data<uint16_t>()[5], 0x4600);
  Tensor v = weight_vector_f32(w, "B", 3);
  EXPECT_EQ(v.data<float>()[2], 3.f);
  EXPECT_FALSE(w.has("nope"));
  EXPECT_TRUE(w.has("W"));
  try {
    w.matrix("W", 3, 2);
    FAIL() << "wrong shape accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("has shape [2, 3], expected [3, 2]"), std::string::npos)
        << e.what();
  }
  try {
    w.matrix("I", 1, 1);
    FAIL() << "I64 weight accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
  try {
    w.matrix("nope", 1, 1);
    FAIL() << "missing tensor accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera::models
