// Reads and checks Hugging Face tokenizer.json files (see hf_tokenizer_json.h).
#include "data/hf_tokenizer_json.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_load.h"
#include "data/byte_level.h"
#include "data/tiktoken_encodings.h"

namespace longhaul::data {
namespace {

using Json = nlohmann::json;

// A value for messages: JSON text, cut short.
std::string Show(const Json& value) {
  constexpr size_t kShown = 60;
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kShown) text = absl::StrCat(text.substr(0, kShown), "...");
  return text;
}

std::string Show(const std::string& s) { return Show(Json(s)); }

std::string Kind(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_number()) return absl::StrCat("the number ", Show(value));
  if (value.is_string()) return absl::StrCat("the string ", Show(value));
  return absl::StrCat(value.is_object() || value.is_array() ? "an " : "a ", value.type_name());
}

class Reader {
 public:
  Reader(const std::string& source, HfTokenizerSpec* spec) : source_(source), spec_(*spec) {}

  Status Read(const Json& root);

 private:
  Status Error(const std::string& path, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", path, ": ", absl::string_view(what.data(), what.size())));
  }
  Status Unsupported(const std::string& path, const Json& value, std::string_view why) const {
    return Error(path, absl::StrCat(Show(value), " is not supported (",
                                    absl::string_view(why.data(), why.size()), ")"));
  }
  // obj[key], or nullptr when it is absent or null.
  static const Json* Get(const Json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  Status Expect(const Json& value, bool ok, const std::string& path, std::string_view what) const {
    if (ok) return absl::OkStatus();
    return Error(path, absl::StrCat("expected ", absl::string_view(what.data(), what.size()),
                                    ", found ", Kind(value)));
  }
  // obj[key] as a bool, `otherwise` when absent or null.
  StatusOr<bool> Bool(const Json& obj, const char* key, const std::string& path,
                      bool otherwise) const {
    const Json* v = Get(obj, key);
    if (v == nullptr) return otherwise;
    RETURN_IF_ERROR(Expect(*v, v->is_boolean(), absl::StrCat(path, ".", key), "true or false"));
    return v->get<bool>();
  }
  // obj["type"], which must be a string.
  StatusOr<std::string> Type(const Json& obj, const std::string& path) const {
    RETURN_IF_ERROR(Expect(obj, obj.is_object(), path, "an object"));
    const Json* type = Get(obj, "type");
    if (type == nullptr) return Error(path + ".type", "missing");
    RETURN_IF_ERROR(Expect(*type, type->is_string(), path + ".type", "a string"));
    return type->get<std::string>();
  }
  StatusOr<TokenId> Id(const Json& value, const std::string& path) const {
    RETURN_IF_ERROR(Expect(value, value.is_number_unsigned(), path, "a token id (0, 1, 2, ...)"));
    const uint64_t id = value.get<uint64_t>();
    if (id >= kMaxHfTokens) {
      return Error(path, absl::StrCat("id ", id, " is beyond the limit of ", kMaxHfTokens));
    }
    return TokenId(id);
  }

  Status ReadVocab(const Json& model);
  Status ReadAddedTokens(const Json& root);
  Status BuildTokens();
  Status ReadMerges(const Json& model);
  Status ReadModel(const Json& model);
  Status ReadPreTokenizer(const Json& root);
  Status ReadByteLevelStep(const Json& step, const std::string& path);
  Status ReadPostProcessor(const Json& processor, const std::string& path);

  const std::string& source_;
  HfTokenizerSpec& spec_;
  const Json* vocab_ = nullptr;
  // By id: the model vocabulary's string, nullptr when the id is not in it.
  std::vector<const std::string*> vocab_string_;
  bool saw_template_ = false;
};

Status Reader::Read(const Json& root) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": expected a JSON object at the top level, found ", Kind(root)));
  }
  for (const char* key : {"truncation", "padding"}) {
    const Json* v = Get(root, key);
    if (v != nullptr)
      return Unsupported(key, *v, "ids are never cut or padded here; null expected");
  }
  if (const Json* n = Get(root, "normalizer"); n != nullptr) {
    return Unsupported("normalizer", *n, "only null: byte-level BPE on the text as it is");
  }
  const Json* model = Get(root, "model");
  if (model == nullptr) return Error("model", "missing");
  RETURN_IF_ERROR(ReadModel(*model));
  RETURN_IF_ERROR(ReadVocab(*model));
  if (const Json* unk = Get(*model, "unk_token"); unk != nullptr) {
    // Accepted when it names a vocabulary token: it is never produced, every byte being one.
    RETURN_IF_ERROR(Expect(*unk, unk->is_string(), "model.unk_token", "null or a string"));
    if (!vocab_->contains(unk->get<std::string>())) {
      return Error("model.unk_token", absl::StrCat(Show(*unk), " is not a token of model.vocab"));
    }
  }
  RETURN_IF_ERROR(ReadAddedTokens(root));
  RETURN_IF_ERROR(BuildTokens());
  RETURN_IF_ERROR(ReadMerges(*model));
  RETURN_IF_ERROR(ReadPreTokenizer(root));
  if (const Json* p = Get(root, "post_processor"); p != nullptr) {
    RETURN_IF_ERROR(ReadPostProcessor(*p, "post_processor"));
  }
  const Json* decoder = Get(root, "decoder");
  if (decoder == nullptr) {
    return Error("decoder", "missing or null; byte-level BPE needs the ByteLevel decoder");
  }
  ASSIGN_OR_RETURN(const std::string decoder_type, Type(*decoder, "decoder"));
  if (decoder_type != "ByteLevel") {
    return Unsupported("decoder.type", decoder_type, "byte-level BPE needs the ByteLevel decoder");
  }
  return absl::OkStatus();
}

Status Reader::ReadModel(const Json& model) {
  ASSIGN_OR_RETURN(const std::string type, Type(model, "model"));
  if (type != "BPE") return Unsupported("model.type", type, "byte-level BPE only");
  ASSIGN_OR_RETURN(const bool byte_fallback, Bool(model, "byte_fallback", "model", false));
  if (byte_fallback) {
    return Unsupported("model.byte_fallback", true, "byte-level BPE has every byte as a token");
  }
  if (const Json* d = Get(model, "dropout"); d != nullptr) {
    return Unsupported("model.dropout", *d, "dropout makes encoding random; null expected");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = Get(model, key);
    if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      return Unsupported(absl::StrCat("model.", key), *v, "byte-level BPE has none");
    }
  }
  ASSIGN_OR_RETURN(spec_.ignore_merges, Bool(model, "ignore_merges", "model", false));
  return absl::OkStatus();
}

Status Reader::ReadVocab(const Json& model) {
  vocab_ = Get(model, "vocab");
  if (vocab_ == nullptr) return Error("model.vocab", "missing");
  RETURN_IF_ERROR(Expect(*vocab_, vocab_->is_object(), "model.vocab", "an object"));
  if (vocab_->size() > kMaxHfTokens) {
    return Error("model.vocab", absl::StrCat("holds ", vocab_->size(),
                                             " tokens, more than the limit of ", kMaxHfTokens));
  }
  for (const auto& [text, value] : vocab_->items()) {
    const std::string path = absl::StrCat("model.vocab[", Show(text), "]");
    ASSIGN_OR_RETURN(const TokenId id, Id(value, path));
    if (text.empty()) return Error(path, "empty token");
    if (text.size() > 2 * kMaxHfTokenBytes) {
      return Error(path, absl::StrCat("token of ", text.size(), " bytes, more than the limit of ",
                                      kMaxHfTokenBytes));
    }
    if (id >= vocab_string_.size()) vocab_string_.resize(size_t(id) + 1, nullptr);
    if (vocab_string_[id] != nullptr) {
      return Error("model.vocab", absl::StrCat("tokens ", Show(*vocab_string_[id]), " and ",
                                               Show(text), " both have id ", id));
    }
    vocab_string_[id] = &text;
  }
  return absl::OkStatus();
}

Status Reader::ReadAddedTokens(const Json& root) {
  const Json* list = Get(root, "added_tokens");
  if (list == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(Expect(*list, list->is_array(), "added_tokens", "an array"));
  if (list->size() > kMaxHfTokens) {
    return Error("added_tokens", absl::StrCat("holds ", list->size(),
                                              " tokens, more than the limit of ", kMaxHfTokens));
  }
  absl::flat_hash_map<TokenId, size_t> index_of_id;
  absl::flat_hash_map<std::string, size_t> index_of_content;
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& t = (*list)[i];
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    RETURN_IF_ERROR(Expect(t, t.is_object(), path, "an object"));
    const Json* id_json = Get(t, "id");
    if (id_json == nullptr) return Error(path + ".id", "missing");
    ASSIGN_OR_RETURN(const TokenId id, Id(*id_json, path + ".id"));
    const Json* content_json = Get(t, "content");
    if (content_json == nullptr) return Error(path + ".content", "missing");
    RETURN_IF_ERROR(
        Expect(*content_json, content_json->is_string(), path + ".content", "a string"));
    const std::string& content = content_json->get_ref<const std::string&>();
    if (content.empty()) return Error(path + ".content", "empty token");
    if (content.size() > kMaxHfTokenBytes) {
      return Error(path + ".content",
                   absl::StrCat("token of ", content.size(), " bytes, more than the limit of ",
                                kMaxHfTokenBytes));
    }
    const std::string named = absl::StrCat(path, " (", Show(content), ")");
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      ASSIGN_OR_RETURN(const bool set, Bool(t, flag, path, false));
      if (set) {
        return Error(absl::StrCat(named, ".", flag),
                     "true is not supported (only added tokens matched exactly as written)");
      }
    }
    // No normalizer, so there is nothing for "normalized" to change; it must be well-formed.
    RETURN_IF_ERROR(Bool(t, "normalized", path, false).status());
    ASSIGN_OR_RETURN(const bool special, Bool(t, "special", path, false));
    if (const auto [it, inserted] = index_of_id.emplace(id, i); !inserted) {
      return Error(named, absl::StrCat("id ", id, " is added_tokens[", it->second, "]'s too"));
    }
    if (const auto [it, inserted] = index_of_content.emplace(content, i); !inserted) {
      return Error(named, absl::StrCat("repeats added_tokens[", it->second, "]"));
    }
    // An added token that is also in the model's vocabulary must be the same token there.
    const auto in_vocab = vocab_->find(content);
    if (in_vocab != vocab_->end() && in_vocab->get<uint64_t>() != id) {
      return Error(named, absl::StrCat("is model.vocab's token ", in_vocab->get<uint64_t>(),
                                       ", but has id ", id, " here"));
    }
    if (in_vocab == vocab_->end() && id < vocab_string_.size() && vocab_string_[id] != nullptr) {
      return Error(named, absl::StrCat("id ", id, " is model.vocab's token ",
                                       Show(*vocab_string_[id]), ", not this one"));
    }
    std::string bytes;
    if (in_vocab != vocab_->end() && ByteLevelDecode(content, &bytes) && bytes != content) {
      return Error(named, absl::StrCat("is also model.vocab's token ", id,
                                       ", which stands for other bytes in the byte-level "
                                       "alphabet: an added token in the vocabulary must stand "
                                       "for its own text"));
    }
    (special ? spec_.special : spec_.added).push_back({content, id});
  }
  for (auto* tokens : {&spec_.special, &spec_.added}) {
    std::sort(tokens->begin(), tokens->end(),
              [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
  }
  return absl::OkStatus();
}

Status Reader::BuildTokens() {
  size_t size = vocab_string_.size();
  for (const auto* tokens : {&spec_.special, &spec_.added}) {
    for (const SpecialToken& t : *tokens) size = std::max(size, size_t(t.id) + 1);
  }
  size_t defined = spec_.special.size() + spec_.added.size();
  for (const std::string* s : vocab_string_) defined += s != nullptr;
  // Ids in both the vocabulary and added_tokens were counted twice: count them again below.
  spec_.tokens.assign(size, std::string());
  spec_.defined.assign(size, false);
  for (const auto* tokens : {&spec_.special, &spec_.added}) {
    for (const SpecialToken& t : *tokens) {
      if (t.id < vocab_string_.size() && vocab_string_[t.id] != nullptr) --defined;
      spec_.tokens[t.id] = t.text;
      spec_.defined[t.id] = true;
    }
  }
  if (size - defined > kMaxHfUnusedIds) {
    return Error("model.vocab",
                 absl::StrCat("with added_tokens, defines ", defined, " tokens with ids up to ",
                              size - 1, ": ", size - defined,
                              " unused ids, more than the limit of ", kMaxHfUnusedIds));
  }
  spec_.id_of.reserve(vocab_->size());
  for (TokenId id = 0; id < vocab_string_.size(); ++id) {
    const std::string* text = vocab_string_[id];
    if (text == nullptr) continue;
    std::string bytes;
    if (!ByteLevelDecode(*text, &bytes)) {
      // Allowed as an added token (whose content it then is, checked above).
      if (spec_.defined[id]) continue;
      return Error(absl::StrCat("model.vocab[", Show(*text), "]"),
                   absl::StrCat("token ", id,
                                " is not written in the byte-level alphabet, and is no added "
                                "token"));
    }
    if (bytes.size() > kMaxHfTokenBytes) {
      return Error(absl::StrCat("model.vocab[", Show(*text), "]"),
                   absl::StrCat("token of ", bytes.size(), " bytes, more than the limit of ",
                                kMaxHfTokenBytes));
    }
    spec_.id_of.emplace(bytes, id);
    spec_.tokens[id] = std::move(bytes);
    spec_.defined[id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    if (!spec_.id_of.contains(std::string(1, char(b)))) {
      return Error("model.vocab",
                   absl::StrFormat("no token for the byte 0x%02X (%s): byte-level BPE needs one "
                                   "for each of the 256 bytes",
                                   b, Show(ByteLevelEncode(std::string(1, char(b))))));
    }
  }
  return absl::OkStatus();
}

Status Reader::ReadMerges(const Json& model) {
  const Json* merges = Get(model, "merges");
  if (merges == nullptr) return Error("model.merges", "missing");
  RETURN_IF_ERROR(Expect(*merges, merges->is_array(), "model.merges", "an array"));
  if (merges->size() > kMaxHfTokens) {
    return Error("model.merges", absl::StrCat("holds ", merges->size(),
                                              " merges, more than the limit of ", kMaxHfTokens));
  }
  spec_.merges.assign(spec_.tokens.size(), HfMerge());
  struct More {
    TokenId id;
    HfMoreMerge merge;
  };
  std::vector<More> more;
  absl::flat_hash_map<uint64_t, size_t> index_of_pair;
  index_of_pair.reserve(merges->size());
  std::string left_bytes, right_bytes;
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    const std::string path = absl::StrCat("model.merges[", i, "]");
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        return Error(path, absl::StrCat("expected \"left right\" (two tokens and one space), "
                                        "found ",
                                        Show(m)));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Error(path, absl::StrCat("expected [left, right] or \"left right\", found ", Kind(m)));
    }
    TokenId ids[2];
    for (int side = 0; side < 2; ++side) {
      const std::string& text = side == 0 ? left : right;
      std::string& bytes = side == 0 ? left_bytes : right_bytes;
      bytes.clear();
      const auto it = ByteLevelDecode(text, &bytes) ? spec_.id_of.find(bytes) : spec_.id_of.end();
      if (it == spec_.id_of.end()) {
        return Error(path,
                     absl::StrCat(Show(m), ": ", Show(text), " is not a token of model.vocab"));
      }
      ids[side] = it->second;
    }
    const auto merged = spec_.id_of.find(left_bytes + right_bytes);
    if (merged == spec_.id_of.end()) {
      return Error(path, absl::StrCat(Show(m), " makes ", Show(left + right),
                                      ", which is not a token of model.vocab"));
    }
    const uint64_t pair = (uint64_t(ids[0]) << 32) | ids[1];
    if (const auto [it, inserted] = index_of_pair.emplace(pair, i); !inserted) {
      return Error(path, absl::StrCat(Show(m), " repeats model.merges[", it->second, "]"));
    }
    HfMerge& made = spec_.merges[merged->second];
    if (made.rank == kNoMerge) {
      made.rank = TokenId(i);
      made.left_bytes = uint32_t(left_bytes.size());
    } else {
      more.push_back({merged->second, {uint32_t(left_bytes.size()), TokenId(i)}});
    }
  }
  // Each token's further pairs, together and in rank order.
  std::stable_sort(more.begin(), more.end(),
                   [](const More& a, const More& b) { return a.id < b.id; });
  spec_.more_merges.reserve(more.size());
  for (size_t k = 0; k < more.size(); ++k) {
    HfMerge& made = spec_.merges[more[k].id];
    if (made.more_count == 0) made.more_begin = uint32_t(k);
    ++made.more_count;
    spec_.more_merges.push_back(more[k].merge);
  }
  spec_.merge_count = merges->size();
  return absl::OkStatus();
}

Status Reader::ReadPreTokenizer(const Json& root) {
  const Json* pre = Get(root, "pre_tokenizer");
  if (pre == nullptr) {
    return Error("pre_tokenizer", "missing or null; byte-level BPE needs a ByteLevel one");
  }
  ASSIGN_OR_RETURN(const std::string type, Type(*pre, "pre_tokenizer"));
  if (type == "ByteLevel") return ReadByteLevelStep(*pre, "pre_tokenizer");
  if (type != "Sequence") return Unsupported("pre_tokenizer.type", type, "byte-level BPE only");
  const Json* steps = Get(*pre, "pretokenizers");
  if (steps == nullptr) return Error("pre_tokenizer.pretokenizers", "missing");
  RETURN_IF_ERROR(
      Expect(*steps, steps->is_array(), "pre_tokenizer.pretokenizers", "an array of steps"));
  for (size_t k = 0; k < steps->size(); ++k) {
    const Json& step = (*steps)[k];
    const std::string path = absl::StrCat("pre_tokenizer.pretokenizers[", k, "]");
    ASSIGN_OR_RETURN(const std::string step_type, Type(step, path));
    if (step_type == "ByteLevel") {
      if (k + 1 != steps->size()) {
        return Error(path, "ByteLevel before other steps is not supported (it must be the last)");
      }
      return ReadByteLevelStep(step, path);
    }
    if (step_type != "Split") return Unsupported(path + ".type", step_type, "byte-level BPE only");
    ASSIGN_OR_RETURN(const bool invert, Bool(step, "invert", path, false));
    if (invert) return Unsupported(path + ".invert", true, "only false");
    const Json* behavior = Get(step, "behavior");
    if (behavior == nullptr) return Error(path + ".behavior", "missing");
    if (*behavior != "Isolated") return Unsupported(path + ".behavior", *behavior, "only Isolated");
    const Json* pattern = Get(step, "pattern");
    if (pattern == nullptr) return Error(path + ".pattern", "missing");
    RETURN_IF_ERROR(Expect(*pattern, pattern->is_object() && pattern->size() == 1,
                           path + ".pattern", "{\"Regex\": ...} or {\"String\": ...}"));
    const std::string& kind = pattern->begin().key();
    const Json& text = pattern->begin().value();
    RETURN_IF_ERROR(Expect(text, text.is_string() && (kind == "Regex" || kind == "String"),
                           path + ".pattern", "{\"Regex\": ...} or {\"String\": ...}"));
    const std::string& s = text.get_ref<const std::string&>();
    HfSplitStep split{.pattern = s, .where = absl::StrCat(path, ".pattern.", kind)};
    if (kind == "String") {
      // The literal text as a pattern: a backslash before each ASCII punctuation character.
      split.pattern.clear();
      for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u)) split.pattern.push_back('\\');
        split.pattern.push_back(c);
      }
    }
    spec_.pre_tokenizer.push_back(std::move(split));
  }
  return Error("pre_tokenizer.pretokenizers", "no ByteLevel step (byte-level BPE needs one, last)");
}

Status Reader::ReadByteLevelStep(const Json& step, const std::string& path) {
  ASSIGN_OR_RETURN(const bool add_prefix_space, Bool(step, "add_prefix_space", path, false));
  if (add_prefix_space) {
    return Unsupported(path + ".add_prefix_space", true,
                       "it puts a space before the text, which decoding would not take away");
  }
  ASSIGN_OR_RETURN(const bool use_regex, Bool(step, "use_regex", path, true));
  if (use_regex) {
    spec_.pre_tokenizer.push_back({Gpt2Encoding().pattern, path + ".use_regex"});
  }
  return absl::OkStatus();
}

Status Reader::ReadPostProcessor(const Json& processor, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string type, Type(processor, path));
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "Sequence") {
    const Json* list = Get(processor, "processors");
    if (list == nullptr) return Error(path + ".processors", "missing");
    RETURN_IF_ERROR(Expect(*list, list->is_array(), path + ".processors", "an array"));
    for (size_t k = 0; k < list->size(); ++k) {
      RETURN_IF_ERROR(ReadPostProcessor((*list)[k], absl::StrCat(path, ".processors[", k, "]")));
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return Unsupported(path + ".type", type, "only ByteLevel, TemplateProcessing and Sequence");
  }
  if (saw_template_) return Error(path, "a second TemplateProcessing is not supported");
  saw_template_ = true;
  const Json* single = Get(processor, "single");
  if (single == nullptr) return Error(path + ".single", "missing");
  // [A] or [SpecialToken, A]: the text, with a BOS or without.
  auto is_a = [](const Json& item) {
    return item.is_object() && item.size() == 1 && item.contains("Sequence") &&
           item["Sequence"].is_object() && item["Sequence"].value("id", Json()) == "A";
  };
  auto is_special = [](const Json& item) {
    return item.is_object() && item.size() == 1 && item.contains("SpecialToken") &&
           item["SpecialToken"].is_object() && item["SpecialToken"].value("id", Json()).is_string();
  };
  if (single->is_array() && single->size() == 1 && is_a((*single)[0])) return absl::OkStatus();
  if (!(single->is_array() && single->size() == 2 && is_special((*single)[0]) &&
        is_a((*single)[1]))) {
    return Unsupported(path + ".single", *single, "only [A], or [SpecialToken, A] for a BOS");
  }
  const std::string bos = (*single)[0]["SpecialToken"]["id"].get<std::string>();
  const std::string where = absl::StrCat(path, ".special_tokens[", Show(bos), "]");
  const Json* specials = Get(processor, "special_tokens");
  const Json* entry =
      specials != nullptr && specials->is_object() ? Get(*specials, bos.c_str()) : nullptr;
  if (entry == nullptr) return Error(where, "missing");
  const Json* ids = entry->is_object() ? Get(*entry, "ids") : nullptr;
  if (ids == nullptr || !ids->is_array() || ids->size() != 1) {
    return Error(where + ".ids", "expected one id");
  }
  ASSIGN_OR_RETURN(const TokenId id, Id((*ids)[0], where + ".ids[0]"));
  if (id >= spec_.tokens.size() || !spec_.defined[id] || spec_.tokens[id] != bos) {
    return Error(where + ".ids[0]", absl::StrCat("id ", id, " is not the token ", Show(bos)));
  }
  spec_.bos = id;
  return absl::OkStatus();
}

}  // namespace

StatusOr<HfTokenizerSpec> ParseHfTokenizerJson(std::string_view json_text,
                                               const std::string& source) {
  if (json_text.size() > kMaxTokenizerJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", json_text.size(), " bytes, more than the limit of ", kMaxTokenizerJsonBytes));
  }
  // Nesting limited, repeated keys refused (one would silently replace the other).
  ASSIGN_OR_RETURN(const Json root, ParseUntrustedJson(json_text.data(), json_text.size(), source));
  HfTokenizerSpec spec;
  spec.source = source;
  RETURN_IF_ERROR(Reader(source, &spec).Read(root));
  return spec;
}

}  // namespace longhaul::data
