// Codec kernel benchmark: GB/s of quantize, dequantize, half/bfloat16 conversion and top-k
// selection on one core, next to the same run's memory copy bandwidth, plus whole-codec
// encode/decode throughput and sizes for the controller's ladder. Throughput is always fp32
// bytes processed per second (4 * n / seconds), so a kernel and the copy loop compare directly.
// Compare with tools/bench/torch_codec_bench.py (PyTorch on the same tensor).
//
// Usage: bazel run //tools/bench:codec_bench -- [n_floats] [repetitions] [block]
// (defaults: 16M floats, best of 5, quantization blocks of 64)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/kernels.h"
#include "compression/topk.h"

namespace longhaul::compression {
namespace {

using Clock = std::chrono::steady_clock;

// Best-of-`reps` seconds of fn() after one warm-up call.
double Time(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void Row(const std::string& name, uint64_t n, double seconds, double copy_gbps,
         const std::string& note = "") {
  const double gbps = 4.0 * n / seconds / 1e9;
  std::printf("%-34s %9.2f ms %8.2f GB/s %6.0f%% of copy  %s\n", name.c_str(), seconds * 1e3, gbps,
              100 * gbps / copy_gbps, note.c_str());
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "codec_bench: %s failed\n", what);
    std::exit(1);
  }
}

int Main(int argc, char** argv) {
  const uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : uint64_t{1} << 24;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const uint32_t block = argc > 3 ? static_cast<uint32_t>(std::atoi(argv[3])) : 64;
  std::vector<float> x(n), y(n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  std::printf(
      "codec_bench: %llu floats (%.0f MiB), best of %d, one thread, block %u, kernels: %s\n",
      static_cast<unsigned long long>(n), 4.0 * n / (1 << 20), reps, block,
      kernels::Kernels().name);

  const double copy_s = Time(reps, [&] { std::memcpy(y.data(), x.data(), 4 * n); });
  const double copy_gbps = 4.0 * n / copy_s / 1e9;
  Row("memcpy (the reference bandwidth)", n, copy_s, copy_gbps);

  std::vector<uint8_t> buf(4 * n + 1024);
  for (const kernels::KernelTable* k : kernels::AllKernels()) {
    const std::string tag = std::string(" [") + k->name + "]";
    Row("copy_floats (+finite check)" + tag, n,
        Time(reps, [&] { Check(k->copy_floats(x.data(), n, y.data()) == -1, "copy"); }), copy_gbps);
    Row("fp32 -> bf16" + tag, n,
        Time(reps, [&] { Check(k->floats_to_bf16(x.data(), n, buf.data()) == -1, "bf16"); }),
        copy_gbps);
    Row("bf16 -> fp32" + tag, n,
        Time(reps, [&] { Check(k->bf16_to_floats(buf.data(), n, y.data()) == -1, "bf16"); }),
        copy_gbps);
    Row("fp32 -> fp16" + tag, n,
        Time(reps, [&] { Check(k->floats_to_half(x.data(), n, buf.data()) == -1, "fp16"); }),
        copy_gbps);
    Row("fp16 -> fp32" + tag, n,
        Time(reps, [&] { Check(k->half_to_floats(buf.data(), n, y.data()) == -1, "fp16"); }),
        copy_gbps);
    for (int bits : {8, 4, 2}) {
      for (int mode = 0; mode < 3; ++mode) {
        kernels::QuantParams p;
        p.bits = bits;
        p.block = block;
        p.asymmetric = mode == 1;
        p.stochastic = mode == 2;
        const char* mode_name = mode == 0 ? "" : mode == 1 ? ",asym" : ",sr";
        const std::string name = "q" + std::to_string(bits) + mode_name;
        Row("quantize " + name + tag, n,
            Time(reps, [&] { Check(k->quantize(p, x.data(), n, buf.data()) == -1, "quantize"); }),
            copy_gbps);
        Row("dequantize " + name + tag, n,
            Time(reps,
                 [&] { Check(k->dequantize(p, buf.data(), n, y.data()) == -1, "dequantize"); }),
            copy_gbps);
      }
    }
  }

  std::vector<uint32_t> idx;
  for (double fraction : {0.01, 0.1}) {
    const uint64_t k = static_cast<uint64_t>(fraction * n);
    const std::string pct = std::to_string(static_cast<int>(fraction * 100)) + "%";
    Row("topk exact k=" + pct, n, Time(reps, [&] { Check(TopKExact(x, k, &idx).ok(), "topk"); }),
        copy_gbps);
    Row("topk approx k=" + pct, n, Time(reps, [&] { Check(TopKApprox(x, k, &idx).ok(), "topk"); }),
        copy_gbps, "kept " + std::to_string(idx.size()) + " of " + std::to_string(k));
    Row("nth_element on |x| k=" + pct + " (baseline)", n,
        Time(1,
             [&] {
               std::vector<float> mags(n);
               for (uint64_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
               std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(k),
                                mags.end(), std::greater<>());
             }),
        copy_gbps);
  }

  std::printf("\nwhole codecs (encode, decode; ratio = encoded / fp32 bytes)\n");
  for (const char* spec : {"fp32", "bf16", "q8", "q4", "q2:asym", "q8+zstd", "topk:0.1+q8",
                           "topk:0.01+q4", "topk:0.01+q4+zstd", "topk:0.01,approx+q4+zstd"}) {
    auto codec = MakeCodec(spec);
    Check(codec.ok(), "MakeCodec");
    std::vector<uint8_t> enc;
    const double enc_s = Time(reps, [&] {
      enc.clear();
      Check((*codec)->Encode(x, {}, &enc).ok(), "encode");
    });
    const double dec_s = Time(reps, [&] { Check((*codec)->Decode(enc, y).ok(), "decode"); });
    char note[96];
    std::snprintf(note, sizeof(note), "ratio %.4f, decode %.2f GB/s",
                  static_cast<double>(enc.size()) / (4.0 * n), 4.0 * n / dec_s / 1e9);
    Row(std::string("encode ") + spec, n, enc_s, copy_gbps, note);
  }
  return 0;
}

}  // namespace
}  // namespace longhaul::compression

int main(int argc, char** argv) { return longhaul::compression::Main(argc, argv); }
