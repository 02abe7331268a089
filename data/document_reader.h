// The input side of `longhaul data prepare`: which files a list of paths names, and the
// pieces of text read from them in order.
//
// Files: a path that is a file is taken whatever its name (".jsonl", ".ndjson" and ".json"
// are JSON lines, anything else text); a directory is walked recursively in byte order of
// the names, taking ".txt", ".text", ".md" as text and ".jsonl", ".ndjson" as JSON lines,
// skipping other files and hidden ones.
//
// Pieces, the unit of work, of the validation split and of resuming:
//   - a JSON lines file gives one piece per line (a document; blank lines are skipped);
//   - a text file is one document, cut into pieces of about `text_piece_bytes` at a line
//     start where no tokenizer pattern in use joins the text on both sides (after a "\n"
//     that follows a non-space and precedes an ASCII letter: every pattern ends a piece at
//     such a newline), so encoding the pieces one by one gives the ids of the whole.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"

namespace longhaul::data {

enum class InputKind { kText, kJsonLines };

struct InputFile {
  std::string path;
  InputKind kind = InputKind::kText;
  int64_t bytes = 0;
  int64_t mtime_ns = 0;
};

// The files `paths` name, in order (duplicates removed). Errors: a path that does not exist,
// a directory with no text or JSON lines file in it.
StatusOr<std::vector<InputFile>> ListInputs(const std::vector<std::string>& paths);

// Where reading stands: the next piece starts at byte `offset` (line `line`, 1-based) of
// input `file`, and is piece number `ordinal` of the whole input.
struct ReadPosition {
  int file = 0;
  int64_t offset = 0;
  int64_t line = 1;
  int64_t ordinal = 0;
};

// A longer JSON line is bad input (counted, not read into memory).
inline constexpr size_t kMaxJsonLineBytes = size_t{64} << 20;
// How far past a text piece's size the reader looks for a place to cut it (document above)
// before it cuts at a character boundary anyway.
inline constexpr size_t kMaxTextScanBytes = size_t{64} << 20;

struct Piece {
  int file = 0;
  int64_t line = 0;     // its first line
  ReadPosition end;     // where the next piece starts
  int64_t ordinal = 0;  // piece number in the whole input
  bool json = false;    // a JSON line (the document is one of its fields)
  bool doc_start = true, doc_end = true;
  bool too_long = false;  // a JSON line longer than kMaxJsonLineBytes (bytes left empty)
  // A text piece cut where no line break was found within kMaxTextScanBytes: the ids at the
  // cut may differ from encoding the text whole (counted in the manifest's bad input).
  bool forced_cut = false;
  std::string bytes;
};

// The offset in `text` at or after `from` where a text piece may be cut (see above), or
// std::string_view::npos when there is none.
size_t FindTextCut(std::string_view text, size_t from);

class PieceReader {
 public:
  // Reads `inputs` from `start`. The SHA-256 of each file is computed as it is read (for a
  // start inside a file, its first `start.offset` bytes are read again for that).
  PieceReader(std::vector<InputFile> inputs, ReadPosition start, size_t text_piece_bytes,
              size_t text_scan_bytes = kMaxTextScanBytes);
  ~PieceReader();
  PieceReader(const PieceReader&) = delete;
  PieceReader& operator=(const PieceReader&) = delete;

  // The next piece; false at the end of the input. Errors: a file that cannot be read or
  // that changed size while being read.
  StatusOr<bool> Next(Piece* piece);

  // The SHA-256 of input `file` once it has been read to its end ("" before).
  const std::string& sha256(int file) const { return sha256_[static_cast<size_t>(file)]; }
  // Bytes read so far, over all inputs (for progress).
  int64_t bytes_read() const { return bytes_read_; }

 private:
  Status Open();
  // Reads more of the current file into buffer_; false at its end.
  StatusOr<bool> Fill();
  void Close();

  std::vector<InputFile> inputs_;
  std::vector<std::string> sha256_;
  size_t piece_bytes_;
  size_t scan_bytes_;
  ReadPosition pos_;
  std::FILE* f_ = nullptr;
  std::unique_ptr<Sha256> hash_;
  std::string buffer_;  // bytes of the current file from pos_.offset on, from buf_pos_
  size_t buf_pos_ = 0;
  bool eof_ = false;
  bool text_started_ = false;  // a text file's first piece has been given out
  int64_t file_read_ = 0;      // bytes of the current file read so far
  int64_t bytes_read_ = 0;
};

}  // namespace longhaul::data
