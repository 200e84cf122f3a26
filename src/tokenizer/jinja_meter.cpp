// The render's meter (jinja_internal.h) and the live-byte charges of values (jinja.h's
// LiveBytes): steps, bytes alive and time against Limits.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {
namespace {

thread_local Meter* t_meter = nullptr;
// Meters made in this process: their ids. Global, not per thread, so a value charged on one
// thread and freed during another thread's render never gives back bytes that render did not
// charge.
std::atomic<uint64_t> g_renders{0};

// The clock is looked at after this many calls, a call charging n steps or n / 64 bytes counting
// 1 + n / 64 (a long scan or copy: at once).
constexpr int64_t kTicksPerClockLook = 1024;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Meter::Meter(const Limits& limits)
    : limits_(limits),
      id_(g_renders.fetch_add(1, std::memory_order_relaxed) + 1),
      deadline_(now_seconds() + limits.max_seconds) {}

void Meter::tick(uint64_t n) {
  ticks_ -= 1 + static_cast<int64_t>(std::min<uint64_t>(n / 64, kTicksPerClockLook));
  if (ticks_ > 0) return;
  ticks_ = kTicksPerClockLook;
  if (now_seconds() > deadline_)
    fail("template exceeded the time limit (" + std::to_string(limits_.max_seconds) + " s)");
}

void Meter::steps(uint64_t n) {
  if (n > limits_.max_steps - steps_)  // steps_ <= max_steps: no overflow, whatever n is
    fail("template exceeded the evaluation limit (" + std::to_string(limits_.max_steps) + " steps)");
  steps_ += n;
  tick(n);
}

void Meter::check(size_t n) {
  if (n > limits_.max_bytes - live_)  // live_ <= max_bytes: no overflow, whatever n is
    fail("template exceeded the memory limit (" + std::to_string(limits_.max_bytes) + " bytes)");
  tick(n / 64);
}

void Meter::bytes(size_t n) {
  check(n);
  live_ += n;
}

void Meter::release(size_t n) { live_ -= std::min(n, live_); }

Meter* Meter::current() { return t_meter; }

Meter::Scope::Scope(Meter& m) : prev_(t_meter) { t_meter = &m; }
Meter::Scope::~Scope() { t_meter = prev_; }

void charge_steps(uint64_t n) {
  if (t_meter) t_meter->steps(n);
}

void check_bytes(size_t n) {
  if (t_meter) t_meter->check(n);
}

void check_string(size_t size) {
  if (t_meter && size > t_meter->limits().max_output) fail("string exceeds the output limit");
}

// ---- LiveBytes --------------------------------------------------------------------------------

LiveBytes::LiveBytes(LiveBytes&& other) noexcept : bytes_(other.bytes_), render_(other.render_) {
  other.bytes_ = 0;
  other.render_ = 0;
}

LiveBytes& LiveBytes::operator=(LiveBytes&& other) noexcept {
  if (this != &other) {
    release();
    bytes_ = other.bytes_;
    render_ = other.render_;
    other.bytes_ = 0;
    other.render_ = 0;
  }
  return *this;
}

void LiveBytes::add(size_t n) {
  Meter* m = t_meter;
  if (m == nullptr) return;
  if (render_ != m->id()) {  // charged by an earlier render (or never): that charge is gone
    bytes_ = 0;
    render_ = m->id();
  }
  m->bytes(n);
  bytes_ += n;
}

void LiveBytes::release() {
  if (bytes_ != 0 && t_meter != nullptr && t_meter->id() == render_) t_meter->release(bytes_);
  bytes_ = 0;
  render_ = 0;
}

}  // namespace tessera::jinja
