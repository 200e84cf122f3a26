// Tensor = Buffer + Layout(shape, strides) + DType + Device.
//
// Shapes are outermost-first (row-major): a weight matrix of `rows` x `cols` has shape
// {rows, cols}. Strides are in elements. Quantized tensors must be contiguous rows: their
// innermost dimension is a multiple of the block size and is addressed by row.
//
//   Tensor x = Tensor::empty(DType::kF32, {4, 576});
//   float* p = x.data<float>();
//   Tensor row = x.slice_rows(1, 2);   // view, shares the buffer
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace tessera {

enum class Device : uint8_t { kCpu, kCuda };

// Owns (or keeps alive) a span of bytes. A view into a memory-mapped file holds a reference to
// the mapping through `keepalive`.
class Buffer {
 public:
  static std::shared_ptr<Buffer> allocate_host(size_t bytes);
  static std::shared_ptr<Buffer> wrap(void* data, size_t bytes, std::shared_ptr<void> keepalive,
                                      Device device = Device::kCpu);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }

 private:
  Buffer() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  Device device_ = Device::kCpu;
  bool owned_ = false;
  std::shared_ptr<void> keepalive_;
};

inline constexpr int kMaxDims = 4;

class Tensor {
 public:
  Tensor() = default;
  // Contiguous host tensor; contents uninitialized.
  static Tensor empty(DType dtype, std::initializer_list<int64_t> shape);
  static Tensor empty(DType dtype, const int64_t* shape, int ndim);
  // Non-owning contiguous view of external memory (e.g. mmap'd weights).
  static Tensor view(DType dtype, const int64_t* shape, int ndim, void* data,
                     std::shared_ptr<void> keepalive, Device device = Device::kCpu);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return buffer_ ? buffer_->device() : Device::kCpu; }
  int ndim() const { return ndim_; }
  int64_t dim(int i) const { return shape_[i < 0 ? i + ndim_ : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + ndim_ : i]; }
  int64_t numel() const;
  bool is_contiguous() const;
  // Bytes between consecutive rows of the innermost dimension (contiguous layouts).
  int64_t row_bytes() const;
  int64_t rows() const { return ndim_ == 0 ? 1 : numel() / shape_[ndim_ - 1]; }
  std::string shape_string() const;  // "[4, 576]"

  void* raw_data() const;
  template <class T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  // Pointer to row r of a contiguous tensor viewed as rows() x dim(-1).
  void* row_ptr(int64_t r) const;

  // View of rows [begin, end) along dimension 0.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same bytes, new contiguous shape with the same element count.
  Tensor reshape(std::initializer_list<int64_t> shape) const;

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_bytes_ = 0;
  DType dtype_ = DType::kF32;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

}  // namespace tessera
