// Input files and the pieces read from them (see document_reader.h).
#include "data/document_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace longhaul::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kReadBlock = size_t{4} << 20;

bool EndsWithAny(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes) {
    if (absl::EndsWithIgnoreCase(name, s)) return true;
  }
  return false;
}

bool IsJsonLinesName(const std::string& name) {
  return EndsWithAny(name, {".jsonl", ".ndjson", ".json"});
}

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

Status AddFile(const std::string& path, InputKind kind, std::set<std::string>* seen,
               std::vector<InputFile>* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("input '", path, "': ", std::strerror(errno)));
  }
  if (!seen->insert(path).second) return absl::OkStatus();
  InputFile f;
  f.path = path;
  f.kind = kind;
  f.bytes = st.st_size;
  f.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  out->push_back(std::move(f));
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::vector<InputFile>> ListInputs(const std::vector<std::string>& paths) {
  std::vector<InputFile> out;
  std::set<std::string> seen;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) {
      return absl::NotFoundError(absl::StrCat("input '", path, "' does not exist"));
    }
    if (fs::is_regular_file(status)) {
      RETURN_IF_ERROR(AddFile(
          path, IsJsonLinesName(path) ? InputKind::kJsonLines : InputKind::kText, &seen, &out));
      continue;
    }
    if (!fs::is_directory(status)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", path, "' is neither a file nor a directory"));
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::none, ec), end;
    if (ec) return absl::NotFoundError(absl::StrCat("input '", path, "': ", ec.message()));
    // increment() turns the iterator into `end` on an error, so the error is checked after
    // every step, before the loop test (an unreadable folder must not end the walk quietly).
    while (it != end) {
      const std::string name = it->path().filename().string();
      const bool hidden = !name.empty() && name[0] == '.';
      const bool is_dir = it->is_directory(ec);
      if (!ec && hidden && is_dir) it.disable_recursion_pending();
      const bool regular = !ec && it->is_regular_file(ec);
      if (ec) {
        return absl::PermissionDeniedError(
            absl::StrCat("input '", it->path().string(), "': ", ec.message()));
      }
      if (!hidden && regular && EndsWithAny(name, {".txt", ".text", ".md", ".jsonl", ".ndjson"})) {
        found.push_back(it->path().string());
      }
      const std::string at = it->path().string();
      it.increment(ec);
      if (ec) {
        return absl::PermissionDeniedError(
            absl::StrCat("walking '", path, "' after '", at, "': ", ec.message()));
      }
    }
    if (found.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input directory '", path, "' holds no .txt, .text, .md, .jsonl or .ndjson file"));
    }
    std::sort(found.begin(), found.end());
    for (const std::string& f : found) {
      RETURN_IF_ERROR(
          AddFile(f, IsJsonLinesName(f) ? InputKind::kJsonLines : InputKind::kText, &seen, &out));
    }
  }
  return out;
}

size_t FindTextCut(std::string_view text, size_t from) {
  for (size_t i = std::max<size_t>(from, 2); i < text.size(); ++i) {
    // Before the newline a printable ASCII character that is no space (every Unicode space
    // counts as \s to the patterns, so a non-ASCII byte there could be one).
    const unsigned char before = static_cast<unsigned char>(text[i - 2]);
    if (text[i - 1] == '\n' && before >= 0x21 && before <= 0x7E && IsAsciiLetter(text[i])) return i;
  }
  return std::string_view::npos;
}

PieceReader::PieceReader(std::vector<InputFile> inputs, ReadPosition start, size_t text_piece_bytes,
                         size_t text_scan_bytes)
    : inputs_(std::move(inputs)),
      sha256_(inputs_.size()),
      piece_bytes_(std::max<size_t>(text_piece_bytes, 1)),
      scan_bytes_(std::max<size_t>(text_scan_bytes, 1)),
      pos_(start) {
  for (int i = 0; i < pos_.file && i < static_cast<int>(inputs_.size()); ++i) {
    bytes_read_ += inputs_[static_cast<size_t>(i)].bytes;
  }
  bytes_read_ += pos_.offset;
}

PieceReader::~PieceReader() { Close(); }

void PieceReader::Close() {
  if (f_ != nullptr) std::fclose(f_);
  f_ = nullptr;
  hash_.reset();
  buffer_.clear();
  buf_pos_ = 0;
  eof_ = false;
  file_read_ = 0;
}

Status PieceReader::Open() {
  const InputFile& in = inputs_[static_cast<size_t>(pos_.file)];
  f_ = std::fopen(in.path.c_str(), "rb");
  if (f_ == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot read input '", in.path, "': ", std::strerror(errno)));
  }
  hash_ = std::make_unique<Sha256>();
  // Resuming inside the file: hash the bytes before the start, then read on from there.
  std::vector<char> block(kReadBlock);
  while (file_read_ < pos_.offset) {
    const size_t want =
        static_cast<size_t>(std::min<int64_t>(kReadBlock, pos_.offset - file_read_));
    const size_t got = std::fread(block.data(), 1, want, f_);
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("input '", in.path, "' is shorter (", file_read_,
                                              " bytes) than where the interrupted run stopped (",
                                              pos_.offset, ")"));
    }
    hash_->Update(block.data(), got);
    file_read_ += static_cast<int64_t>(got);
  }
  return absl::OkStatus();
}

StatusOr<bool> PieceReader::Fill() {
  if (eof_) return false;
  if (buf_pos_ > 0) {
    buffer_.erase(0, buf_pos_);
    buf_pos_ = 0;
  }
  const size_t old = buffer_.size();
  buffer_.resize(old + kReadBlock);
  const size_t got = std::fread(buffer_.data() + old, 1, kReadBlock, f_);
  buffer_.resize(old + got);
  const InputFile& in = inputs_[static_cast<size_t>(pos_.file)];
  if (got == 0) {
    if (std::ferror(f_))
      return absl::DataLossError(absl::StrCat("cannot read input '", in.path, "'"));
    eof_ = true;
    if (file_read_ != in.bytes) {
      return absl::DataLossError(absl::StrCat("input '", in.path, "' changed while being read: ",
                                              file_read_, " bytes, it had ", in.bytes));
    }
    sha256_[static_cast<size_t>(pos_.file)] = hash_->HexDigest();
    return false;
  }
  hash_->Update(buffer_.data() + old, got);
  file_read_ += static_cast<int64_t>(got);
  bytes_read_ += static_cast<int64_t>(got);
  return true;
}

StatusOr<bool> PieceReader::Next(Piece* piece) {
  while (true) {
    if (f_ == nullptr) {
      if (pos_.file >= static_cast<int>(inputs_.size())) return false;
      RETURN_IF_ERROR(Open());
    }
    const InputFile& in = inputs_[static_cast<size_t>(pos_.file)];
    auto available = [this] { return std::string_view(buffer_).substr(buf_pos_); };
    if (available().empty()) {
      ASSIGN_OR_RETURN(bool more, Fill());
      if (!more) {
        Close();
        pos_ = ReadPosition{pos_.file + 1, 0, 1, pos_.ordinal};
        continue;
      }
    }
    piece->file = pos_.file;
    piece->line = pos_.line;
    piece->ordinal = pos_.ordinal;
    piece->too_long = false;
    piece->forced_cut = false;
    size_t take = 0;     // bytes of the buffer this piece consumes
    size_t content = 0;  // of which belong to the piece's text
    if (in.kind == InputKind::kJsonLines) {
      piece->json = true;
      piece->doc_start = piece->doc_end = true;
      size_t nl = available().find('\n');
      while (nl == std::string_view::npos && !eof_ && available().size() <= kMaxJsonLineBytes) {
        ASSIGN_OR_RETURN(bool more, Fill());
        (void)more;
        nl = available().find('\n');
      }
      // Too long whatever the buffer happened to hold: a line of more than kMaxJsonLineBytes.
      if (nl != std::string_view::npos && nl > kMaxJsonLineBytes) nl = std::string_view::npos;
      if (nl == std::string_view::npos && available().size() > kMaxJsonLineBytes) {
        // Skip the rest of the line without keeping it.
        piece->too_long = true;
        nl = available().find('\n');
        while (nl == std::string_view::npos && !eof_) {
          const size_t skipped = available().size();
          buf_pos_ += skipped;
          pos_.offset += static_cast<int64_t>(skipped);
          ASSIGN_OR_RETURN(bool more, Fill());
          (void)more;
          nl = available().find('\n');
        }
        take = nl == std::string_view::npos ? available().size() : nl + 1;
        content = 0;
      } else {
        take = nl == std::string_view::npos ? available().size() : nl + 1;
        content = nl == std::string_view::npos ? take : nl;
      }
      std::string_view line = available().substr(0, content);
      bool blank = !piece->too_long;
      for (char c : line) blank = blank && IsSpace(c);
      buf_pos_ += take;
      pos_.offset += static_cast<int64_t>(take);
      pos_.line += 1;
      if (blank) continue;
      piece->bytes.assign(line.data(), line.size());
    } else {
      piece->json = false;
      piece->doc_start = pos_.offset == 0;
      while (available().size() < piece_bytes_ + 1 && !eof_) {
        ASSIGN_OR_RETURN(bool more, Fill());
        (void)more;
      }
      // Cuts are looked for only up to piece + scan bytes, whatever the buffer holds beyond,
      // so a resumed run (which starts with an empty buffer) cuts where a whole run does.
      auto find_cut = [this, &available] {
        return FindTextCut(available().substr(0, piece_bytes_ + scan_bytes_ + 1), piece_bytes_);
      };
      size_t cut = find_cut();
      while (cut == std::string_view::npos && !eof_ &&
             available().size() <= piece_bytes_ + scan_bytes_) {
        ASSIGN_OR_RETURN(bool more, Fill());
        (void)more;
        cut = find_cut();
      }
      if (cut == std::string_view::npos && available().size() > piece_bytes_ + scan_bytes_) {
        // No line break to cut at (binary data, one giant line): cut anyway, at a character
        // boundary, so that memory stays bounded.
        cut = piece_bytes_ + scan_bytes_;
        while (cut > piece_bytes_ &&
               (static_cast<unsigned char>(available()[cut]) & 0xC0) == 0x80) {
          --cut;
        }
        piece->forced_cut = true;
      }
      take = content = cut == std::string_view::npos ? available().size() : cut;
      std::string_view text = available().substr(0, take);
      piece->bytes.assign(text.data(), text.size());
      buf_pos_ += take;
      pos_.offset += static_cast<int64_t>(take);
      pos_.line += static_cast<int64_t>(std::count(text.begin(), text.end(), '\n'));
      // The document ends with the file: look ahead for anything left.
      if (available().empty() && !eof_) {
        ASSIGN_OR_RETURN(bool more, Fill());
        (void)more;
      }
      piece->doc_end = available().empty() && eof_;
    }
    pos_.ordinal += 1;
    piece->end = pos_;
    if (available().empty() && eof_) {
      // Finished this file: the next call moves on (its hash is final now).
      Close();
      pos_ = ReadPosition{pos_.file + 1, 0, 1, pos_.ordinal};
      piece->end = pos_;
    }
    return true;
  }
}

}  // namespace longhaul::data
