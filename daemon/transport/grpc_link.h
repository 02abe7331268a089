// The gRPC Link: the Peer service's client side. Control calls are unary RPCs with a
// deadline; a tensor is one SendFrames call that carries it in chunks (chunk 0 with the
// header, every chunk with the XXH64 of the whole payload); a fragment fetch is one
// FetchFragment call whose chunks are reassembled and checked (FrameAssembler) into whole
// tensors. Errors name the site and keep gRPC's code.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/transport/link.h"
#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon::transport {

// Tensors are cut into chunks of this many payload bytes.
inline constexpr size_t kChunkBytes = 1 << 20;

// A link from site `self` to `site` over `channel`.
std::unique_ptr<Link> MakeGrpcLink(std::string self, std::string site,
                                   std::shared_ptr<grpc::Channel> channel);

// Cuts `tensor` into TensorFrames of at most `chunk_bytes` of payload (at least one frame,
// chunk 0 carrying the header) and hands each to `write`, which returns false when the stream
// broke; so does this.
bool WriteChunks(const WireTensor& tensor, size_t chunk_bytes,
                 const std::function<bool(const v1::TensorFrame&)>& write);

// absl::Status from a grpc::Status, prefixed with `what` (which names the site and call).
Status FromGrpc(const grpc::Status& s, const std::string& what);
// The other way: an absl::Status as the grpc::Status a service handler returns.
grpc::Status ToGrpc(const Status& s);

}  // namespace longhaul::daemon::transport
