// Subcommand registry of the `tessera` CLI (an open set: each command file registers itself).
//
//   static int cmd_info(int argc, char** argv);   // argv[0] is the subcommand name
//   TESSERA_CLI_COMMAND("info", "print a model's metadata and tensors", cmd_info);
//   TESSERA_CLI_HIDDEN_COMMAND("dump-tensor", "...", cmd_dump_tensor);  // not in the usage text
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
  bool hidden = false;  // runnable, but not listed in the usage text (test/debug tools)
};

bool register_command(const Command& c);
const std::vector<Command>& commands();

// Tiny argument scanner for "--flag", "--key value" and positionals.
class Args {
 public:
  Args(int argc, char** argv);  // skips argv[0]
  bool flag(std::string_view name);                                  // consumes --name
  bool value(std::string_view name, std::string* out);               // consumes --name V
  std::vector<std::string> values(std::string_view name);           // repeated --name V
  // Remaining arguments; an unconsumed "--x" is reported through `error`.
  std::vector<std::string> positionals(std::string* error) const;

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

// The tokenizer of a GGUF file, a Hugging Face checkpoint folder (or its config.json), or a
// tokenizer.json (with tokenizer_config.json beside it when present).
Expected<std::unique_ptr<Tokenizer>> open_tokenizer(const std::string& path);

// `tessera info` for a Hugging Face checkpoint folder (or its config.json).
int info_hf(const std::string& path);

// A whole decimal number in [lo, hi] (the whole string; no overflow). False otherwise.
bool parse_int(const std::string& s, long lo, long hi, long* out);

// A whole file's bytes (a chat template file, at most kMaxTextFileBytes); false with `why` set
// when it cannot be read.
constexpr size_t kMaxTextFileBytes = size_t{8} << 20;
bool read_text_file(const std::string& path, std::string* out, std::string* why);

// Default model path: $TESSERA_MODEL, else ${XDG_CACHE_HOME:-~/.cache}/tessera/<default file>.
std::string default_model_path();

}  // namespace tessera::cli

#define TESSERA_CLI_COMMAND(name, summary, fn) \
  static const bool tessera_cli_registered_##fn = ::tessera::cli::register_command({name, summary, fn})
#define TESSERA_CLI_HIDDEN_COMMAND(name, summary, fn)                   \
  static const bool tessera_cli_registered_##fn =                       \
      ::tessera::cli::register_command({name, summary, fn, /*hidden=*/true})
