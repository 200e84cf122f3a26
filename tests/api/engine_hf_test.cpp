// Engine::load on Hugging Face checkpoint folders written here (no Python): a tiny random
// Qwen2 model with a byte-level tokenizer.json loads from the folder, from its config.json and
// sharded (the same greedy tokens), and in bf16 it loads and runs; broken folders fail with
// errors that name the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "tessera/engine.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct T {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Writes tensors as F32 or BF16 (rounded) safetensors.
void write_safetensors(const fs::path& p, const std::vector<T>& ts, bool bf16) {
  std::string header = "{";
  uint64_t off = 0;
  for (const T& t : ts) {
    const uint64_t n = t.values.size() * (bf16 ? 2 : 4);
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" +
              (bf16 ? "BF16" : "F32") + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(off) + "," + std::to_string(off + n) + "]}";
    off += n;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream f(p, std::ios::binary);
  const uint64_t hn = header.size();
  f.write(reinterpret_cast<const char*>(&hn), 8);
  f << header;
  for (const T& t : ts)
    for (float v : t.values) {
      if (bf16) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t h = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
        f.write(reinterpret_cast<const char*>(&h), 2);
      } else {
        f.write(reinterpret_cast<const char*>(&v), 4);
      }
    }
}

// Byte-level vocabulary: the 256 byte symbols, "<s>" (BOS via the template) and "</s>".
std::string tokenizer_json() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, utf8::byte_to_codepoint()[b]);
    std::string esc;
    for (char c : s) {
      if (c == '"' || c == '\\') esc += '\\';
      esc += c;
    }
    vocab += (b ? "," : "") + std::string("\"") + esc + "\":" + std::to_string(b);
  }
  return R"({"added_tokens":[{"id":256,"content":"<s>","special":true},{"id":257,"content":"</s>","special":true}],
  "normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
  "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
  "special_tokens":{"<s>":{"id":"<s>","ids":[256],"tokens":["<s>"]}}},
  "model":{"type":"BPE","vocab":{)" +
         vocab + "},\"merges\":[]}}";
}

constexpr int kVocab = 260, kD = 64, kHeads = 4, kKv = 2, kHd = 16, kFf = 96, kLayers = 2;

std::vector<T> random_qwen2(uint32_t seed) {
  std::mt19937 rng(seed);
  auto mat = [&](std::string n, int64_t r, int64_t c, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    T t{std::move(n), {r, c}, std::vector<float>(r * c)};
    if (r == 1) t.shape = {c};
    for (float& v : t.values) v = u(rng);
    return t;
  };
  const float s = 1.f / 8;
  std::vector<T> ts = {mat("model.embed_tokens.weight", kVocab, kD, -1, 1),
                       mat("model.norm.weight", 1, kD, 0.8f, 1.2f)};
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back(mat(p + "input_layernorm.weight", 1, kD, 0.8f, 1.2f));
    ts.push_back(mat(p + "post_attention_layernorm.weight", 1, kD, 0.8f, 1.2f));
    ts.push_back(mat(p + "self_attn.q_proj.weight", kHeads * kHd, kD, -s, s));
    ts.push_back(mat(p + "self_attn.q_proj.bias", 1, kHeads * kHd, -0.5f, 0.5f));
    ts.push_back(mat(p + "self_attn.k_proj.weight", kKv * kHd, kD, -s, s));
    ts.push_back(mat(p + "self_attn.k_proj.bias", 1, kKv * kHd, -0.5f, 0.5f));
    ts.push_back(mat(p + "self_attn.v_proj.weight", kKv * kHd, kD, -s, s));
    ts.push_back(mat(p + "self_attn.v_proj.bias", 1, kKv * kHd, -0.5f, 0.5f));
    ts.push_back(mat(p + "self_attn.o_proj.weight", kD, kHeads * kHd, -s, s));
    ts.push_back(mat(p + "mlp.gate_proj.weight", kFf, kD, -s, s));
    ts.push_back(mat(p + "mlp.up_proj.weight", kFf, kD, -s, s));
    ts.push_back(mat(p + "mlp.down_proj.weight", kD, kFf, -0.1f, 0.1f));
  }
  return ts;
}

std::string config_json(const std::string& extra = "") {
  return R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":260,"max_position_embeddings":128,
    "rms_norm_eps":1e-6,"rope_theta":10000.0,"tie_word_embeddings":true,"eos_token_id":257)" +
         extra + "}";
}

class HfFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("tessera_hf_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("config.json", config_json());
    write("tokenizer.json", tokenizer_json());
    write_safetensors(dir_ / "model.safetensors", random_qwen2(1), false);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::vector<int32_t> greedy(const std::string& path, int n = 12) {
    auto e = Engine::load(path);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e) return {};
    GenerationParams p;
    p.max_tokens = n;
    p.ignore_eos = true;
    auto r = (*e)->generate("Hello there", p);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r ? r->tokens : std::vector<int32_t>{};
  }
  fs::path dir_;
};

TEST_F(HfFolder, LoadsFromFolderOrConfigAndGenerates) {
  auto e = Engine::load(dir_.string());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const ModelSummary& s = (*e)->summary();
  EXPECT_EQ(s.architecture, "qwen2");
  EXPECT_EQ(s.n_layers, kLayers);
  EXPECT_EQ(s.vocab, kVocab);
  EXPECT_EQ(s.name, dir_.filename().string());
  auto ids = (*e)->tokenize("Hi");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{256, 'H', 'i'}));  // BOS from the template
  const auto a = greedy(dir_.string());
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(greedy((dir_ / "config.json").string()), a);
  // The same f32 weights sharded over two files reproduce the tokens exactly; in bf16 (other
  // numbers) the shards must load and run.
  fs::remove(dir_ / "model.safetensors");
  auto ts = random_qwen2(1);
  const std::vector<T> first(ts.begin(), ts.begin() + 5), second(ts.begin() + 5, ts.end());
  write_safetensors(dir_ / "a.safetensors", first, false);
  write_safetensors(dir_ / "b.safetensors", second, false);
  std::string map;
  for (size_t i = 0; i < ts.size(); ++i)
    map += (i ? "," : "") + std::string("\"") + ts[i].name + "\":\"" + (i < 5 ? "a" : "b") +
           ".safetensors\"";
  write("model.safetensors.index.json", "{\"weight_map\":{" + map + "}}");
  EXPECT_EQ(greedy(dir_.string()), a);
  write_safetensors(dir_ / "a.safetensors", first, true);
  write_safetensors(dir_ / "b.safetensors", second, true);
  EXPECT_EQ(greedy(dir_.string()).size(), 12u);
}

TEST_F(HfFolder, BrokenFoldersAreNamed) {
  auto check = [&](const char* what, ErrorCode code, const std::string& message) {
    auto e = Engine::load(dir_.string());
    ASSERT_FALSE(e.ok()) << what;
    EXPECT_EQ(e.status().code(), code) << what << ": " << e.status().to_string();
    EXPECT_NE(e.status().message().find(message), std::string::npos)
        << what << ": " << e.status().message();
  };
  write("config.json", config_json(R"(,"rope_scaling":{"type":"dynamic","factor":2})"));
  check("dynamic", ErrorCode::kUnsupported, "RoPE scaling type 'dynamic'");
  write("config.json", config_json(R"(,"hidden_size":"x")"));
  check("type", ErrorCode::kCorruptData, "'hidden_size' is not an integer");
  write("config.json", config_json(R"(,"tie_word_embeddings":false)"));
  check("untied without lm_head", ErrorCode::kCorruptData, "missing tensor 'lm_head.weight'");
  write("config.json", config_json(R"(,"intermediate_size":97)"));
  check("shape", ErrorCode::kCorruptData, "expected [97, 64]");
  write("config.json", config_json());
  write("tokenizer.json", R"({"model":{"type":"Unigram","vocab":[]}})");
  check("tokenizer", ErrorCode::kUnsupported, "model type 'Unigram'");
  fs::remove(dir_ / "tokenizer.json");
  check("no tokenizer", ErrorCode::kNotFound, "no tokenizer.json");
  write("model.safetensors", std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  check("empty weights", ErrorCode::kCorruptData, "missing tensor");
  fs::remove(dir_ / "model.safetensors");
  check("no weights", ErrorCode::kNotFound, "model.safetensors");
  fs::remove(dir_ / "config.json");
  check("no config", ErrorCode::kNotFound, "no config.json");
}

}  // namespace
}  // namespace tessera
