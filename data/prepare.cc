// Text and JSON lines to token shards and a manifest (see prepare.h).
#include "data/prepare.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_env.h"
#include "common/json_load.h"
#include "common/sha256.h"
#include "common/splitmix64.h"
#include "data/document_reader.h"
#include "data/utf8.h"
#include "model/file_io.h"
#include "model/token_data.h"

namespace longhaul::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStateDir = ".prepare";
constexpr const char* kStateFile = "state.json";
// The validation tokens not yet in a shard, one file per saved state ("val-pending-N.bin",
// N the train shards then), named by state.json: the two are committed by state.json's rename.
constexpr const char* kValPendingPrefix = "val-pending-";
constexpr int kStateVersion = 2;
// Work handed to each thread per round.
constexpr size_t kRoundBytesPerThread = size_t{4} << 20;
constexpr size_t kRoundPiecesPerThread = 8192;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool InValSplit(uint64_t seed, int64_t ordinal, double fraction) {
  if (fraction <= 0) return false;
  SplitMix64 rng(seed * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(ordinal));
  return rng.Uniform() < fraction;
}

// One encoded piece.
struct Encoded {
  std::vector<TokenId> ids;
  bool val = false;
  bool replaced_utf8 = false;
  std::string bad_reason;  // category, for counting ("malformed JSON", ...)
  std::string bad_detail;  // for the example
};

void EncodePiece(const Piece& piece, const PrepareOptions& options, const Tokenizer& tok,
                 std::optional<TokenId> bos, Encoded* out) {
  out->val = InValSplit(options.seed, piece.ordinal, options.val_fraction);
  std::string_view text = piece.bytes;
  std::string fixed, field_text;
  if (FirstInvalidUtf8(text) != std::string_view::npos) {
    fixed = ReplaceInvalidUtf8(text);
    text = fixed;
    out->replaced_utf8 = true;
  }
  if (piece.too_long) {
    out->bad_reason = absl::StrCat("line longer than ", kMaxJsonLineBytes >> 20, " MiB");
    return;
  }
  if (piece.json) {
    auto parsed = ParseUntrustedJson(text.data(), text.size(), "the line");
    if (!parsed.ok()) {
      out->bad_reason = "malformed JSON";
      out->bad_detail = std::string(parsed.status().message()).substr(0, 200);
      return;
    }
    if (!parsed->is_object()) {
      out->bad_reason = "not a JSON object";
      return;
    }
    auto it = parsed->find(options.json_field);
    if (it == parsed->end()) {
      out->bad_reason = absl::StrCat("no field '", options.json_field, "'");
      return;
    }
    if (!it->is_string()) {
      out->bad_reason = absl::StrCat("field '", options.json_field, "' is not a string");
      return;
    }
    field_text = it->get<std::string>();
    text = field_text;
  }
  if (piece.doc_start && bos) out->ids.push_back(*bos);
  EncodeOptions eo;  // special-token strings are ordinary text; invalid UTF-8 replaced
  Status s = tok.EncodeTo(text, eo, &out->ids);
  if (!s.ok()) {
    out->ids.clear();
    out->bad_reason = "could not be encoded";
    out->bad_detail = std::string(s.message()).substr(0, 200);
    return;
  }
  if (piece.doc_end && tok.eot_id()) out->ids.push_back(*tok.eot_id());
}

// A split's shards: full ones written, the rest pending.
struct SplitWriter {
  std::string prefix;  // "train" or "val"
  std::vector<uint32_t> pending;
  int64_t pending_documents = 0;
  std::vector<model::ManifestShard> shards;

  Status Flush(const std::string& dir, model::TokenWidth width) {
    if (pending.empty()) return absl::OkStatus();
    model::ManifestShard shard;
    shard.file = absl::StrFormat("%s-%06d.bin", prefix, shards.size());
    const std::string path = absl::StrCat(dir, "/", shard.file);
    RETURN_IF_ERROR(model::WriteTokenFile(path, pending, width));
    ASSIGN_OR_RETURN(shard.sha256, Sha256OfFile(path, "token shard"));
    shard.tokens = static_cast<int64_t>(pending.size());
    shard.documents = pending_documents;
    shards.push_back(std::move(shard));
    pending.clear();
    pending_documents = 0;
    return absl::OkStatus();
  }
};

// A round of pieces on its way through read, encode and write.
struct Round {
  std::vector<Piece> pieces;
  std::vector<Encoded> encoded;
  std::vector<std::pair<size_t, std::string>> hashes;  // inputs read to their end: SHA-256
  int64_t bytes_read = 0;                              // input bytes read by then
};

// A bounded queue of rounds between two of the stages. Close() ends it: Push then fails, and
// Pop returns what is queued, then null.
class RoundQueue {
 public:
  explicit RoundQueue(size_t capacity) : capacity_(capacity) {}
  bool Push(std::unique_ptr<Round> round) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return closed_ || queue_.size() < capacity_; });
    if (closed_) return false;
    queue_.push_back(std::move(round));
    cv_.notify_all();
    return true;
  }
  std::unique_ptr<Round> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
    if (queue_.empty()) return nullptr;
    std::unique_ptr<Round> round = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return round;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Round>> queue_;
  bool closed_ = false;
};

// Everything about the run that decides its output: a resumed run must match it.
std::string Fingerprint(const PrepareOptions& o, const std::vector<InputFile>& inputs,
                        const model::ManifestTokenizer& tok, int bits) {
  json j;
  json in = json::array();
  for (const InputFile& f : inputs) in.push_back({f.path, f.bytes, f.mtime_ns, int(f.kind)});
  j["inputs"] = in;
  j["tokenizer"] = {tok.sha256, tok.name, tok.kind, tok.eot_id ? int64_t(*tok.eot_id) : -1,
                    tok.bos_id ? int64_t(*tok.bos_id) : -1};
  j["field"] = o.json_field;
  j["val_fraction"] = o.val_fraction;
  j["seed"] = o.seed;
  j["shard_tokens"] = o.shard_tokens;
  j["piece_bytes"] = o.text_piece_bytes;
  j["scan_bytes"] = o.text_scan_bytes;
  j["bits"] = bits;
  // Paths need not be UTF-8: their bytes replaced for the hash rather than thrown on.
  return Sha256Hex(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

class Preparer {
 public:
  Preparer(const PrepareOptions& options, const PrepareTokenizer& tok,
           const std::function<void(const PrepareProgress&)>& progress)
      : o_(options), tok_(*tok.tokenizer), bos_(tok.bos_id), progress_(progress) {
    manifest_.tokenizer = tok.info;
    manifest_.tokenizer.vocab_size = tok_.vocab_size();
    manifest_.tokenizer.eot_id = tok_.eot_id();
    manifest_.tokenizer.bos_id = tok.bos_id;
  }

  ~Preparer() {
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  }
  StatusOr<PrepareResult> Run();

 private:
  Status Setup();
  Status LoadState();
  Status SaveState(const ReadPosition& pos);
  Status Write(const Piece& piece, Encoded& e);
  std::string StatePath(const char* name) const {
    return absl::StrCat(o_.out_dir, "/", kStateDir, "/", name);
  }

  const PrepareOptions& o_;
  const Tokenizer& tok_;
  std::optional<TokenId> bos_;
  const std::function<void(const PrepareProgress&)>& progress_;
  std::vector<InputFile> inputs_;
  model::TokenManifest manifest_;
  model::TokenWidth width_ = model::TokenWidth::kU16;
  std::string fingerprint_;
  SplitWriter train_{"train"}, val_{"val"};
  ReadPosition start_;
  PrepareResult result_;
  int64_t tokens_ = 0, documents_ = 0;
  int lock_fd_ = -1;
};

Status Preparer::Setup() {
  if (o_.out_dir.empty()) return absl::InvalidArgumentError("no output directory");
  if (!(o_.val_fraction >= 0 && o_.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the validation fraction ", o_.val_fraction, " is not in [0, 1)"));
  }
  if (o_.shard_tokens < 1 || o_.shard_tokens > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard size ", o_.shard_tokens, " tokens is not between 1 and 2^30"));
  }
  if (o_.threads < 1 || o_.threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(o_.threads, " threads is not from 1 to 1024"));
  }
  if (!tok_.eot_id()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer '", tok_.name(), "' has no end-of-text token to separate documents with"));
  }
  const uint32_t vocab = tok_.vocab_size();
  int bits = o_.token_bits != 0 ? o_.token_bits : (vocab <= 65536 ? 16 : 32);
  if (bits != 16 && bits != 32)
    return absl::InvalidArgumentError(absl::StrCat("token bits ", bits, " is not 16 or 32"));
  if (bits == 16 && vocab > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("16-bit ids cannot hold tokenizer '",
                                                   tok_.name(), "''s vocabulary of ", vocab));
  }
  manifest_.token_bits = bits;
  width_ = bits == 16 ? model::TokenWidth::kU16 : model::TokenWidth::kU32;
  ASSIGN_OR_RETURN(inputs_, ListInputs(o_.inputs));
  for (const InputFile& f : inputs_) {
    model::ManifestSource s;
    s.path = f.path;
    s.bytes = f.bytes;
    manifest_.sources.push_back(std::move(s));
  }
  fingerprint_ = Fingerprint(o_, inputs_, manifest_.tokenizer, bits);
  std::error_code ec;
  fs::create_directories(o_.out_dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create '", o_.out_dir, "': ", ec.message()));
  // One run at a time per directory (a second would interleave shards and state).
  const std::string lock_path = absl::StrCat(o_.out_dir, "/.prepare.lock");
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return ErrnoStatus(errno, absl::StrCat("cannot create '", lock_path, "'"));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another `longhaul data prepare` is writing '", o_.out_dir, "'"));
  }
  const std::string manifest_path = absl::StrCat(o_.out_dir, "/", model::kManifestFileName);
  if (o_.force) {
    for (const auto& entry : fs::directory_iterator(o_.out_dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name == model::kManifestFileName ||
          ((name.rfind("train-", 0) == 0 || name.rfind("val-", 0) == 0) && name.size() > 4 &&
           name.substr(name.size() - 4) == ".bin")) {
        fs::remove(entry.path(), ec);
      }
    }
    fs::remove_all(absl::StrCat(o_.out_dir, "/", kStateDir), ec);
  } else if (fs::exists(manifest_path, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat("'", o_.out_dir, "' already holds a finished ", model::kManifestFileName,
                     " (inspect it with `longhaul data inspect`); --force prepares it again"));
  }
  return LoadState();
}

Status Preparer::LoadState() {
  std::string pending_file;
  int64_t pending_tokens = 0;
  std::error_code ec;
  if (!fs::exists(StatePath(kStateFile), ec)) return absl::OkStatus();
  ASSIGN_OR_RETURN(int64_t size, model::FileSize(StatePath(kStateFile), "interrupted run's state"));
  std::string text(static_cast<size_t>(std::min<int64_t>(size, int64_t{1} << 30)), '\0');
  RETURN_IF_ERROR(model::ReadFileRange(StatePath(kStateFile), "interrupted run's state", 0,
                                       text.data(), text.size()));
  ASSIGN_OR_RETURN(json st, ParseUntrustedJson(text.data(), text.size(), StatePath(kStateFile)));
  try {
    if (st.at("version").get<int>() != kStateVersion ||
        st.at("fingerprint").get<std::string>() != fingerprint_) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", o_.out_dir,
                       "' holds an interrupted run with other inputs or options (or inputs that "
                       "changed since); run it again as it was, or pass --force to start over"));
    }
    const json& p = st.at("position");
    start_.file = p.at("file").get<int>();
    start_.offset = p.at("offset").get<int64_t>();
    start_.line = p.at("line").get<int64_t>();
    start_.ordinal = p.at("ordinal").get<int64_t>();
    if (start_.file < 0 || start_.file > static_cast<int>(inputs_.size()) || start_.offset < 0) {
      return absl::DataLossError(absl::StrCat(StatePath(kStateFile), ": position out of range"));
    }
    // Shards, sources and bad input so far: a manifest of the run up to the saved position.
    const std::string partial = st.at("manifest").get<std::string>();
    ASSIGN_OR_RETURN(model::TokenManifest m,
                     model::ParseTokenManifest(partial, StatePath(kStateFile), o_.out_dir));
    if (m.sources.size() != manifest_.sources.size()) {
      return absl::DataLossError(absl::StrCat(StatePath(kStateFile), ": sources do not match"));
    }
    train_.shards = std::move(m.train);
    val_.shards = std::move(m.val);
    manifest_.sources = std::move(m.sources);
    manifest_.bad_documents = m.bad_documents;
    manifest_.bad_by_reason = std::move(m.bad_by_reason);
    manifest_.bad_examples = std::move(m.bad_examples);
    tokens_ = st.at("tokens").get<int64_t>();
    documents_ = st.at("documents").get<int64_t>();
    val_.pending_documents = st.at("val_pending_documents").get<int64_t>();
    pending_file = st.at("val_pending_file").get<std::string>();
    pending_tokens = st.at("val_pending_tokens").get<int64_t>();
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(StatePath(kStateFile), " is damaged (", e.what(),
                                            "); pass --force to start over"));
  }
  if (!pending_file.empty()) {
    if (pending_file.find('/') != std::string::npos) {
      return absl::DataLossError(absl::StrCat(StatePath(kStateFile),
                                              " is damaged (val_pending_file '", pending_file,
                                              "'); pass --force to start over"));
    }
    ASSIGN_OR_RETURN(model::TokenData pending, model::ReadTokenData(StatePath(pending_file.c_str()),
                                                                    model::DataFormat::kLlmc));
    val_.pending = std::move(pending.tokens);
  }
  if (static_cast<int64_t>(val_.pending.size()) != pending_tokens) {
    return absl::DataLossError(absl::StrCat(StatePath(kStateFile), " says ", pending_tokens,
                                            " validation tokens are pending, its file holds ",
                                            val_.pending.size(), "; pass --force to start over"));
  }
  result_.resumed = true;
  return absl::OkStatus();
}

Status Preparer::SaveState(const ReadPosition& pos) {
  std::error_code ec;
  fs::create_directories(absl::StrCat(o_.out_dir, "/", kStateDir), ec);
  const std::string pending_file =
      val_.pending.empty() ? "" : absl::StrCat(kValPendingPrefix, train_.shards.size(), ".bin");
  if (!pending_file.empty()) {
    RETURN_IF_ERROR(model::WriteTokenFile(StatePath(pending_file.c_str()), val_.pending,
                                          model::TokenWidth::kU32));
  }
  json st;
  st["version"] = kStateVersion;
  st["fingerprint"] = fingerprint_;
  st["position"] = {
      {"file", pos.file}, {"offset", pos.offset}, {"line", pos.line}, {"ordinal", pos.ordinal}};
  st["val_pending_documents"] = val_.pending_documents;
  st["val_pending_tokens"] = val_.pending.size();
  st["val_pending_file"] = pending_file;
  // Shards, sources and bad input so far, in the manifest's own format.
  model::TokenManifest partial = manifest_;
  partial.train = train_.shards;
  partial.val = val_.shards;
  st["manifest"] = model::TokenManifestToJson(partial);
  st["tokens"] = tokens_;
  st["documents"] = documents_;
  RETURN_IF_ERROR(model::WriteFileAtomically(
      StatePath(kStateFile), st.dump(-1, ' ', false, json::error_handler_t::replace)));
  // Committed: older pending files are no state's any more.
  for (const auto& entry : fs::directory_iterator(absl::StrCat(o_.out_dir, "/", kStateDir), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kValPendingPrefix, 0) == 0 && name != pending_file) fs::remove(entry.path(), ec);
  }
  return absl::OkStatus();
}

Status Preparer::Write(const Piece& piece, Encoded& e) {
  model::ManifestSource& source = manifest_.sources[static_cast<size_t>(piece.file)];
  if (e.replaced_utf8) source.replaced_utf8 += 1;
  if (piece.forced_cut) {
    // Kept, but said: the ids at the cut may differ from encoding the text whole.
    const std::string reason = "text cut without a line break (kept)";
    manifest_.bad_by_reason[reason] += 1;
    if (manifest_.bad_examples.size() < o_.max_examples) {
      manifest_.bad_examples.push_back(
          {source.path, piece.end.line,
           absl::StrCat(reason, ": no line break for ", o_.text_scan_bytes,
                        " bytes; cut at a character boundary")});
    }
  }
  if (!e.bad_reason.empty()) {
    source.bad_documents += 1;
    manifest_.bad_documents += 1;
    manifest_.bad_by_reason[e.bad_reason] += 1;
    if (manifest_.bad_examples.size() < o_.max_examples) {
      manifest_.bad_examples.push_back(
          {source.path, piece.line,
           e.bad_detail.empty() ? e.bad_reason : absl::StrCat(e.bad_reason, ": ", e.bad_detail)});
    }
    return absl::OkStatus();
  }
  SplitWriter& w = e.val ? val_ : train_;
  w.pending.insert(w.pending.end(), e.ids.begin(), e.ids.end());
  tokens_ += static_cast<int64_t>(e.ids.size());
  if (piece.doc_end) {
    w.pending_documents += 1;
    source.documents += 1;
    documents_ += 1;
  }
  if (static_cast<int64_t>(val_.pending.size()) >= o_.shard_tokens) {
    RETURN_IF_ERROR(val_.Flush(o_.out_dir, width_));
  }
  if (static_cast<int64_t>(train_.pending.size()) >= o_.shard_tokens) {
    RETURN_IF_ERROR(train_.Flush(o_.out_dir, width_));
    // Sources finished before this point keep their hashes in the state.
    RETURN_IF_ERROR(SaveState(piece.end));
    if (o_.crash_after_train_shards >= 0 &&
        static_cast<int64_t>(train_.shards.size()) >= o_.crash_after_train_shards) {
      return absl::AbortedError(
          absl::StrCat("stopped after ", train_.shards.size(), " train shards (fault injection)"));
    }
  }
  return absl::OkStatus();
}

StatusOr<PrepareResult> Preparer::Run() {
  RETURN_IF_ERROR(Setup());
  const double t0 = Now();
  PieceReader reader(inputs_, start_, o_.text_piece_bytes, o_.text_scan_bytes);
  const int64_t start_bytes = reader.bytes_read();
  int64_t total_bytes = 0;
  for (const InputFile& f : inputs_) total_bytes += f.bytes;
  const size_t threads = static_cast<size_t>(o_.threads);

  // Three stages run at once, two rounds apart at most: a reader thread cuts rounds of pieces,
  // this thread encodes each round on `threads` workers, a writer thread writes rounds in order
  // (shards, state, progress). Everything the manifest holds changes on the writer only.
  RoundQueue to_encode(2), to_write(2);
  std::mutex error_mu;
  Status first_error;
  auto fail = [&](Status s) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (first_error.ok()) first_error = std::move(s);
    }
    to_encode.Close();
    to_write.Close();
  };
  std::thread read_thread([&] {
    bool more = true;
    std::vector<bool> hashed(inputs_.size(), false);
    while (more) {
      auto round = std::make_unique<Round>();
      size_t bytes = 0;
      while (bytes < threads * kRoundBytesPerThread &&
             round->pieces.size() < threads * kRoundPiecesPerThread) {
        Piece p;
        auto next = reader.Next(&p);
        if (!next.ok()) return fail(next.status());
        more = *next;
        if (!more) break;
        bytes += p.bytes.size() + 1;
        round->pieces.push_back(std::move(p));
      }
      // Hashes of the files read to their end by now.
      for (size_t f = 0; f < inputs_.size(); ++f) {
        if (!hashed[f] && !reader.sha256(static_cast<int>(f)).empty()) {
          round->hashes.emplace_back(f, reader.sha256(static_cast<int>(f)));
          hashed[f] = true;
        }
      }
      round->bytes_read = reader.bytes_read();
      if (!to_encode.Push(std::move(round))) return;  // stopped
    }
    to_encode.Close();
  });
  std::thread write_thread([&] {
    while (std::unique_ptr<Round> round = to_write.Pop()) {
      for (const auto& [f, sha] : round->hashes) manifest_.sources[f].sha256 = sha;
      for (size_t i = 0; i < round->pieces.size(); ++i) {
        Status s = Write(round->pieces[i], round->encoded[i]);
        if (!s.ok()) return fail(std::move(s));
      }
      if (progress_) {
        PrepareProgress pr;
        pr.bytes_done = round->bytes_read;
        pr.bytes_total = total_bytes;
        pr.tokens = tokens_;
        pr.documents = documents_;
        pr.seconds = Now() - t0;
        progress_(pr);
      }
    }
  });
  while (std::unique_ptr<Round> round = to_encode.Pop()) {
    const std::vector<Piece>& pieces = round->pieces;
    round->encoded.assign(pieces.size(), Encoded{});
    std::vector<double> busy(threads, 0);
    auto work = [&](size_t t) {
      const double s = Now();
      for (size_t i = t; i < pieces.size(); i += threads) {
        EncodePiece(pieces[i], o_, tok_, bos_, &round->encoded[i]);
      }
      busy[t] = Now() - s;
    };
    if (threads == 1 || pieces.size() < 2) {
      work(0);
    } else {
      std::vector<std::thread> pool;
      for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
      work(0);
      for (std::thread& th : pool) th.join();
    }
    for (double b : busy) result_.encode_cpu_seconds += b;
    if (!to_write.Push(std::move(round))) break;  // stopped
  }
  to_write.Close();
  read_thread.join();
  write_thread.join();
  RETURN_IF_ERROR(first_error);
  for (size_t f = 0; f < inputs_.size(); ++f) {
    if (manifest_.sources[f].sha256.empty()) {
      manifest_.sources[f].sha256 = reader.sha256(static_cast<int>(f));
    }
  }
  RETURN_IF_ERROR(train_.Flush(o_.out_dir, width_));
  RETURN_IF_ERROR(val_.Flush(o_.out_dir, width_));
  manifest_.train = train_.shards;
  manifest_.val = val_.shards;
  manifest_.dir = o_.out_dir;
  if (manifest_.train.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the input gave no training tokens (", manifest_.bad_documents, " bad documents, ",
        documents_, " good ones", documents_ > 0 ? ", all in the validation split" : "", ")"));
  }
  if (o_.max_bad_documents >= 0 && manifest_.bad_documents > o_.max_bad_documents) {
    // Over the limit: no manifest, so no job takes the data (--force starts over).
    return absl::InvalidArgumentError(absl::StrCat(
        manifest_.bad_documents, " bad documents, more than the ", o_.max_bad_documents,
        " allowed; no manifest written (first: ",
        manifest_.bad_examples.empty()
            ? ""
            : absl::StrCat(manifest_.bad_examples[0].file, ":", manifest_.bad_examples[0].line,
                           ": ", manifest_.bad_examples[0].reason),
        ")"));
  }
  RETURN_IF_ERROR(
      model::WriteFileAtomically(absl::StrCat(o_.out_dir, "/", model::kManifestFileName),
                                 model::TokenManifestToJson(manifest_)));
  std::error_code ec;
  fs::remove_all(absl::StrCat(o_.out_dir, "/", kStateDir), ec);
  result_.manifest = manifest_;
  result_.bytes = reader.bytes_read() - start_bytes;
  result_.seconds = Now() - t0;
  return result_;
}

}  // namespace

StatusOr<PrepareResult> PrepareData(const PrepareOptions& options, const PrepareTokenizer& tok,
                                    const std::function<void(const PrepareProgress&)>& progress) {
  if (tok.tokenizer == nullptr) return absl::InvalidArgumentError("no tokenizer");
  Preparer p(options, tok, progress);
  return p.Run();
}

}  // namespace longhaul::data
