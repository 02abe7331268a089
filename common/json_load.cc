// ParseUntrustedJson: a depth pre-scan, then nlohmann-json with a duplicate-key check.
#include "common/json_load.h"

#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"

namespace longhaul {
namespace {

// The byte at which brackets first nest deeper than kMaxJsonDepth, or n. Exact for valid
// JSON (strings and their escapes are skipped); invalid JSON fails in the parser anyway.
size_t TooDeepAt(const char* data, size_t n) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = data[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return n;
}

}  // namespace

StatusOr<nlohmann::json> ParseUntrustedJson(const char* data, size_t n, const std::string& what) {
  if (const size_t at = TooDeepAt(data, n); at < n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " nests deeper than ", kMaxJsonDepth, " levels (byte ", at, ")"));
  }
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::optional<std::string> duplicate;
  const auto check = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      keys.emplace_back();
    } else if (event == Event::object_end) {
      keys.pop_back();
    } else if (event == Event::key && !keys.empty() &&
               !keys.back().insert(parsed.get<std::string>()).second && !duplicate) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + n, check);
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not valid JSON (byte ", e.byte, " of ", n, "): ", e.what()));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON: ", e.what()));
  }
  if (duplicate) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has key '", *duplicate, "' twice in one object"));
  }
  return j;
}

}  // namespace longhaul
