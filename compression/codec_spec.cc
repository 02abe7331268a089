// Parsing, validation and canonical printing of codec specs (see codec_spec.h).
#include "compression/codec_spec.h"

#include <charconv>
#include <cmath>
#include <optional>

#include "compression/strings.h"

namespace longhaul::compression {
namespace {

constexpr size_t kMaxSpecLength = 512;

struct FormatName {
  ValueFormat format;
  std::string_view name;
};
constexpr FormatName kFormats[] = {
    {ValueFormat::kFp32, "fp32"}, {ValueFormat::kFp16, "fp16"}, {ValueFormat::kBf16, "bf16"},
    {ValueFormat::kQ8, "q8"},     {ValueFormat::kQ4, "q4"},     {ValueFormat::kQ2, "q2"},
};

std::optional<ValueFormat> FormatFromName(std::string_view name) {
  for (const auto& f : kFormats) {
    if (f.name == name) return f.format;
  }
  return std::nullopt;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string FormatNumber(double v) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

// Numeric value of a parameter, rejecting trailing junk, NaN and infinities.
StatusOr<double> ParseNumber(std::string_view stage, std::string_view key, std::string_view text) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    return absl::InvalidArgumentError(Cat("codec stage '", stage, "': parameter '", key,
                                          "' has value '", text,
                                          "', which is not a finite number"));
  }
  return v;
}

Status NotAnInteger(std::string_view stage, std::string_view key, double v) {
  return absl::InvalidArgumentError(Cat("codec stage '", stage, "': parameter '", key,
                                        "' must be an integer, got ", FormatNumber(v)));
}

Status CheckFlag(std::string_view stage, std::string_view key, double v) {
  if (v == 0 || v == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      Cat("codec stage '", stage, "': flag '", key, "' must be 0 or 1, got ", FormatNumber(v)));
}

// Applies one named parameter to the stage `name` of `spec`.
Status ApplyParam(std::string_view name, std::string_view key, double v, CodecSpec* spec) {
  auto unknown = [&] {
    return absl::InvalidArgumentError(
        Cat("codec stage '", name, "': unknown parameter '", key, "'"));
  };
  if (name == "topk") {
    if (key == "k") {
      spec->topk.fraction = v;
    } else if (key == "approx") {
      RETURN_IF_ERROR(CheckFlag(name, key, v));
      spec->topk.approximate = v != 0;
    } else {
      return unknown();
    }
  } else if (name == "zstd") {
    if (key != "level") return unknown();
    if (v != std::floor(v) || std::fabs(v) > 1e6) return NotAnInteger(name, key, v);
    spec->zstd.level = static_cast<int>(v);
  } else if (spec->value.quantized()) {
    if (key == "block") {
      if (v != std::floor(v) || v < 0 || v > 1e9) return NotAnInteger(name, key, v);
      spec->value.block = static_cast<uint32_t>(v);
    } else if (key == "asym") {
      RETURN_IF_ERROR(CheckFlag(name, key, v));
      spec->value.asymmetric = v != 0;
    } else if (key == "sr") {
      RETURN_IF_ERROR(CheckFlag(name, key, v));
      spec->value.stochastic = v != 0;
    } else {
      return unknown();
    }
  } else {
    return unknown();
  }
  return absl::OkStatus();
}

// Which pipeline slot a stage name fills: 0 sparsifier, 1 value codec, 2 byte stage.
StatusOr<int> SlotOf(std::string_view name) {
  if (name == "topk") return 0;
  if (name == "zstd") return 2;
  if (FormatFromName(name)) return 1;
  return absl::InvalidArgumentError(
      Cat("unknown codec stage '", name, "' (known: topk, fp32, fp16, bf16, q8, q4, q2, zstd)"));
}

// Starts stage `name` in `spec`, checking order and duplicates against `last_slot`.
Status BeginStage(std::string_view name, int* last_slot, CodecSpec* spec) {
  ASSIGN_OR_RETURN(int slot, SlotOf(name));
  if (slot <= *last_slot) {
    return absl::InvalidArgumentError(
        Cat("codec stage '", name,
            "' is out of order or repeated (order: topk, then one value codec, "
            "then zstd)"));
  }
  *last_slot = slot;
  if (slot == 0) spec->topk.enabled = true;
  if (slot == 1) spec->value.format = *FormatFromName(name);
  if (slot == 2) spec->zstd.enabled = true;
  return absl::OkStatus();
}

std::string_view MainParam(std::string_view name) {
  if (name == "topk") return "k";
  if (name == "zstd") return "level";
  return "block";
}

}  // namespace

int ValueSpec::bits() const {
  switch (format) {
    case ValueFormat::kFp32:
      return 32;
    case ValueFormat::kFp16:
    case ValueFormat::kBf16:
      return 16;
    case ValueFormat::kQ8:
      return 8;
    case ValueFormat::kQ4:
      return 4;
    case ValueFormat::kQ2:
      return 2;
  }
  return 0;
}

bool ValueSpec::quantized() const {
  return format == ValueFormat::kQ8 || format == ValueFormat::kQ4 || format == ValueFormat::kQ2;
}

std::string_view ValueFormatName(ValueFormat format) {
  for (const auto& f : kFormats) {
    if (f.format == format) return f.name;
  }
  return "unknown";
}

Status CodecSpec::Validate() const {
  if (ValueFormatName(value.format) == "unknown") {
    return absl::InvalidArgumentError(
        Cat("codec: unknown value format ", static_cast<int>(value.format)));
  }
  if (value.quantized()) {
    if (!IsPowerOfTwo(value.block) || value.block < kMinBlock || value.block > kMaxBlock) {
      return absl::InvalidArgumentError(
          Cat("codec stage '", ValueFormatName(value.format), "': block ", value.block,
              " must be a power of two in [", kMinBlock, ", ", kMaxBlock, "]"));
    }
  } else if (value.asymmetric || value.stochastic || value.block != kDefaultBlock) {
    return absl::InvalidArgumentError(Cat("codec stage '", ValueFormatName(value.format),
                                          "': block, asym and sr apply only to q8, q4 and q2"));
  }
  if (topk.enabled) {
    if (!(topk.fraction > 0 && topk.fraction <= 1)) {
      return absl::InvalidArgumentError(
          Cat("codec stage 'topk': fraction ", FormatNumber(topk.fraction), " must be in (0, 1]"));
    }
  } else if (topk.fraction != 0 || topk.approximate) {
    return absl::InvalidArgumentError("codec: top-k parameters set without a topk stage");
  }
  if (zstd.enabled) {
    if (zstd.level < kMinZstdLevel || zstd.level > kMaxZstdLevel) {
      return absl::InvalidArgumentError(Cat("codec stage 'zstd': level ", zstd.level,
                                            " must be in [", kMinZstdLevel, ", ", kMaxZstdLevel,
                                            "]"));
    }
  } else if (zstd.level != kDefaultZstdLevel) {
    return absl::InvalidArgumentError("codec: zstd level set without a zstd stage");
  }
  return absl::OkStatus();
}

bool CodecSpec::lossless() const { return !topk.enabled && value.format == ValueFormat::kFp32; }

std::string CodecSpec::ToString() const {
  std::string out;
  if (topk.enabled) {
    out += Cat("topk:", FormatNumber(topk.fraction), topk.approximate ? ",approx" : "", "+");
  }
  out += Cat(ValueFormatName(value.format));
  if (value.quantized()) {
    std::vector<std::string> args;
    if (value.block != kDefaultBlock) args.push_back(Cat("block=", value.block));
    if (value.asymmetric) args.push_back("asym");
    if (value.stochastic) args.push_back("sr");
    for (size_t i = 0; i < args.size(); ++i) out += Cat(i == 0 ? ":" : ",", args[i]);
  }
  if (zstd.enabled) {
    out += Cat("+zstd");
    if (zstd.level != kDefaultZstdLevel) out += Cat(":level=", zstd.level);
  }
  return out;
}

StatusOr<CodecSpec> ParseCodecSpec(std::string_view text) {
  if (text.size() > kMaxSpecLength) {
    return absl::InvalidArgumentError(
        Cat("codec spec is ", text.size(), " characters; at most ", kMaxSpecLength));
  }
  if (Trim(text).empty()) return absl::InvalidArgumentError("codec spec is empty");
  CodecSpec spec;
  int last_slot = -1;
  for (std::string_view stage_text : Split(text, '+')) {
    stage_text = Trim(stage_text);
    size_t colon = stage_text.find(':');
    std::string_view name = Trim(stage_text.substr(0, colon));
    if (name.empty()) {
      return absl::InvalidArgumentError(Cat("codec spec '", text, "' has an empty stage"));
    }
    RETURN_IF_ERROR(BeginStage(name, &last_slot, &spec));
    if (colon == std::string_view::npos) continue;
    std::vector<std::string_view> seen;
    bool first = true;
    for (std::string_view arg : Split(stage_text.substr(colon + 1), ',')) {
      arg = Trim(arg);
      size_t eq = arg.find('=');
      std::string_view key;
      double v = 1;
      if (eq != std::string_view::npos) {
        key = Trim(arg.substr(0, eq));
        ASSIGN_OR_RETURN(v, ParseNumber(name, key, Trim(arg.substr(eq + 1))));
      } else if (!arg.empty() && (std::isdigit(static_cast<unsigned char>(arg[0])) ||
                                  arg[0] == '.' || arg[0] == '-')) {
        if (!first) {
          return absl::InvalidArgumentError(
              Cat("codec stage '", name, "': bare number '", arg, "' must be the first argument"));
        }
        key = MainParam(name);
        ASSIGN_OR_RETURN(v, ParseNumber(name, key, arg));
      } else {
        key = arg;  // a bare flag
      }
      first = false;
      if (key.empty()) {
        return absl::InvalidArgumentError(Cat("codec stage '", name, "' has an empty argument"));
      }
      for (std::string_view s : seen) {
        if (s == key) {
          return absl::InvalidArgumentError(
              Cat("codec stage '", name, "': parameter '", key, "' given twice"));
        }
      }
      seen.push_back(key);
      RETURN_IF_ERROR(ApplyParam(name, key, v, &spec));
    }
  }
  RETURN_IF_ERROR(spec.Validate());
  return spec;
}

std::vector<StageDescription> ToStages(const CodecSpec& spec) {
  std::vector<StageDescription> stages;
  if (spec.topk.enabled) {
    stages.push_back({"topk", {{"k", spec.topk.fraction}, {"approx", spec.topk.approximate}}});
  }
  StageDescription value{std::string(ValueFormatName(spec.value.format)), {}};
  if (spec.value.quantized()) {
    value.params = {{"block", spec.value.block},
                    {"asym", spec.value.asymmetric},
                    {"sr", spec.value.stochastic}};
  }
  stages.push_back(std::move(value));
  if (spec.zstd.enabled) stages.push_back({"zstd", {{"level", spec.zstd.level}}});
  return stages;
}

StatusOr<CodecSpec> FromStages(const std::vector<StageDescription>& stages) {
  if (stages.empty()) return absl::InvalidArgumentError("codec descriptor has no stages");
  CodecSpec spec;
  int last_slot = -1;
  for (const StageDescription& stage : stages) {
    RETURN_IF_ERROR(BeginStage(stage.name, &last_slot, &spec));
    for (size_t i = 0; i < stage.params.size(); ++i) {
      const auto& [key, v] = stage.params[i];
      for (size_t j = 0; j < i; ++j) {
        if (stage.params[j].first == key) {
          return absl::InvalidArgumentError(
              Cat("codec stage '", stage.name, "': parameter '", key, "' given twice"));
        }
      }
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            Cat("codec stage '", stage.name, "': parameter '", key, "' is not finite"));
      }
      RETURN_IF_ERROR(ApplyParam(stage.name, key, v, &spec));
    }
  }
  RETURN_IF_ERROR(spec.Validate());
  return spec;
}

uint64_t TopKCount(const TopKSpec& topk, uint64_t n) {
  if (n == 0) return 0;
  double k = std::nearbyint(topk.fraction * static_cast<double>(n));
  if (!(k >= 1)) return 1;
  if (k >= static_cast<double>(n)) return n;
  return static_cast<uint64_t>(k);
}

}  // namespace longhaul::compression
