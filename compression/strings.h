// Cat(): absl::StrCat that also accepts std::string_view. Debian's abseil is built with its
// own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW=0), which absl::StrCat requires,
// while this package uses std::string_view everywhere.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace longhaul::compression {
namespace strings_internal {

inline absl::string_view Adapt(std::string_view s) { return {s.data(), s.size()}; }
template <typename T>
const T& Adapt(const T& v) {
  return v;
}

}  // namespace strings_internal

template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(strings_internal::Adapt(args)...);
}

}  // namespace longhaul::compression
