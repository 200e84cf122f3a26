// `tessera dump-tensor MODEL.gguf TENSOR OUT.f32` (hidden): writes one tensor of a GGUF file,
// as the models load it (models::GgufWeights), dequantized by the reference kernels, as raw
// little-endian float32 in file order.
// tests/reference/test_dequant.py compares the result bit for bit with the gguf package (IQ4_XS,
// rewritten with f16 block scales, to within that rounding).
#include <bit>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/dtype.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "kernels/ref/dequant.h"
#include "models/weight_source.h"

namespace tessera::cli {
namespace {

static_assert(std::endian::native == std::endian::little, "output is written in host order");

int cmd_dump_tensor(int argc, char** argv) {
  Args args(argc, argv);
  std::string err;
  const auto pos = args.positionals(&err);
  if (!err.empty() || pos.size() != 3) {
    std::fprintf(stderr, "usage: tessera dump-tensor MODEL.gguf TENSOR_NAME OUT.f32\n%s%s",
                 err.c_str(), err.empty() ? "" : "\n");
    return 2;
  }
  auto file = gguf::File::open(pos[0]);
  if (!file) {
    std::fprintf(stderr, "tessera dump-tensor: %s\n", file.status().to_string().c_str());
    return 1;
  }
  const gguf::TensorInfo* t = (*file)->find_tensor(pos[1]);
  if (!t) {
    std::fprintf(stderr, "tessera dump-tensor: no tensor named '%s' in %s\n", pos[1].c_str(),
                 pos[0].c_str());
    return 1;
  }
  const int64_t row = t->dims.empty() ? 1 : t->dims[0];  // innermost (contiguous) dimension
  const int64_t numel = t->numel();
  if (row <= 0 || numel % row != 0) {
    std::fprintf(stderr, "tessera dump-tensor: tensor '%s' has inconsistent size\n",
                 pos[1].c_str());
    return 1;
  }
  // As the models read it: types Tessera rewrites at load (Q3_K, IQ4_NL, IQ4_XS) come back
  // rewritten.
  Tensor w;
  try {
    w = models::GgufWeights(**file).matrix(pos[1], numel / row, row);
  } catch (const Error& e) {
    std::fprintf(stderr, "tessera dump-tensor: %s\n", e.what());
    return 1;
  }
  const DType dtype = w.dtype();
  const int64_t row_bytes = *dtype_row_bytes(dtype, row);
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(pos[2].c_str(), "wb"), &std::fclose);
  if (!out) {
    std::perror(("tessera dump-tensor: " + pos[2]).c_str());
    return 1;
  }
  const auto* data = static_cast<const uint8_t*>(w.raw_data());
  std::vector<float> buf(static_cast<size_t>(row));
  for (int64_t r = 0; r < numel / row; ++r) {
    ref::dequantize_row(dtype, data + r * row_bytes, buf.data(), row);
    if (std::fwrite(buf.data(), sizeof(float), buf.size(), out.get()) != buf.size()) {
      std::perror(("tessera dump-tensor: " + pos[2]).c_str());
      return 1;
    }
  }
  if (std::fflush(out.get()) != 0) {
    std::perror(("tessera dump-tensor: " + pos[2]).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

TESSERA_CLI_HIDDEN_COMMAND("dump-tensor", "write a tensor dequantized as raw f32", cmd_dump_tensor);

}  // namespace tessera::cli
