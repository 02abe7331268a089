// The site config of one longhauld daemon: which site it is, where it listens, which peer
// sites it dials, its devices, TLS files and auth token, log level and link tuning.
// Loaded once at startup from YAML (see configs/ for examples) and validated in full, so
// that a bad config fails with `file:line:column: key.path: problem` before anything
// starts, instead of as an obscure failure later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::daemon {

// A site this daemon exchanges tensors with.
struct PeerConfig {
  std::string name;     // the peer's site name (also its TLS certificate name)
  std::string address;  // "host:port"; host is a name, IPv4, or bracketed IPv6
};

// Mutual TLS. All paths are absolute (resolved against the config file's directory) and
// named files existed and were readable when the config was loaded.
struct TlsConfig {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // `control: true`: the Control API is served over TLS too, with the same certificate (the
  // CLI checks it against ca with --tls-ca; the bearer token still authenticates the CLI, no
  // client certificate is asked for). Required for a control listener on a non-loopback
  // address, unless `insecure: true`.
  bool control = false;
  // The three paths as written in the config, for messages ("tls.key 'certs/alpha.key' ...");
  // empty for a config built in code, whose messages then show the paths above.
  std::string ca_as_written;
  std::string cert_as_written;
  std::string key_as_written;
};

// Timing of the inter-site links. Ranges are enforced by the loader.
struct LinkConfig {
  double heartbeat_interval_seconds = 1.0;  // (0, 3600]
  double probe_interval_seconds = 10.0;     // (0, 86400]
  uint64_t probe_bytes = 4 << 20;           // [64 KiB, 1 GiB]
  double reconnect_initial_seconds = 0.2;   // (0, 60]
  double reconnect_max_seconds = 10.0;      // >= initial, <= 3600
  // How often the coordinator of a gossip job looks at the links' measured rates to redraw its
  // rounds' graphs (Coordinator::MaybeRefreshGossipLinks). (0, 86400]; 0 when not given: two
  // probe intervals, as the estimates change once a probe interval.
  double gossip_refresh_seconds = 0;
  double GossipRefreshSeconds() const {
    return gossip_refresh_seconds > 0 ? gossip_refresh_seconds : 2 * probe_interval_seconds;
  }
};

// A running job this site asks to join as a new replica (`volunteer:`; the job's file must
// list the site under `volunteers`): daemon/job/host/volunteer.h.
struct VolunteerConfig {
  std::string job;          // the job's id, or the name of its running job at the coordinator
  std::string coordinator;  // the site that coordinates it: a configured peer
};

struct SiteConfig {
  std::string source;             // path the config was read from (or the name given)
  std::string site;               // [a-z0-9][a-z0-9-]{0,62}; also the TLS cert name
  std::string peer_listen;        // host:port (port 0: pick any)
  std::string control_listen;     // host:port
  std::string status_listen;      // host:port
  std::vector<PeerConfig> peers;  // may be empty
  std::string data_dir;           // absolute; need not exist yet
  // Each "cpu", "cpu:N" or "cuda:N". Several GPUs (or CPU replicas) train the site's fragment
  // data parallel: each microbatch split between them, gradients all-reduced (NCCL on GPUs).
  std::vector<std::string> devices = {"cpu"};
  // Where job data and init_from checkpoints may be read from (absolute, resolved like
  // data_dir); default: just data_dir. A job naming a file outside them is refused.
  std::vector<std::string> data_roots;
  std::optional<TlsConfig> tls;  // absent: plaintext
  // Plaintext on a non-loopback address (a peer listener without tls:, a control listener
  // without tls.control) is refused unless this is set; then the daemon warns at start and in
  // /status. Nothing authenticates peers then, and the token travels in the clear.
  bool insecure = false;
  std::string token_file;          // absolute; existed and was non-empty at load
  std::string log_level = "info";  // trace|debug|info|warn|error
  int64_t memory_limit_bytes = 0;  // memory_limit_mb: what job stages may allocate (0: no limit)
  LinkConfig links;
  std::vector<VolunteerConfig> volunteer;  // may be empty
};

// Parses and validates YAML text. `source` names the text in error messages; `base_dir`
// resolves relative paths (data_dir, tls files, token_file); an empty `base_dir` means the
// current directory. Errors are InvalidArgument with the message
// "SOURCE:LINE:COLUMN: KEY.PATH: problem" (1-based line and column). Errors not tied to
// one key (YAML syntax, an empty document) use the key path "(root)".
StatusOr<SiteConfig> ParseSiteConfig(const std::string& yaml_text, const std::string& source,
                                     const std::string& base_dir);

// Reads `path` and parses it with base_dir = the file's directory. A missing file is
// NotFound, an unreadable one another errno-derived code; both messages name the path.
StatusOr<SiteConfig> LoadSiteConfig(const std::string& path);

// Reads the bearer token from `path`: its contents with surrounding whitespace trimmed.
// Errors (naming the path): the file cannot be read (errno-derived code), is readable by
// group or others (PermissionDenied: chmod 600), is larger than 4 KiB, holds fewer than 16
// bytes of token, or holds control or non-ASCII characters, which cannot travel in gRPC
// metadata (InvalidArgument).
inline constexpr size_t kMinTokenBytes = 16;
StatusOr<std::string> ReadTokenFile(const std::string& path);

// OK if the secret file at `path` (a token or a private key) is not readable or writable by
// group or others; PermissionDenied naming the path, its mode and the fix otherwise.
Status CheckPrivateFile(const std::string& path, const std::string& what);

// Whether `host` (as ParseHostPort gives it) is a loopback address: 127.0.0.0/8, ::1 or
// "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace longhaul::daemon
