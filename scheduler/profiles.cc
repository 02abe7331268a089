// Profile lookups, validation and the FLOP conventions (see profiles.h).
#include "scheduler/profiles.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace longhaul::scheduler {

const SiteProfile* Profiles::Site(const std::string& name) const {
  for (const SiteProfile& s : sites) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const LinkProfile* Profiles::Link(const std::string& from, const std::string& to) const {
  for (const LinkProfile& l : links) {
    if (l.from == from && l.to == to) return &l;
  }
  return nullptr;
}

int Profiles::SiteIndex(const std::string& name) const {
  for (size_t i = 0; i < sites.size(); ++i) {
    if (sites[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Status ValidateProfiles(const Profiles& p) {
  std::set<std::string> names;
  for (size_t i = 0; i < p.sites.size(); ++i) {
    const SiteProfile& s = p.sites[i];
    const std::string where = absl::StrCat("profiles: sites[", i, "] (", s.name, ")");
    if (s.name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty name"));
    if (!names.insert(s.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": duplicate site"));
    }
    if (!(s.flops > 0) || !std::isfinite(s.flops)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": flops must be positive"));
    }
    if (s.memory_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": memory must be >= 0"));
    }
    if (!(s.optimizer_params_per_second >= 0) || !std::isfinite(s.optimizer_params_per_second)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": optimizer_params_per_second must be >= 0"));
    }
    if (s.devices < 1 || s.devices > kMaxSiteDevices) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": devices ", s.devices, " is outside [1, ", kMaxSiteDevices, "]"));
    }
    if (s.device_memory_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": device memory must be >= 0"));
    }
    if (s.devices > 1 &&
        (!(s.device_link_bytes_per_second > 0) || !std::isfinite(s.device_link_bytes_per_second))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", s.devices, " devices need a positive device link bandwidth"));
    }
    if (!(s.device_link_latency_seconds >= 0) || !std::isfinite(s.device_link_latency_seconds)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": device link latency must be >= 0"));
    }
  }
  std::set<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < p.links.size(); ++i) {
    const LinkProfile& l = p.links[i];
    const std::string where = absl::StrCat("profiles: links[", i, "] (", l.from, " -> ", l.to, ")");
    if (!names.count(l.from) || !names.count(l.to)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown site"));
    }
    if (l.from == l.to) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a link joins two different sites"));
    }
    if (!pairs.insert({l.from, l.to}).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": this direction is given twice"));
    }
    if (!(l.bandwidth_bytes_per_second > 0) || !std::isfinite(l.bandwidth_bytes_per_second)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": bandwidth must be positive"));
    }
    if (!(l.rtt_seconds >= 0) || !std::isfinite(l.rtt_seconds)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": rtt must be >= 0"));
    }
  }
  return absl::OkStatus();
}

Status CheckCoverage(const Profiles& p, const std::vector<std::string>& sites) {
  for (const std::string& s : sites) {
    if (!p.Site(s))
      return absl::NotFoundError(absl::StrCat("profiles: no profile for site '", s, "'"));
  }
  for (const std::string& a : sites) {
    for (const std::string& b : sites) {
      if (a != b && !p.Link(a, b)) {
        return absl::NotFoundError(absl::StrCat("profiles: no link ", a, " -> ", b));
      }
    }
  }
  return absl::OkStatus();
}

double LayerForwardFlopsPerToken(const model::ModelConfig& c, int seq_len) {
  // Exact in doubles for any valid config (every term is an integer far below 2^53), so
  // GPT-2's figure is exactly 24 C^2 + 4 T C.
  const model::LayerWidths w = model::Widths(c);
  const double C = c.channels, T = seq_len;
  const double matmuls = 2 * (C * w.qkv + w.attention * C + C * w.mlp_in + w.mlp_hidden * C);
  const double attention = 2 * 2 * T * c.num_heads * w.head_dim;  // Q K^T, then A V
  return matmuls + attention;
}

double LayerForwardFlops(const model::ModelConfig& c, int batch_size, int seq_len) {
  return double(batch_size) * seq_len * LayerForwardFlopsPerToken(c, seq_len);
}

double HeadForwardFlops(const model::ModelConfig& c, int batch_size, int seq_len) {
  return double(batch_size) * seq_len * 2.0 * c.channels * c.padded_vocab_size;
}

double FlopsFromLayerSeconds(const model::ModelConfig& c, int batch_size, int seq_len,
                             double seconds) {
  return LayerForwardFlops(c, batch_size, seq_len) * (1 + kBackwardFlopsFactor) / seconds;
}

}  // namespace longhaul::scheduler
