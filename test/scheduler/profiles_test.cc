// Profiles files (units, symmetric links, defaults, located errors), profile validation and
// the calibration run on the CPU backend.
#include <catch2/catch.hpp>

#include "kernels/ops.h"
#include "scheduler/calibration.h"
#include "scheduler/profiles_yaml.h"

namespace longhaul::scheduler {
namespace {

TEST_CASE("quantities with units") {
  CHECK(*ParseQuantity("10 Gbit/s", "rate") == Approx(1.25e9));
  CHECK(*ParseQuantity("125MB/s", "rate") == Approx(1.25e8));
  CHECK(*ParseQuantity("5e8", "rate") == Approx(5e8));
  CHECK(*ParseQuantity("30ms", "time") == Approx(0.03));
  CHECK(*ParseQuantity("250 us", "time") == Approx(250e-6));
  CHECK(*ParseQuantity("0.2", "time") == Approx(0.2));
  CHECK(*ParseQuantity("80 GiB", "bytes") == Approx(80.0 * (1ll << 30)));
  CHECK(*ParseQuantity("2 TB", "bytes") == Approx(2e12));
  CHECK(*ParseQuantity("250 TFLOP/s", "flops") == Approx(2.5e14));
  CHECK_FALSE(ParseQuantity("10 furlongs", "rate").ok());
  CHECK_FALSE(ParseQuantity("fast", "rate").ok());
  CHECK_FALSE(ParseQuantity("10 ms", "rate").ok());
}

TEST_CASE("a profiles file: sites, symmetric and one-way links, default link") {
  auto p = ParseProfiles(R"(
sites:
  - {name: alpha, flops: 100 TFLOP/s, memory: 80 GiB, optimizer: 2e10}
  - {name: beta, flops: 5e13}
  - {name: gamma, flops: 1 PFLOP/s}
links:
  - {from: alpha, to: beta, bandwidth: 10 Gbit/s, rtt: 30 ms}
  - {from: beta, to: alpha, bandwidth: 2 Gbit/s, rtt: 30 ms, symmetric: false}
  - {from: beta, to: gamma, bandwidth: 1 GB/s, rtt: 5 ms}
default_link: {bandwidth: 100 Mbit/s, rtt: 150 ms}
)",
                         "test.yaml");
  REQUIRE(p.ok());
  REQUIRE(p->sites.size() == 3);
  CHECK(p->Site("alpha")->flops == Approx(1e14));
  CHECK(p->Site("alpha")->memory_bytes == 80ll << 30);
  CHECK(p->Site("alpha")->optimizer_params_per_second == Approx(2e10));
  CHECK(p->Site("beta")->memory_bytes == 0);
  CHECK(p->Site("beta")->devices == 1);
  CHECK(p->links.size() == 6);
  CHECK(p->Link("alpha", "beta")->bandwidth_bytes_per_second == Approx(1.25e9));
  CHECK(p->Link("beta", "alpha")->bandwidth_bytes_per_second == Approx(2.5e8));
  CHECK(p->Link("gamma", "beta")->bandwidth_bytes_per_second == Approx(1e9));
  CHECK(p->Link("gamma", "beta")->rtt_seconds == Approx(0.005));
  CHECK(p->Link("alpha", "gamma")->bandwidth_bytes_per_second == Approx(1.25e7));
  CHECK(p->Link("gamma", "alpha")->rtt_seconds == Approx(0.15));
  CHECK(CheckCoverage(*p, {"alpha", "beta", "gamma"}).ok());
}

TEST_CASE("a site's devices: count, memory each, the link between them") {
  auto p = ParseProfiles(R"(
sites:
  - {name: alpha, flops: 800 TFLOP/s, devices: 8, device_memory: 80 GiB, device_link: 360 GB/s,
     device_latency: 30 us}
)",
                         "devices.yaml");
  REQUIRE(p.ok());
  const SiteProfile* a = p->Site("alpha");
  CHECK(a->devices == 8);
  CHECK(a->device_memory_bytes == 80ll << 30);
  CHECK(a->device_link_bytes_per_second == Approx(3.6e11));
  CHECK(a->device_link_latency_seconds == Approx(3e-5));
  SiteProfile bad = *a;
  bad.device_link_bytes_per_second = 0;
  CHECK(ValidateProfiles(Profiles{{bad}, {}}).message().find("device link") != std::string::npos);
}

TEST_CASE("bad profiles files name the place and the problem") {
  auto error = [](const std::string& text) {
    auto p = ParseProfiles(text, "p.yaml");
    REQUIRE_FALSE(p.ok());
    return std::string(p.status().message());
  };
  CHECK(error("sites: []") == "p.yaml:1:1: (root): sites: expected a non-empty list of sites");
  CHECK(error("sites:\n  - {name: a, flop: 1}\n").find("did you mean 'flops'") !=
        std::string::npos);
  CHECK(error("sites:\n  - {name: a}\n").find("sites[0].flops: missing required key") !=
        std::string::npos);
  CHECK(error("sites:\n  - {name: a, flops: 1 PB}\n").find("p.yaml:2:") == 0);
  CHECK(error("sites:\n  - {name: a, flops: 1}\n  - {name: a, flops: 1}\n").find("listed twice") !=
        std::string::npos);
  CHECK(
      error("sites:\n  - {name: a, flops: 1}\nlinks:\n  - {from: a, to: b, bandwidth: 1, rtt: 0}\n")
          .find("unknown site 'b'") != std::string::npos);
  CHECK(error("sites:\n  - {name: a, flops: 1}\n  - {name: b, flops: 1}\nlinks:\n"
              "  - {from: a, to: b, bandwidth: 0, rtt: 0}\n")
            .find("links[0].bandwidth") != std::string::npos);
  CHECK(error("sites:\n  - {name: a, flops: -5}\n").find("sites[0].flops") != std::string::npos);
  CHECK(error("sites:\n  - {name: a, flops: 1, devices: 0}\n").find("sites[0].devices") !=
        std::string::npos);
  CHECK(error("sites:\n  - {name: a, flops: 1, devices: 8}\n").find("device_link") !=
        std::string::npos);
  Profiles p;
  p.sites.push_back({"a", 1, 0, 0});
  CHECK(CheckCoverage(p, {"a", "b"}).code() == absl::StatusCode::kNotFound);
  p.sites.push_back({"b", 1, 0, 0});
  CHECK(CheckCoverage(p, {"a", "b"}).code() == absl::StatusCode::kNotFound);  // no link
}

TEST_CASE("calibration times one layer on the CPU backend") {
  auto ops = kernels::MakeOps("cpu", 1);
  REQUIRE(ops.ok());
  const auto config = model::MakeConfig(12, 128, 4, 256, 64);
  CalibrationOptions o;
  o.batch_size = 2;
  o.seq_len = 64;
  auto cal = CalibrateLayer(ops->get(), config, o);
  REQUIRE(cal.ok());
  CHECK(cal->forward_seconds > 0);
  CHECK(cal->backward_seconds > 0);
  CHECK(cal->optimizer_seconds > 0);
  CHECK(cal->layer_parameters == 12 * 128 * 128 + 13 * 128);
  // One core of this kind of machine: between 0.1 and 500 GFLOP/s.
  CHECK(cal->flops > 1e8);
  CHECK(cal->flops < 5e11);
  const SiteProfile s = ProfileFromCalibration("here", *cal, 1 << 30);
  CHECK(s.flops == cal->flops);
  CHECK(s.memory_bytes == 1 << 30);
  o.repetitions = 0;
  CHECK_FALSE(CalibrateLayer(ops->get(), config, o).ok());
}

// A llama job's calibration times a llama layer (its own widths: GQA, a head width that is not
// C / NH, SwiGLU of width I), not a GPT-2 layer of the same C and NH.
TEST_CASE("calibration times the job's own family: a llama layer for a llama job") {
  auto ops = kernels::MakeOps("cpu", 1);
  REQUIRE(ops.ok());
  auto config = model::MakeConfig(12, 64, 4, 300, 64);
  config.family = model::Family::kLlama;
  config.num_kv_heads = 2;
  config.head_dim = 24;
  config.intermediate_size = 96;
  config.tied_embeddings = false;
  CalibrationOptions o;
  o.batch_size = 2;
  o.seq_len = 32;
  auto cal = CalibrateLayer(ops->get(), config, o);
  REQUIRE(cal.ok());
  // Two RMSNorm weights, q|k|v (64 x 192), o (96 x 64), gate|up (64 x 192), down (96 x 64).
  CHECK(cal->layer_parameters == 2 * 64 + 64 * 192 + 96 * 64 + 64 * 192 + 96 * 64);
  CHECK(cal->forward_seconds > 0);
  CHECK(cal->backward_seconds > 0);
  // The FLOP/s are the llama layer's FLOPs over its time (profiles.h's conventions).
  CHECK(cal->flops == Approx(FlopsFromLayerSeconds(config, 2, 32, cal->seconds_per_layer())));
  CHECK(LayerForwardFlops(config, 2, 32) == 2 * 32 * (2.0 * 36864 + 4 * 32 * 96));
}

}  // namespace
}  // namespace longhaul::scheduler
