// The render's meter (jinja_internal.h): steps, bytes and time against Limits.
#include <algorithm>
#include <chrono>
#include <string>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {
namespace {

thread_local Meter* t_meter = nullptr;

constexpr int64_t kStepsPerClockLook = 4096;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Meter::Meter(const Limits& limits) : limits_(limits), deadline_(now_seconds() + limits.max_seconds) {}

void Meter::steps(uint64_t n) {
  if (n > limits_.max_steps - steps_)  // steps_ <= max_steps: no overflow, whatever n is
    fail("template exceeded the evaluation limit (" + std::to_string(limits_.max_steps) + " steps)");
  steps_ += n;
  until_clock_ -= static_cast<int64_t>(std::min<uint64_t>(n, kStepsPerClockLook));
  if (until_clock_ > 0) return;
  until_clock_ = kStepsPerClockLook;
  if (now_seconds() > deadline_)
    fail("template exceeded the time limit (" + std::to_string(limits_.max_seconds) + " s)");
}

void Meter::bytes(size_t n) {
  if (n > limits_.max_bytes - bytes_)  // bytes_ <= max_bytes: no overflow, whatever n is
    fail("template exceeded the memory limit (" + std::to_string(limits_.max_bytes) + " bytes)");
  bytes_ += n;
}

Meter* Meter::current() { return t_meter; }

Meter::Scope::Scope(Meter& m) : prev_(t_meter) { t_meter = &m; }
Meter::Scope::~Scope() { t_meter = prev_; }

void charge_steps(uint64_t n) {
  if (t_meter) t_meter->steps(n);
}

void charge_bytes(size_t n) {
  if (t_meter) t_meter->bytes(n);
}

void charge_string(size_t size, size_t added) {
  if (!t_meter) return;
  if (size > t_meter->limits().max_output) fail("string exceeds the output limit");
  t_meter->bytes(added);
  t_meter->steps(scan_steps(added));
}

}  // namespace tessera::jinja
