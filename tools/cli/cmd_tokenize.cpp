// `tessera tokenize`: shows how a model's tokenizer splits a text.
//
//   tessera tokenize [--no-bos] [--no-special] [--ids] [MODEL] TEXT
//     MODEL: a .gguf file, a Hugging Face checkpoint folder, or a tokenizer.json
//   tessera tokenize [...] [MODEL] --file PATH       text read from a file, byte-exact
//   tessera tokenize [...] [MODEL] --batch PATH      machine interface for reference tests
//
// Default output: one line per token, "<id>\t<piece>", the piece being the token's bytes with
// \\, \n, \r, \t, other control bytes and invalid UTF-8 escaped (\xNN). --ids prints only
// "[1, 2, 3]". --batch reads NUL-separated texts and prints, per text, one line
// "[ids]\t<hex of decode(ids)>\t<hex of the streaming decoder's output>".
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "command.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera::cli {
namespace {

std::string escape_piece(std::string_view s) {
  std::string out;
  char buf[8];
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int r = utf8::strict_sequence(s, i);
    if (r > 1) {  // a complete multi-byte character prints as itself
      out.append(s.substr(i, r));
      i += r;
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
  return out;
}

std::string ids_list(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

std::string hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += kHex[c >> 4], out += kHex[c & 15];
  return out;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

int usage() {
  std::fprintf(stderr,
               "usage: tessera tokenize [--no-bos] [--no-special] [--ids] [MODEL] TEXT\n"
               "       tessera tokenize [options] [MODEL] --file PATH | --batch PATH\n");
  return 2;
}

int cmd_tokenize(int argc, char** argv) {
  Args args(argc, argv);
  const bool no_bos = args.flag("no-bos");
  const bool no_special = args.flag("no-special");
  const bool ids_only = args.flag("ids");
  std::string file_path, batch_path;
  const bool from_file = args.value("file", &file_path);
  const bool batch = args.value("batch", &batch_path);
  std::string err;
  std::vector<std::string> pos = args.positionals(&err);
  if (!err.empty()) {
    std::fprintf(stderr, "tessera tokenize: %s\n", err.c_str());
    return usage();
  }
  const size_t n_text = (from_file || batch) ? 0 : 1;
  if (pos.size() < n_text || pos.size() > n_text + 1 || (from_file && batch)) return usage();
  const std::string model = pos.size() > n_text ? pos[0] : default_model_path();

  auto tok = open_tokenizer(model);
  if (!tok) {
    std::fprintf(stderr, "tessera tokenize: %s: %s\n", model.c_str(),
                 tok.status().to_string().c_str());
    return 1;
  }
  const EncodeOptions opt{.add_bos = !no_bos, .parse_special = !no_special};

  if (batch) {
    std::string all;
    if (!read_file(batch_path, &all)) {
      std::fprintf(stderr, "tessera tokenize: cannot read %s\n", batch_path.c_str());
      return 1;
    }
    std::string out;
    size_t start = 0;
    while (start <= all.size()) {
      size_t end = all.find('\0', start);
      if (end == std::string::npos) end = all.size();
      const std::vector<int32_t> ids =
          (*tok)->encode(std::string_view(all).substr(start, end - start), opt);
      TokenStreamDecoder dec(**tok);
      std::string streamed;
      for (int32_t id : ids) streamed += dec.push(id);
      streamed += dec.flush();
      out += ids_list(ids) + "\t" + hex((*tok)->decode(ids)) + "\t" + hex(streamed) + "\n";
      start = end + 1;
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  std::string text;
  if (from_file) {
    if (!read_file(file_path, &text)) {
      std::fprintf(stderr, "tessera tokenize: cannot read %s\n", file_path.c_str());
      return 1;
    }
  } else {
    text = pos.back();
  }
  const std::vector<int32_t> ids = (*tok)->encode(text, opt);
  if (ids_only) {
    std::printf("%s\n", ids_list(ids).c_str());
    return 0;
  }
  for (int32_t id : ids)
    std::printf("%d\t%s\n", id, escape_piece((*tok)->token_bytes(id, true)).c_str());
  return 0;
}

}  // namespace

TESSERA_CLI_COMMAND("tokenize", "show the token ids and pieces of a text", cmd_tokenize);

}  // namespace tessera::cli
