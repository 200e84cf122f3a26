// libFuzzer target for the Hugging Face checkpoint JSON readers: the same bytes go through
// config.json parsing (and LlmConfig construction, with YaRN's divisors and attention scale
// finite and positive), generation_config.json's eos list and tokenizer.json (+ tokenizer
// building, NFC normalizer included). Accepted tokenizers encode a few texts; every id must
// be in range. Every rejection must say why.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "formats/hf_checkpoint.h"
#include "models/llama_hf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cfg = hf::parse_text_config(text);
  if (cfg) {
    try {
      const models::LlmConfig c = models::llm_config_from_hf(*cfg);
      if (c.n_layers < 1 || c.head_dim < 2 || c.n_heads % c.n_kv_heads != 0) std::abort();
      if (cfg->rope_scaling.type == "llama3")
        (void)models::llama3_rope_freq_factors(*cfg, c.head_dim);
      // YaRN: finite positive divisors and attention scale from any accepted config.
      if (!(models::attention_scale(c) > 0) || !std::isfinite(models::attention_scale(c)))
        std::abort();
      if (c.yarn)
        for (float f : models::yarn_freq_divisors(*c.yarn, c.rope.n_rot, c.rope.theta_base))
          if (!(f > 0) || !std::isfinite(f)) std::abort();
    } catch (const Error&) {
    }
  } else if (cfg.status().message().empty()) {
    std::abort();
  }
  (void)hf::parse_generation_eos(text);
  auto tok = Tokenizer::from_hf_json(text);
  if (!tok) {
    if (tok.status().message().empty()) std::abort();
    return 0;
  }
  for (std::string_view s : {"Hello world 123", "<s>a b</s>", "\xc3\xa9\xe2\x82\xac \xff"}) {
    for (bool special : {true, false})
      for (int32_t id : (*tok)->encode(s, {.add_bos = true, .parse_special = special}))
        if (id < 0 || id >= (*tok)->n_vocab()) std::abort();
  }
  return 0;
}
