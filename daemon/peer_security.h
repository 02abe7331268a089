// How daemons authenticate each other and how the CLI authenticates to a daemon.
//
// Peer links: with `tls:` configured, both sides present a certificate signed by the site
// CA (mutual TLS). The dialling side checks that the server's certificate names the peer it
// meant to reach (the configured peer name is the TLS target name); the answering side
// checks, on every call, that the caller's certificate names the site the caller claims to
// be. Without TLS the claimed name is only checked against the configured peers.
// Control API: every call carries "authorization: Bearer TOKEN", compared in constant time;
// with `tls: {control: true}` the CLI reaches it over TLS and checks the site's certificate.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/status.h"
#include "daemon/config.h"

namespace longhaul::daemon {

// Credentials for the peer gRPC server; reads the TLS files when `tls` is set.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> PeerServerCredentials(
    const std::optional<TlsConfig>& tls);

// Credentials for the control gRPC server: TLS with the site's certificate when `tls` is set
// with `control: true` (no client certificate asked for: the bearer token authenticates the
// CLI), plaintext otherwise.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> ControlServerCredentials(
    const std::optional<TlsConfig>& tls);

// A channel to `peer` at `address`, with mutual TLS when `tls` is set.
StatusOr<std::shared_ptr<grpc::Channel>> PeerChannel(const std::optional<TlsConfig>& tls,
                                                     const std::string& peer,
                                                     const std::string& address);

// The site that made a Peer RPC. With TLS it is the configured peer that the caller's
// verified certificate names, never a field of the message: `claimed_site` (the message's
// from_site, coordinator, ...) must be that name when it is set. Without TLS there is no
// proof of identity (plaintext is for loopback, or for configs that say `insecure: true`):
// the claimed name is taken if it is a configured peer. Errors: UNAUTHENTICATED (no verified
// certificate, no claim without TLS), PERMISSION_DENIED (not a configured peer, or the claim
// differs from the certificate), each naming what it saw.
StatusOr<std::string> PeerCaller(const grpc::ServerContext& context, bool tls,
                                 const std::set<std::string>& peers,
                                 const std::string& claimed_site);

// OK if the caller of a Peer RPC may act as `claimed_site`: a configured peer and, with TLS,
// the name in its certificate. Otherwise PERMISSION_DENIED / UNAUTHENTICATED naming why.
grpc::Status AuthorizePeerCall(const grpc::ServerContext& context, bool tls,
                               const std::set<std::string>& peers, const std::string& claimed_site);

// OK if the caller is one of `peers`: without TLS any caller passes (the claimed names in
// the messages are checked against the configuration by the callee), with TLS its
// certificate must name a configured peer.
grpc::Status AuthorizeAnyPeer(const grpc::ServerContext& context, bool tls,
                              const std::set<std::string>& peers);

// OK if the call carries "authorization: Bearer <token>"; UNAUTHENTICATED otherwise.
grpc::Status AuthorizeControlCall(const grpc::ServerContext& context, const std::string& token);

}  // namespace longhaul::daemon
