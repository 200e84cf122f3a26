// `tessera template`: renders a conversation with the model's chat template.
//
//   tessera template [MODEL] [--no-generation-prompt] [--chat-template FILE] --msg ROLE=CONTENT ...
//     MODEL: a .gguf file or a Hugging Face checkpoint folder (its tokenizer gives bos/eos)
//     --chat-template FILE: render FILE's template instead of the model's own
//
// Prints the prompt exactly as rendered (no newline added), so scripts can compare bytes.
#include <cstdio>
#include <string>

#include "command.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

int cmd_template(int argc, char** argv) {
  Args args(argc, argv);
  const bool no_gen = args.flag("no-generation-prompt");
  std::string template_file;
  const bool has_template_file = args.value("chat-template", &template_file);
  const std::vector<std::string> msgs = args.values("msg");
  std::string err;
  std::vector<std::string> pos = args.positionals(&err);
  if (!err.empty() || pos.size() > 1) {
    if (!err.empty()) std::fprintf(stderr, "tessera template: %s\n", err.c_str());
    std::fprintf(
        stderr,
        "usage: tessera template [MODEL] [--no-generation-prompt] [--chat-template FILE] "
        "--msg ROLE=CONTENT ...\n");
    return 2;
  }
  std::vector<ChatMessage> messages;
  for (const std::string& m : msgs) {
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "tessera template: --msg wants ROLE=CONTENT, got '%s'\n", m.c_str());
      return 2;
    }
    messages.push_back({m.substr(0, eq), m.substr(eq + 1)});
  }
  const std::string model = pos.empty() ? default_model_path() : pos[0];
  auto tok = open_tokenizer(model);
  if (!tok) {
    std::fprintf(stderr, "tessera template: %s: %s\n", model.c_str(),
                 tok.status().to_string().c_str());
    return 1;
  }
  // The template text: GGUF metadata, or the checkpoint's chat_template.jinja /
  // tokenizer_config.json.
  std::optional<std::string> text;
  if (has_template_file) {
    std::string t, why;
    if (!read_text_file(template_file, &t, &why)) {
      std::fprintf(stderr, "tessera template: %s\n", why.c_str());
      return 1;
    }
    text = std::move(t);
  } else if (hf::is_checkpoint_path(model)) {
    auto files = hf::locate(model, /*require_weights=*/false);
    auto t = files ? hf::read_chat_template(*files) : Expected<std::string>(files.status());
    if (!t) {
      std::fprintf(stderr, "tessera template: %s\n", t.status().to_string().c_str());
      return 1;
    }
    if (!t->empty()) text = std::move(*t);
  } else {
    auto file = gguf::File::open(model);
    if (!file) {
      std::fprintf(stderr, "tessera template: %s: %s\n", model.c_str(),
                   file.status().to_string().c_str());
      return 1;
    }
    if (auto t = (*file)->get_string("tokenizer.chat_template")) text = std::string(*t);
  }
  auto tmpl = ChatTemplate::from_template_text(
      text ? std::optional<std::string_view>(*text) : std::nullopt, **tok);
  if (!tmpl) {
    std::fprintf(stderr, "tessera template: %s\n", tmpl.status().to_string().c_str());
    return 1;
  }
  auto out = tmpl->try_render(messages, !no_gen);
  if (!out) {
    std::fprintf(stderr, "tessera template: %s\n", out.status().to_string().c_str());
    return 1;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace

TESSERA_CLI_COMMAND("template", "render a conversation with the model's chat template",
                    cmd_template);

}  // namespace tessera::cli
