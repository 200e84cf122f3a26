#include "core/tensor.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace tessera {

std::shared_ptr<Buffer> Buffer::allocate_host(size_t bytes) {
  auto b = std::shared_ptr<Buffer>(new Buffer());
  const size_t rounded = (bytes + 63) / 64 * 64;
  b->data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!b->data_) throw_error(ErrorCode::kOutOfMemory, "host allocation of " + std::to_string(bytes) + " bytes failed");
  b->size_ = bytes;
  b->owned_ = true;
  return b;
}

std::shared_ptr<Buffer> Buffer::wrap(void* data, size_t bytes, std::shared_ptr<void> keepalive,
                                     Device device) {
  auto b = std::shared_ptr<Buffer>(new Buffer());
  b->data_ = data;
  b->size_ = bytes;
  b->device_ = device;
  b->keepalive_ = std::move(keepalive);
  return b;
}

Buffer::~Buffer() {
  if (owned_) std::free(data_);
}

namespace {
void set_contiguous(std::array<int64_t, kMaxDims>& strides, const std::array<int64_t, kMaxDims>& shape,
                    int ndim) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
}

int64_t checked_bytes(DType dtype, const int64_t* shape, int ndim) {
  TESSERA_CHECK_ARG(ndim >= 0 && ndim <= kMaxDims, "tensor rank must be 0..4");
  int64_t outer = 1;
  for (int i = 0; i + 1 < ndim; ++i) {
    TESSERA_CHECK_ARG(shape[i] >= 0, "negative tensor dimension");
    outer *= shape[i];
  }
  const int64_t inner = ndim == 0 ? 1 : shape[ndim - 1];
  auto row = dtype_row_bytes(dtype, inner);
  TESSERA_CHECK_ARG(row.has_value(), "innermost dimension " + std::to_string(inner) +
                                         " is not a whole number of " +
                                         std::string(dtype_name(dtype)) + " blocks");
  return outer * *row;
}
}  // namespace

Tensor Tensor::empty(DType dtype, std::initializer_list<int64_t> shape) {
  return empty(dtype, shape.begin(), static_cast<int>(shape.size()));
}

Tensor Tensor::empty(DType dtype, const int64_t* shape, int ndim) {
  Tensor t;
  const int64_t bytes = checked_bytes(dtype, shape, ndim);
  t.buffer_ = Buffer::allocate_host(static_cast<size_t>(bytes));
  t.dtype_ = dtype;
  t.ndim_ = ndim;
  for (int i = 0; i < ndim; ++i) t.shape_[i] = shape[i];
  set_contiguous(t.strides_, t.shape_, ndim);
  return t;
}

Tensor Tensor::view(DType dtype, const int64_t* shape, int ndim, void* data,
                    std::shared_ptr<void> keepalive, Device device) {
  Tensor t;
  const int64_t bytes = checked_bytes(dtype, shape, ndim);
  t.buffer_ = Buffer::wrap(data, static_cast<size_t>(bytes), std::move(keepalive), device);
  t.dtype_ = dtype;
  t.ndim_ = ndim;
  for (int i = 0; i < ndim; ++i) t.shape_[i] = shape[i];
  set_contiguous(t.strides_, t.shape_, ndim);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

int64_t Tensor::row_bytes() const {
  return *dtype_row_bytes(dtype_, ndim_ == 0 ? 1 : shape_[ndim_ - 1]);
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  return s + "]";
}

void* Tensor::raw_data() const {
  return buffer_ ? static_cast<char*>(buffer_->data()) + offset_bytes_ : nullptr;
}

void* Tensor::row_ptr(int64_t r) const {
  return static_cast<char*>(raw_data()) + r * row_bytes();
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TESSERA_CHECK_ARG(ndim_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                    "slice_rows out of range");
  Tensor t = *this;
  TESSERA_CHECK_ARG(is_contiguous(), "slice_rows needs a contiguous tensor");
  int64_t per_row;  // bytes per index of dimension 0
  if (ndim_ == 1) {
    TESSERA_CHECK_ARG(!dtype_is_quantized(dtype_), "cannot slice a 1-D quantized tensor");
    per_row = dtype_info(dtype_).block_bytes;
  } else {
    per_row = row_bytes();
    for (int i = 1; i + 1 < ndim_; ++i) per_row *= shape_[i];
  }
  t.offset_bytes_ += static_cast<size_t>(begin * per_row);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  TESSERA_CHECK_ARG(is_contiguous(), "reshape needs a contiguous tensor");
  Tensor t = *this;
  t.ndim_ = static_cast<int>(shape.size());
  TESSERA_CHECK_ARG(t.ndim_ <= kMaxDims, "tensor rank must be 0..4");
  int i = 0;
  for (int64_t d : shape) t.shape_[i++] = d;
  set_contiguous(t.strides_, t.shape_, t.ndim_);
  TESSERA_CHECK_ARG(t.numel() == numel(), "reshape changes the element count");
  return t;
}

}  // namespace tessera
