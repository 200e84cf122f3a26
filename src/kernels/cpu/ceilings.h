// Hardware ceilings of this CPU, measured (not looked up), for speed-of-light reports
// (DESIGN.md section 5): memory copy bandwidth and the f32 FMA rate of all pool threads.
//
//   double gbs = cpu::measure_copy_bandwidth(pool);   // GB/s (read + write bytes counted)
//   double gflops = cpu::measure_fma_peak(pool);      // GFLOP/s
#pragma once

namespace tessera {
class ThreadPool;
}

namespace tessera::cpu {

// Best of several parallel memcpy passes over buffers far larger than the caches.
double measure_copy_bandwidth(ThreadPool& pool, double buffer_mib = 256);
// Independent FMA chains on every pool thread (AVX2+FMA when available, else scalar).
double measure_fma_peak(ThreadPool& pool);

namespace detail {
// FLOPs done by `iters` iterations of the FMA kernel (the ISA-specific loops report it).
double fma_loop_avx2(long iters);
double fma_loop_scalar(long iters);
}  // namespace detail

}  // namespace tessera::cpu
