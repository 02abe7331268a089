// zstd byte stage (see zstd_stage.h). One compression and one decompression context per
// thread, reused across calls.
#include "compression/zstd_stage.h"

#include <zstd.h>

#include <memory>

#include "compression/byte_io.h"
#include "compression/strings.h"

namespace longhaul::compression {
namespace {

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

}  // namespace

uint64_t ZstdMaxSize(uint64_t inner_size) { return 8 + ZSTD_compressBound(inner_size); }

Status ZstdCompress(std::span<const uint8_t> in, int level, std::vector<uint8_t>* out) {
  ZSTD_CCtx* ctx = ThreadCCtx();
  if (ctx == nullptr) return absl::ResourceExhaustedError("zstd: cannot create a context");
  const size_t start = out->size();
  ByteWriter w(out);
  w.U64(in.size());
  const size_t bound = ZSTD_compressBound(in.size());
  uint8_t* dst = w.Grow(bound);
  const size_t written = ZSTD_compressCCtx(ctx, dst, bound, in.data(), in.size(), level);
  if (ZSTD_isError(written)) {
    out->resize(start);
    return absl::InternalError(Cat("zstd: compression failed: ", ZSTD_getErrorName(written)));
  }
  out->resize(start + 8 + written);
  return absl::OkStatus();
}

Status ZstdDecompress(std::span<const uint8_t> in, uint64_t max_inner_size,
                      std::vector<uint8_t>* inner) {
  ByteReader r(in, "zstd payload");
  uint64_t size = 0;
  RETURN_IF_ERROR(r.U64("inner size", &size));
  if (size > max_inner_size) {
    return absl::InvalidArgumentError(Cat("zstd payload: declares ", size,
                                          " decompressed bytes; at most ", max_inner_size,
                                          " fit this tensor"));
  }
  const std::span<const uint8_t> frame = r.Rest();
  const unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (content != size) {
    return absl::InvalidArgumentError(
        Cat("zstd payload: frame content size does not match the declared ", size, " bytes"));
  }
  const size_t frame_size = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(frame_size) || frame_size != frame.size()) {
    return absl::InvalidArgumentError("zstd payload: not exactly one complete zstd frame");
  }
  ZSTD_DCtx* ctx = ThreadDCtx();
  if (ctx == nullptr) return absl::ResourceExhaustedError("zstd: cannot create a context");
  inner->resize(size);
  const size_t got = ZSTD_decompressDCtx(ctx, inner->data(), size, frame.data(), frame.size());
  if (ZSTD_isError(got) || got != size) {
    return absl::InvalidArgumentError(
        Cat("zstd payload: corrupt frame: ",
            ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output"));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::compression
