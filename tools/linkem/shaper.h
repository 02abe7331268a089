// The shaping rules of one direction of an emulated wide-area link: a rate (token bucket
// with a small burst), a one-way delay with jitter, and a bounded buffer. Pure arithmetic on
// timestamps, so it can be tested without sockets or sleeping; the proxy asks it when each
// chunk may leave.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace longhaul::linkem {

struct LinkParams {
  double rate_bits_per_second = 0;  // 0 = unlimited
  double delay_seconds = 0;         // one-way
  double jitter_seconds = 0;        // uniform in [-jitter, +jitter], never reordering
};

class Shaper {
 public:
  explicit Shaper(LinkParams params, uint64_t seed = 1);

  void set_params(const LinkParams& params) { params_ = params; }
  const LinkParams& params() const { return params_; }

  // A chunk of `bytes` arrived at time `arrival` (seconds, any monotonic origin). Returns
  // the time it may be delivered: after it has been serialised at the link rate behind the
  // chunks before it, then delayed. Delivery times never decrease (a TCP stream keeps its
  // order, so jitter delays but never reorders).
  double Schedule(double arrival, uint64_t bytes);

 private:
  LinkParams params_;
  std::mt19937_64 rng_;
  double wire_free_at_ = 0;  // when the serialiser finishes the previous chunk
  double last_delivery_ = 0;
};

// Parses "200mbit", "1.5gbit", "800kbit", "64000" (bit/s), "0"/"unlimited". Returns a
// negative value on a malformed string.
double ParseRate(const std::string& text);
// Parses "20ms", "1.5s", "250us", "0". Returns a negative value on a malformed string.
double ParseDuration(const std::string& text);

}  // namespace longhaul::linkem
