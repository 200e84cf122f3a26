// `tessera op OP ...` (hidden): runs one CPU op on raw little-endian f32 files and writes the
// result, so tests can feed the engine's kernels the exact inputs llama.cpp saw:
//
//   tessera op swiglu D GATE.f32 UP.f32 OUT.f32        rows of D: out = silu(gate) * up
//   tessera op rms_norm D EPS X.f32 W.f32 OUT.f32      rows of D: out = rms_norm(x) * w
//
// The ISA path is the engine's (TESSERA_ISA=scalar forces the portable one).
// tests/reference/test_ops_vs_llama_cpp.py compares the results bit for bit with llama.cpp.
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/tensor.h"
#include "ops/llm_ops.h"

namespace tessera::cli {
namespace {

static_assert(std::endian::native == std::endian::little, "files are read in host order");

bool read_f32(const std::string& path, std::vector<float>* out) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f || std::fseek(f.get(), 0, SEEK_END) != 0) return false;
  const long bytes = std::ftell(f.get());
  if (bytes < 0 || bytes % 4 != 0 || std::fseek(f.get(), 0, SEEK_SET) != 0) return false;
  out->resize(static_cast<size_t>(bytes) / 4);
  return std::fread(out->data(), 4, out->size(), f.get()) == out->size();
}

bool write_f32(const std::string& path, const std::vector<float>& v) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  return f && std::fwrite(v.data(), 4, v.size(), f.get()) == v.size() && std::fflush(f.get()) == 0;
}

Tensor rows_view(std::vector<float>& v, int64_t d) {
  const int64_t shape[2] = {static_cast<int64_t>(v.size()) / d, d};
  return Tensor::view(DType::kF32, shape, 2, v.data(), nullptr);
}

int usage(const std::string& why) {
  std::fprintf(stderr,
               "usage: tessera op swiglu D GATE.f32 UP.f32 OUT.f32\n"
               "       tessera op rms_norm D EPS X.f32 W.f32 OUT.f32\n%s%s",
               why.c_str(), why.empty() ? "" : "\n");
  return 2;
}

// Reads files[i] (all f32); each must hold whole rows of d, except those listed in `vectors`
// (exactly d elements).
int load(const std::vector<std::string>& files, int64_t d, std::vector<std::vector<float>>* out,
         std::vector<bool> vectors) {
  out->resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    std::vector<float>& v = (*out)[i];
    if (!read_f32(files[i], &v)) {
      std::fprintf(stderr, "tessera op: cannot read %s as f32\n", files[i].c_str());
      return 1;
    }
    const auto n = static_cast<int64_t>(v.size());
    const bool ok = vectors[i] ? n == d : (n > 0 && n % d == 0 && v.size() == (*out)[0].size());
    if (!ok) {
      std::fprintf(stderr, "tessera op: %s has %lld elements, not %s of %lld\n", files[i].c_str(),
                   static_cast<long long>(n), vectors[i] ? "a vector" : "the same whole rows",
                   static_cast<long long>(d));
      return 1;
    }
  }
  return 0;
}

int cmd_op(int argc, char** argv) {
  Args args(argc, argv);
  std::string err;
  const auto pos = args.positionals(&err);
  if (!err.empty() || pos.size() < 2) return usage(err);
  char* end = nullptr;
  const long long d = std::strtoll(pos[1].c_str(), &end, 10);
  if (end == pos[1].c_str() || *end != '\0' || d <= 0) return usage("bad row length " + pos[1]);
  std::vector<std::vector<float>> in;
  std::vector<float> out;
  std::string out_path;
  try {
    if (pos[0] == "swiglu" && pos.size() == 5) {
      if (int rc = load({pos[2], pos[3]}, d, &in, {false, false})) return rc;
      out.resize(in[0].size());
      Tensor o = rows_view(out, d);
      ops::swiglu(rows_view(in[0], d), rows_view(in[1], d), o);
      out_path = pos[4];
    } else if (pos[0] == "rms_norm" && pos.size() == 6) {
      const float eps = std::strtof(pos[2].c_str(), &end);
      if (end == pos[2].c_str() || *end != '\0' || !(eps >= 0)) return usage("bad eps " + pos[2]);
      if (int rc = load({pos[3], pos[4]}, d, &in, {false, true})) return rc;
      out.resize(in[0].size());
      Tensor o = rows_view(out, d);
      ops::rms_norm(rows_view(in[0], d), rows_view(in[1], d), eps, o);
      out_path = pos[5];
    } else {
      return usage("unknown op or wrong number of arguments");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera op %s: %s\n", pos[0].c_str(), e.what());
    return 1;
  }
  if (!write_f32(out_path, out)) {
    std::perror(("tessera op: " + out_path).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

TESSERA_CLI_HIDDEN_COMMAND("op", "run one CPU op on raw f32 files", cmd_op);

}  // namespace tessera::cli
