// HF config.json parsing (defaults, both RoPE spellings, hostile values), the GGUF -> HF weight
// name map, llama3 RoPE factors and the HF tokenizer.json reader's validation.
#include "formats/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/llama_hf.h"
#include "tokenizer/tokenizer.h"

namespace tessera::hf {
namespace {

const char* kLlama = R"({"model_type":"llama","hidden_size":64,"intermediate_size":128,
  "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":300)";

std::string cfg(const std::string& extra = "") {
  return std::string(kLlama) + (extra.empty() ? "" : "," + extra) + "}";
}

void expect_error(const std::string& text, ErrorCode code, const std::string& substr) {
  auto c = parse_text_config(text);
  ASSERT_FALSE(c.ok()) << "accepted: " << text;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(substr), std::string::npos) << c.status().message();
}

TEST(hf_config, DefaultsFollowTransformers) {
  auto c = parse_text_config(cfg());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->sliding_window);
}

TEST(hf_config, RopeBothSpellings) {
  // transformers < 5: rope_theta + rope_scaling
  auto a = parse_text_config(
      cfg(R"("rope_theta":500000.0,"rope_scaling":{"type":"linear","factor":4})"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_DOUBLE_EQ(a->rope_theta, 500000.0);
  EXPECT_EQ(a->rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(a->rope_scaling.factor, 4.0);
  // transformers >= 5: rope_parameters
  auto b = parse_text_config(cfg(
      R"("rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,
         "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})"));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->rope_scaling.type, "llama3");
  EXPECT_EQ(b->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(b->rope_theta, 500000.0);
  auto d = parse_text_config(cfg(R"("rope_parameters":{"rope_type":"default","rope_theta":1e6})"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rope_scaling.type, "default");
  EXPECT_DOUBLE_EQ(d->rope_theta, 1e6);
  expect_error(cfg(R"("rope_scaling":{"type":"longrope","short_factor":[1]})"),
               ErrorCode::kUnsupported, "RoPE scaling type 'longrope'");
  expect_error(cfg(R"("rope_scaling":{"rope_type":"dynamic","factor":4})"), ErrorCode::kUnsupported,
               "'dynamic'");
  expect_error(
      cfg(R"("rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":1})"),
      ErrorCode::kCorruptData, "high_freq_factor > low_freq_factor");
  expect_error(cfg(R"("rope_scaling":[1])"), ErrorCode::kCorruptData, "not an object");
}

TEST(hf_config, FamiliesAndWindows) {
  auto m = parse_text_config(R"({"model_type":"mistral","hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":32,
      "vocab_size":10,"sliding_window":4096,"max_position_embeddings":32768})");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->head_dim, 32);
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_EQ(models::llm_config_from_hf(*m).context_length, 4096);
  // Qwen2 windows only with use_sliding_window.
  auto q = parse_text_config(R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"sliding_window":4096,
      "use_sliding_window":false,"max_position_embeddings":32768,"eos_token_id":[5,7]})");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_FALSE(q->sliding_window);
  EXPECT_EQ(q->eos_token_ids, (std::vector<int64_t>{5, 7}));
  const models::LlmConfig lc = models::llm_config_from_hf(*q);
  EXPECT_TRUE(lc.qkv_bias);
  EXPECT_EQ(lc.rope.layout, ref::RopeLayout::kHalfSplit);
  EXPECT_EQ(lc.context_length, 32768);
  EXPECT_FALSE(lc.qk_norm);
  // Qwen3: q / k norms, no biases unless attention_bias; windows as Qwen2's.
  auto q3 = parse_text_config(R"({"model_type":"qwen3","hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":1,"num_attention_heads":4,"head_dim":128,"vocab_size":10,
      "sliding_window":4096,"use_sliding_window":true,"max_position_embeddings":32768})");
  ASSERT_TRUE(q3.ok()) << q3.status().to_string();
  EXPECT_EQ(q3->sliding_window, 4096);
  const models::LlmConfig l3 = models::llm_config_from_hf(*q3);
  EXPECT_TRUE(l3.qk_norm);
  EXPECT_FALSE(l3.qkv_bias);
  EXPECT_EQ(l3.head_dim, 128);
  EXPECT_EQ(l3.rope.layout, ref::RopeLayout::kHalfSplit);
}

TEST(hf_config, HostileValues) {
  expect_error("[]", ErrorCode::kCorruptData, "not a valid JSON object");
  expect_error("{", ErrorCode::kCorruptData, "not a valid JSON object");
  expect_error(std::string(40, '[') + std::string(40, ']'), ErrorCode::kCorruptData,
               "nests deeper");
  expect_error(R"({"model_type":"gpt2"})", ErrorCode::kUnsupported, "model_type 'gpt2'");
  expect_error(R"({"model_type":"llama"})", ErrorCode::kCorruptData, "missing 'hidden_size'");
  expect_error(cfg(R"("num_key_value_heads":3)"), ErrorCode::kCorruptData, "not a multiple");
  expect_error(R"({"model_type":"llama","hidden_size":"64"})", ErrorCode::kCorruptData,
               "'hidden_size' is not an integer");
  expect_error(R"({"model_type":"llama","hidden_size":-1})", ErrorCode::kCorruptData,
               "out of range");
  expect_error(R"({"model_type":"llama","hidden_size":18446744073709551615})",
               ErrorCode::kCorruptData, "out of range");
  expect_error(R"({"model_type":"llama","hidden_size":64.5})", ErrorCode::kCorruptData,
               "not an integer");
  expect_error(cfg(R"("head_dim":7)"), ErrorCode::kCorruptData, "even number");
  expect_error(cfg(R"("rms_norm_eps":-1)"), ErrorCode::kCorruptData, "'rms_norm_eps'");
  expect_error(cfg(R"("rope_theta":0)"), ErrorCode::kCorruptData, "'rope_theta'");
  expect_error(cfg(R"("tie_word_embeddings":1)"), ErrorCode::kCorruptData, "not a boolean");
  expect_error(cfg(R"("hidden_act":"gelu")"), ErrorCode::kUnsupported, "hidden_act 'gelu'");
  expect_error(cfg(R"("mlp_bias":true)"), ErrorCode::kUnsupported, "mlp_bias");
  expect_error(cfg(R"("partial_rotary_factor":0.5)"), ErrorCode::kUnsupported,
               "partial_rotary_factor");
}

TEST(hf_config, TensorNameMap) {
  EXPECT_EQ(llama_tensor_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(llama_tensor_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(llama_tensor_name("blk.12.attn_q.bias"), "model.layers.12.self_attn.q_proj.bias");
  EXPECT_EQ(llama_tensor_name("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(llama_tensor_name("blk.3.attn_k_norm.weight"), "model.layers.3.self_attn.k_norm.weight");
  EXPECT_FALSE(llama_tensor_name("blk.x.attn_q.weight"));
  EXPECT_FALSE(llama_tensor_name("blk..attn_q.weight"));
  EXPECT_FALSE(llama_tensor_name("blk.0.nope"));
  EXPECT_FALSE(llama_tensor_name("rope_freqs.weight"));  // computed, not stored
}

TEST(hf_config, Llama3RopeFactorsMatchTheFormula) {
  auto c = parse_text_config(cfg(
      R"("rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,
         "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})"));
  ASSERT_TRUE(c.ok());
  const std::vector<float> f = models::llama3_rope_freq_factors(*c, 128);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);                                      // highest frequency: unchanged
  EXPECT_FLOAT_EQ(f[63], 8.0f);                                     // lowest: divided by the factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);  // monotone in wavelength
  // A medium frequency, by the published formula.
  for (int i = 0; i < 64; ++i) {
    const double freq = std::pow(500000.0, -2.0 * i / 128), wl = 2 * M_PI / freq;
    if (wl < 8192 / 4.0 || wl > 8192 / 1.0) continue;
    const double smooth = (8192 / wl - 1) / 3;
    EXPECT_NEAR(f[i], 1.0 / ((1 - smooth) / 8 + smooth), 1e-5) << i;
  }
}

TEST(hf_config, YarnParametersFollowTransformers) {
  // Qwen2.5's published long-context setting, in the older spelling.
  auto a = parse_text_config(cfg(R"("max_position_embeddings":32768,"rope_theta":1e6,
      "rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":32768})"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const RopeScaling& r = a->rope_scaling;
  EXPECT_EQ(r.type, "yarn");
  EXPECT_EQ(r.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(r.beta_fast, 32);
  EXPECT_DOUBLE_EQ(r.beta_slow, 1);
  EXPECT_TRUE(r.truncate);
  EXPECT_DOUBLE_EQ(r.attention_factor, 0.1 * std::log(4.0) + 1);
  // The model config: the divisors come from the yarn parameters, the multiplier goes on the
  // scores as its square.
  const models::LlmConfig lc = models::llm_config_from_hf(*a);
  ASSERT_TRUE(lc.yarn);
  EXPECT_DOUBLE_EQ(lc.yarn->factor, 4.0);
  EXPECT_EQ(lc.yarn->original_context, 32768);
  EXPECT_FLOAT_EQ(models::attention_scale(lc),
                  static_cast<float>(std::pow(0.1 * std::log(4.0) + 1, 2) / 4));  // head_dim 16

  // An explicit attention_factor wins; else mscale / mscale_all_dim; factor defaults to
  // max_position_embeddings / original; a top-level original_max_position_embeddings wins.
  auto b = parse_text_config(cfg(R"("rope_parameters":{"rope_type":"yarn","rope_theta":1e4,
      "factor":8,"attention_factor":1.5,"beta_fast":16,"beta_slow":2,"truncate":false,
      "mscale":1,"mscale_all_dim":1,"original_max_position_embeddings":256})"));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_DOUBLE_EQ(b->rope_scaling.attention_factor, 1.5);
  EXPECT_DOUBLE_EQ(b->rope_scaling.beta_fast, 16);
  EXPECT_FALSE(b->rope_scaling.truncate);
  auto c = parse_text_config(cfg(R"("max_position_embeddings":4096,"rope_parameters":{
      "rope_type":"yarn","rope_theta":1e4,"mscale":0.707,"mscale_all_dim":0.707,
      "original_max_position_embeddings":1024})"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, 1.0);  // equal mscales cancel
  auto d = parse_text_config(cfg(R"("original_max_position_embeddings":512,
      "rope_parameters":{"rope_type":"yarn","rope_theta":1e4,"factor":2,
      "original_max_position_embeddings":1024})"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rope_scaling.original_max_position_embeddings, 512);
  auto e = parse_text_config(cfg(R"("rope_scaling":{"type":"yarn","factor":2})"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->rope_scaling.original_max_position_embeddings, 2048);  // max_position_embeddings

  auto m = parse_text_config(cfg(R"("rope_scaling":{"type":"yarn","factor":4,"mscale":2,
      "mscale_all_dim":0.5,"original_max_position_embeddings":512})"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_DOUBLE_EQ(m->rope_scaling.attention_factor,
                   (0.2 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1));

  expect_error(cfg(R"("rope_scaling":{"type":"yarn","factor":-2})"), ErrorCode::kCorruptData,
               "'factor'");
  // a negative mscale_all_dim: 0.1 * -20 * ln 4 + 1 < 0, a negative attention factor
  expect_error(cfg(R"("rope_scaling":{"type":"yarn","factor":4,"mscale":1,
      "mscale_all_dim":-20})"),
               ErrorCode::kCorruptData, "attention factor");
  expect_error(cfg(R"("rope_theta":1,"rope_scaling":{"type":"yarn","factor":4})"),
               ErrorCode::kCorruptData, "rope_theta > 1");
  expect_error(cfg(R"("rope_scaling":{"type":"yarn","factor":2,"beta_fast":"x"})"),
               ErrorCode::kCorruptData, "'beta_fast' is not a number");
  expect_error(cfg(R"("rope_scaling":{"type":"yarn","factor":2,"attention_factor":0})"),
               ErrorCode::kCorruptData, "'attention_factor'");
  expect_error(cfg(R"("rope_scaling":{"type":"yarn","factor":2,"truncate":1})"),
               ErrorCode::kCorruptData, "'truncate' is not a boolean");
}

TEST(hf_config, YarnDivisorsKeepHighAndDivideLowFrequencies) {
  // head 128, theta 1e6, original 32768 (Qwen2.5): the ramp spans pairs floor(pair at 32 turns)
  // .. ceil(pair at 1 turn) of the published formula n_rot ln(ctx / (2 pi turns)) / (2 ln theta).
  models::YarnScaling y{.factor = 4, .original_context = 32768};
  const std::vector<float> f = models::yarn_freq_divisors(y, 128, 1e6);
  ASSERT_EQ(f.size(), 64u);
  const auto pair_at = [](double turns) {
    return 128 * std::log(32768 / (turns * 2 * M_PI)) / (2 * std::log(1e6));
  };
  const int low = static_cast<int>(std::floor(pair_at(32))),
            high = static_cast<int>(std::ceil(pair_at(1)));
  ASSERT_GT(low, 0);
  ASSERT_LT(high, 63);
  for (int i = 0; i <= low; ++i) EXPECT_FLOAT_EQ(f[i], 1.0f) << i;
  for (int i = high; i < 64; ++i) EXPECT_FLOAT_EQ(f[i], 4.0f) << i;
  for (int i = low + 1; i < high; ++i) {
    const double keep = 1 - static_cast<double>(i - low) / (high - low);
    EXPECT_NEAR(f[i], 1 / ((1 - keep) / 4 + keep), 1e-6) << i;
  }
}

// ---- tokenizer.json ----

std::string tok_json(const std::string& pre, const std::string& extra = "") {
  return R"({"added_tokens":[{"id":3,"content":"<s>","special":true},{"id":4,"content":"<u>","special":false}],
    "normalizer":null,"pre_tokenizer":)" +
         pre +
         R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[3],"tokens":["<s>"]}}},
    "model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]])" +
         extra + "}}";
}
const char* kByteLevel = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";

TEST(hf_tokenizer, ReadsVocabMergesAddedTokensAndTemplate) {
  auto c = Tokenizer::config_from_hf_json(tok_json(kByteLevel));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->tokens, (std::vector<std::string>{"a", "b", "ab", "<s>", "<u>"}));
  EXPECT_EQ(c->token_types, (std::vector<int32_t>{1, 1, 1, kTokenControl, kTokenUserDefined}));
  EXPECT_EQ(c->merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(c->bos_id, 3);
  EXPECT_EQ(c->add_bos, true);
  auto tok = Tokenizer::from_hf_json(tok_json(kByteLevel));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode("ab<u>ba<s>", {.add_bos = true, .parse_special = true}),
            (std::vector<int32_t>{3, 2, 4, 1, 0, 3}));
  EXPECT_EQ((*tok)->encode("ab<s>", {.add_bos = false, .parse_special = false}),
            (std::vector<int32_t>{2}));  // "<", "s", ">" are not in this vocabulary
  // tokenizer_config.json overrides the template's BOS decision.
  auto off = Tokenizer::config_from_hf_json(tok_json(kByteLevel), R"({"add_bos_token":false})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->add_bos, false);
}

TEST(hf_tokenizer, ConfigEosIdsEndGeneration) {
  auto c = Tokenizer::config_from_hf_json(tok_json(kByteLevel), R"({"eos_token":"<u>"})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->eos_id, 4);
  c->extra_eog_ids = {1, 999};  // config.json / generation_config.json ids (out of range ignored)
  auto tok = Tokenizer::from_config(std::move(*c));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_TRUE((*tok)->is_end_of_generation(4));
  EXPECT_TRUE((*tok)->is_end_of_generation(1));
  EXPECT_FALSE((*tok)->is_end_of_generation(0));
  EXPECT_FALSE((*tok)->is_end_of_generation(3));
}

TEST(hf_tokenizer, GapsBecomeUnusedPlaceholders) {
  const std::string j = R"({"added_tokens":[{"id":9,"content":"<x>","special":true}],
    "pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}})";
  auto c = Tokenizer::config_from_hf_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->tokens.size(), 10u);
  EXPECT_EQ(c->tokens[5], "[PAD5]");
  EXPECT_EQ(c->token_types[5], kTokenUnused);
  EXPECT_FALSE(c->add_bos.value_or(true));
}

void expect_tok_error(const std::string& j, ErrorCode code, const std::string& substr) {
  auto c = Tokenizer::from_hf_json(j);
  ASSERT_FALSE(c.ok()) << "accepted: " << j;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(substr), std::string::npos) << c.status().message();
}

TEST(hf_tokenizer, RejectsHostileOrUnsupportedFiles) {
  expect_tok_error("{", ErrorCode::kCorruptData, "not a valid JSON object");
  expect_tok_error(std::string(100, '[') + std::string(100, ']'), ErrorCode::kCorruptData, "nests");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"}})", ErrorCode::kCorruptData,
                   "missing 'model'");
  expect_tok_error(R"({"model":{"type":"WordPiece","vocab":{}}})", ErrorCode::kUnsupported,
                   "model type 'WordPiece'");
  expect_tok_error(tok_json(kByteLevel, R"(,"byte_fallback":true)"), ErrorCode::kUnsupported,
                   "byte_fallback");
  expect_tok_error(tok_json(R"({"type":"Whitespace"})"), ErrorCode::kUnsupported,
                   "pre-tokenizer 'Whitespace'");
  expect_tok_error(tok_json(R"({"type":"Split","pattern":{"Regex":"a"},"behavior":"Isolated"})"),
                   ErrorCode::kUnsupported, "without a ByteLevel step");
  expect_tok_error(
      tok_json(
          R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"("},"behavior":"Isolated"},{"type":"ByteLevel"}]})"),
      ErrorCode::kUnsupported, "regex failed to compile");
  expect_tok_error(tok_json(R"({"type":"Split","pattern":{"Regex":"a"},"behavior":"Removed"})"),
                   ErrorCode::kUnsupported, "behavior other than Isolated");
  expect_tok_error(tok_json(R"({"type":"ByteLevel","add_prefix_space":true})"),
                   ErrorCode::kUnsupported, "add_prefix_space");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":-1}}})",
                   ErrorCode::kCorruptData, "not a token id");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":99999999}}})",
                   ErrorCode::kCorruptData, "not a token id");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0,"b":0}}})",
                   ErrorCode::kCorruptData, "share id 0");
  expect_tok_error(
      R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0},"merges":[1]}})",
      ErrorCode::kCorruptData, "merge");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0}},
      "added_tokens":[{"id":0,"content":"zz","special":true}]})",
                   ErrorCode::kCorruptData, "reuses id 0");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0}},
      "normalizer":{"type":"Lowercase"}})",
                   ErrorCode::kUnsupported, "normalizer 'Lowercase'");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0}},
      "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<nope>"}}]}})",
                   ErrorCode::kCorruptData, "unknown token '<nope>'");
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0}},
      "post_processor":{"type":"BertProcessing"}})",
                   ErrorCode::kUnsupported, "post_processor 'BertProcessing'");
  // An id that is too large for the vocabulary in the template processor.
  expect_tok_error(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0}},
      "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"a"}}],
      "special_tokens":{"a":{"ids":[-5]}}}})",
                   ErrorCode::kCorruptData, "not a token id");
}

}  // namespace
}  // namespace tessera::hf
