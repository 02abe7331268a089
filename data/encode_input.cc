// UTF-8 preparation and special-token splitting (see encode_input.h).
#include "data/encode_input.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "data/utf8.h"

namespace longhaul::data {
namespace {

// Debian's abseil has its own string_view type.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr uint32_t kNoChild = 0;  // the root is nobody's child

}  // namespace

StatusOr<std::string_view> PrepareEncodeText(std::string_view text, InvalidUtf8 invalid_utf8,
                                             std::string* storage) {
  const size_t bad = FirstInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    if (invalid_utf8 == InvalidUtf8::kReject) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: invalid sequence at byte offset ", bad, " ('",
                       absl::CHexEscape(Absl(text.substr(bad, 4))), "...')"));
    }
    *storage = ReplaceInvalidUtf8(text);
    text = *storage;
  }
  if (text.size() > kMaxEncodeBytes) {
    return absl::InvalidArgumentError(absl::StrCat("text of ", text.size(),
                                                   " bytes is more than one call encodes (",
                                                   kMaxEncodeBytes, "); encode it in parts"));
  }
  return text;
}

SpecialTokenSplitter::SpecialTokenSplitter(std::vector<SpecialToken> special,
                                           std::vector<SpecialToken> always)
    : tokens_(std::move(special)), n_special_(tokens_.size()), nodes_(1) {
  tokens_.insert(tokens_.end(), always.begin(), always.end());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    uint32_t node = 0;
    for (const char c : tokens_[i].text) {
      const auto byte = static_cast<unsigned char>(c);
      uint32_t child = Child(node, byte);
      if (child == kNoChild) {
        child = uint32_t(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    nodes_[node].token = int32_t(i);
  }
  int starts = 0;
  for (const auto& [byte, child] : nodes_[0].children) {
    starts_[byte] = true;
    only_start_ = byte;
    ++starts;
  }
  if (starts != 1) only_start_ = -1;
}

uint32_t SpecialTokenSplitter::Child(uint32_t node, unsigned char byte) const {
  for (const auto& [b, child] : nodes_[node].children) {
    if (b == byte) return child;
  }
  return kNoChild;
}

std::optional<std::pair<size_t, size_t>> SpecialTokenSplitter::Find(
    std::string_view text, size_t from, const std::vector<bool>& active) const {
  if (std::find(active.begin(), active.end(), true) == active.end()) return std::nullopt;
  const size_t n = text.size();
  for (size_t pos = from; pos < n; ++pos) {
    if (only_start_ >= 0) {
      const void* at = std::memchr(text.data() + pos, only_start_, n - pos);
      if (at == nullptr) break;
      pos = size_t(static_cast<const char*>(at) - text.data());
    } else {
      while (pos < n && !starts_[static_cast<unsigned char>(text[pos])]) ++pos;
      if (pos == n) break;
    }
    int32_t best = -1;
    uint32_t node = 0;
    for (size_t j = pos; j < n; ++j) {
      node = Child(node, static_cast<unsigned char>(text[j]));
      if (node == kNoChild) break;
      const int32_t token = nodes_[node].token;
      if (token >= 0 && active[size_t(token)]) best = token;
    }
    if (best >= 0) return std::make_pair(size_t(best), pos);
  }
  return std::nullopt;
}

Status SpecialTokenSplitter::Split(std::string_view text, const EncodeOptions& options,
                                   absl::FunctionRef<Status(std::string_view)> ordinary,
                                   absl::FunctionRef<void(TokenId)> token) const {
  std::vector<bool> allowed(tokens_.size(), true);
  for (size_t k = 0; k < n_special_; ++k) allowed[k] = options.allow_all_special;
  for (const std::string& s : options.allowed_special) {
    size_t k = 0;
    while (k < n_special_ && tokens_[k].text != s) ++k;
    if (k == n_special_) {
      return absl::InvalidArgumentError(
          absl::StrCat("allowed special token '", s, "' is not a special token of this encoding"));
    }
    allowed[k] = true;
  }
  if (options.reject_disallowed_special) {
    std::vector<bool> disallowed(tokens_.size(), false);
    for (size_t k = 0; k < n_special_; ++k) disallowed[k] = !allowed[k];
    const auto found = Find(text, 0, disallowed);
    if (found.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "text holds the special token ", tokens_[found->first].text, " at byte offset ",
          found->second, ", which is not allowed (EncodeOptions::allowed_special)"));
    }
  }
  size_t start = 0;
  while (true) {
    const auto found = Find(text, start, allowed);
    const size_t end = found.has_value() ? found->second : text.size();
    if (end > start) RETURN_IF_ERROR(ordinary(text.substr(start, end - start)));
    if (!found.has_value()) break;
    const SpecialToken& t = tokens_[found->first];
    token(t.id);
    start = found->second + t.text.size();
  }
  return absl::OkStatus();
}

Status EncodeWithSpecialTokens(std::string_view text, const EncodeOptions& options,
                               const SpecialTokenSplitter& splitter, std::optional<TokenId> first,
                               const std::string& name,
                               absl::FunctionRef<Status(std::string_view)> ordinary,
                               std::vector<TokenId>* ids) {
  std::string storage;
  const size_t size_before = ids->size();
  StatusOr<std::string_view> checked = PrepareEncodeText(text, options.invalid_utf8, &storage);
  Status status = checked.status();
  if (status.ok()) {
    if (first.has_value()) ids->push_back(*first);
    status = splitter.Split(*checked, options, ordinary, [&](TokenId id) { ids->push_back(id); });
  }
  if (!status.ok()) {
    ids->resize(size_before);
    return Annotate(status, name);
  }
  return absl::OkStatus();
}

}  // namespace longhaul::data
