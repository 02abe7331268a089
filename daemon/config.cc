// Site config loader: walks the YAML tree key by key, so that every error can name the
// file, the line and column of the offending node, and the key path. Single-value checks
// (names, addresses, devices, files) live in config_checks.cc.
#include "daemon/config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/yaml_walker.h"
#include "daemon/config_checks.h"

namespace longhaul::daemon {
namespace {

using config_internal::CheckDevice;
using config_internal::CheckLogLevel;
using config_internal::CheckReadableFile;
using config_internal::CheckSiteName;
using config_internal::CheckVolunteerJob;
using config_internal::HostPort;
using config_internal::ParseHostPort;
using config_internal::ParseNumber;
using config_internal::ParseWholeNumber;
using config_internal::ReadFileToString;
using config_internal::ResolvePath;

using Entry = YamlWalker::Entry;
using Fields = YamlWalker::Fields;

const std::vector<absl::string_view> kTopKeys = {
    "site",     "listen", "peers",     "data_dir", "data_roots",      "devices",  "tls",
    "insecure", "auth",   "log_level", "links",    "memory_limit_mb", "volunteer"};
const std::vector<absl::string_view> kListenKeys = {"peer", "control", "status"};
const std::vector<absl::string_view> kPeerKeys = {"name", "address"};
const std::vector<absl::string_view> kVolunteerKeys = {"job", "coordinator"};
const std::vector<absl::string_view> kTlsKeys = {"ca", "cert", "key", "control"};
const std::vector<absl::string_view> kAuthKeys = {"token_file"};
const std::vector<absl::string_view> kLinkKeys = {
    "heartbeat_interval_seconds", "probe_interval_seconds", "probe_bytes",
    "reconnect_initial_seconds",  "reconnect_max_seconds",  "gossip_refresh_seconds"};

// Two listen addresses that cannot both be bound (port 0 picks a free port, so never).
bool Conflicts(const HostPort& a, const HostPort& b) {
  return a.port != 0 && a.port == b.port && (a.host == b.host || a.wildcard || b.wildcard);
}

class ConfigParser {
 public:
  ConfigParser(std::string source, std::string base_dir)
      : w_(source, "the config"), source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  StatusOr<SiteConfig> Parse(const std::string& text) {
    ASSIGN_OR_RETURN(const Entry root, w_.Root(text));
    return ParseRoot(root);
  }

 private:
  Status Error(const Entry& at, absl::string_view problem) const { return w_.Error(at, problem); }
  // Locates a problem reported by a config_internal check.
  Status Check(const Status& status, const Entry& at) const { return w_.Locate(status, at); }

  // The string at `key` of map `map` (whose entries are `fields`), which must be present.
  StatusOr<std::string> RequiredString(const Fields& fields, const Entry& map,
                                       absl::string_view key) const {
    auto it = fields.find(key);
    if (it == fields.end()) return w_.Missing(map, key);
    return w_.String(it->second);
  }

  // A path from the config, resolved against base_dir_.
  StatusOr<std::string> RequiredPath(const Fields& fields, const Entry& map,
                                     absl::string_view key) const {
    ASSIGN_OR_RETURN(std::string path, RequiredString(fields, map, key));
    return ResolvePath(base_dir_, path);
  }

  StatusOr<SiteConfig> ParseRoot(const Entry& root) const {
    SiteConfig config;
    config.source = source_;
    ASSIGN_OR_RETURN(Fields top, w_.Map(root, kTopKeys));
    ASSIGN_OR_RETURN(config.site, RequiredString(top, root, "site"));
    RETURN_IF_ERROR(Check(CheckSiteName(config.site), top.at("site")));
    RETURN_IF_ERROR(ParseListen(top, root, &config));
    if (auto it = top.find("peers"); it != top.end() && !it->second.value.IsNull()) {
      RETURN_IF_ERROR(ParsePeers(it->second, &config));
    }
    ASSIGN_OR_RETURN(config.data_dir, RequiredPath(top, root, "data_dir"));
    if (auto it = top.find("devices"); it != top.end()) {
      RETURN_IF_ERROR(ParseDevices(it->second, &config));
    }
    if (auto it = top.find("data_roots"); it != top.end() && !it->second.value.IsNull()) {
      ASSIGN_OR_RETURN(std::vector<Entry> items, w_.List(it->second));
      for (size_t i = 0; i < items.size(); ++i) {
        ASSIGN_OR_RETURN(std::string root, w_.String(items[i]));
        if (root.empty()) return Error(items[i], "empty path");
        config.data_roots.push_back(ResolvePath(base_dir_, root));
      }
    }
    if (config.data_roots.empty()) config.data_roots.push_back(config.data_dir);
    if (auto it = top.find("tls"); it != top.end()) {
      RETURN_IF_ERROR(ParseTls(it->second, &config));
    }
    if (auto it = top.find("insecure"); it != top.end()) {
      ASSIGN_OR_RETURN(config.insecure, w_.Bool(it->second));
    }
    if (!config.insecure) {
      const Entry& listen = top.at("listen");
      ASSIGN_OR_RETURN(Fields fields, w_.Map(listen, kListenKeys));
      RETURN_IF_ERROR(CheckPlaintext(fields, "peer", config.peer_listen, config.tls.has_value(),
                                     "anyone who reaches it could pose as a peer; configure "
                                     "tls:, listen on 127.0.0.1, or set insecure: true"));
      RETURN_IF_ERROR(CheckPlaintext(
          fields, "control", config.control_listen, config.tls && config.tls->control,
          "the control token would travel in the clear; set tls: {control: true} (the CLI "
          "then needs --tls-ca), listen on 127.0.0.1, or set insecure: true"));
    }
    if (top.find("auth") == top.end()) return w_.Missing(root, "auth");
    const Entry& auth = top.at("auth");
    ASSIGN_OR_RETURN(Fields auth_fields, w_.Map(auth, kAuthKeys));
    ASSIGN_OR_RETURN(config.token_file, RequiredPath(auth_fields, auth, "token_file"));
    RETURN_IF_ERROR(Check(ReadTokenFile(config.token_file).status(), auth_fields.at("token_file")));
    if (auto it = top.find("log_level"); it != top.end()) {
      ASSIGN_OR_RETURN(config.log_level, w_.String(it->second));
      RETURN_IF_ERROR(Check(CheckLogLevel(config.log_level), it->second));
    }
    if (auto it = top.find("links"); it != top.end() && !it->second.value.IsNull()) {
      RETURN_IF_ERROR(ParseLinks(it->second, &config.links));
    }
    if (auto it = top.find("memory_limit_mb"); it != top.end()) {
      ASSIGN_OR_RETURN(std::string text, w_.Scalar(it->second, "a number"));
      StatusOr<uint64_t> value = ParseWholeNumber(text);
      RETURN_IF_ERROR(Check(value.status(), it->second));
      if (*value < 1 || *value > (uint64_t{1} << 30)) {
        return Error(it->second, absl::StrCat("must be between 1 and 1073741824 MiB, got ", text));
      }
      config.memory_limit_bytes = static_cast<int64_t>(*value) << 20;
    }
    if (auto it = top.find("volunteer"); it != top.end() && !it->second.value.IsNull()) {
      RETURN_IF_ERROR(ParseVolunteer(it->second, &config));
    }
    return config;
  }

  // volunteer: [{job: NAME_OR_ID, coordinator: PEER}, ...]: each job once, its coordinator a
  // configured peer (parsed above).
  Status ParseVolunteer(const Entry& list, SiteConfig* config) const {
    ASSIGN_OR_RETURN(std::vector<Entry> items, w_.List(list));
    for (const Entry& item : items) {
      ASSIGN_OR_RETURN(Fields fields, w_.Map(item, kVolunteerKeys));
      VolunteerConfig v;
      ASSIGN_OR_RETURN(v.job, RequiredString(fields, item, "job"));
      RETURN_IF_ERROR(Check(CheckVolunteerJob(v.job), fields.at("job")));
      for (const VolunteerConfig& other : config->volunteer) {
        if (other.job == v.job) {
          return Error(fields.at("job"), absl::StrCat("job '", v.job, "' is listed twice"));
        }
      }
      ASSIGN_OR_RETURN(v.coordinator, RequiredString(fields, item, "coordinator"));
      const bool peer = std::any_of(config->peers.begin(), config->peers.end(),
                                    [&](const PeerConfig& p) { return p.name == v.coordinator; });
      if (!peer) {
        return Error(fields.at("coordinator"),
                     absl::StrCat("'", v.coordinator,
                                  "' is not one of this site's peers (the coordinator is asked "
                                  "over the peer link: add it under peers)"));
      }
      config->volunteer.push_back(std::move(v));
    }
    return absl::OkStatus();
  }

  Status ParseListen(const Fields& top, const Entry& root, SiteConfig* config) const {
    if (top.find("listen") == top.end()) return w_.Missing(root, "listen");
    const Entry& listen = top.at("listen");
    ASSIGN_OR_RETURN(Fields fields, w_.Map(listen, kListenKeys));
    std::pair<absl::string_view, std::string*> slots[] = {{"peer", &config->peer_listen},
                                                          {"control", &config->control_listen},
                                                          {"status", &config->status_listen}};
    std::vector<std::pair<std::string, HostPort>> bound;
    for (auto& [key, out] : slots) {
      ASSIGN_OR_RETURN(*out, RequiredString(fields, listen, key));
      const Entry& at = fields.at(std::string(key));
      StatusOr<HostPort> address = ParseHostPort(*out, /*allow_port_zero=*/true);
      RETURN_IF_ERROR(Check(address.status(), at));
      for (const auto& [other_path, other] : bound) {
        if (Conflicts(*address, other)) {
          return Error(at, absl::StrCat("same address as ", other_path));
        }
      }
      bound.emplace_back(at.path, *address);
    }
    return absl::OkStatus();
  }

  Status ParsePeers(const Entry& list, SiteConfig* config) const {
    ASSIGN_OR_RETURN(std::vector<Entry> items, w_.List(list));
    std::map<std::string, std::string> name_paths, address_paths;  // -> path of first use
    for (const std::string& own :
         {config->peer_listen, config->control_listen, config->status_listen}) {
      address_paths.emplace(ParseHostPort(own, true)->Key(), "this site's own listen address");
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string& path = items[i].path;
      ASSIGN_OR_RETURN(Fields fields, w_.Map(items[i], kPeerKeys));
      PeerConfig peer;
      ASSIGN_OR_RETURN(peer.name, RequiredString(fields, items[i], "name"));
      const Entry& name = fields.at("name");
      RETURN_IF_ERROR(Check(CheckSiteName(peer.name), name));
      if (peer.name == config->site) {
        return Error(name, absl::StrCat("'", peer.name, "' is this site's name"));
      }
      if (auto [it, added] = name_paths.emplace(peer.name, path); !added) {
        return Error(name,
                     absl::StrCat("duplicate peer name '", peer.name, "' (also ", it->second, ")"));
      }
      ASSIGN_OR_RETURN(peer.address, RequiredString(fields, items[i], "address"));
      const Entry& address_at = fields.at("address");
      StatusOr<HostPort> address = ParseHostPort(peer.address, /*allow_port_zero=*/false);
      RETURN_IF_ERROR(Check(address.status(), address_at));
      if (address->wildcard) return Error(address_at, "cannot dial a wildcard address");
      if (auto [it, added] = address_paths.emplace(address->Key(), path); !added) {
        return Error(address_at, absl::StrCat("duplicate address '", peer.address, "' (also ",
                                              it->second, ")"));
      }
      config->peers.push_back(std::move(peer));
    }
    return absl::OkStatus();
  }

  Status ParseDevices(const Entry& list, SiteConfig* config) const {
    ASSIGN_OR_RETURN(std::vector<Entry> items, w_.List(list));
    if (items.empty()) return Error(list, "must list at least one device");
    config->devices.clear();
    for (size_t i = 0; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(std::string device, w_.String(items[i]));
      RETURN_IF_ERROR(Check(CheckDevice(device), items[i]));
      if (std::find(config->devices.begin(), config->devices.end(), device) !=
          config->devices.end()) {
        return Error(items[i], absl::StrCat("duplicate device '", device, "'"));
      }
      config->devices.push_back(std::move(device));
    }
    return absl::OkStatus();
  }

  // A listener at `address` (listen.`key`) without TLS must be on loopback.
  Status CheckPlaintext(const Fields& listen, absl::string_view key, const std::string& address,
                        bool tls, absl::string_view why) const {
    if (tls) return absl::OkStatus();
    StatusOr<HostPort> hp = ParseHostPort(address, true);
    if (!hp.ok() || IsLoopbackHost(hp->host)) return absl::OkStatus();
    return Error(listen.at(std::string(key)),
                 absl::StrCat("'", address, "' is not a loopback address and is served without ",
                              "TLS: ", why));
  }

  Status ParseTls(const Entry& map, SiteConfig* config) const {
    ASSIGN_OR_RETURN(Fields fields, w_.Map(map, kTlsKeys));
    TlsConfig tls;
    struct Slot {
      absl::string_view key;
      std::string* path;
      std::string* as_written;
    } slots[] = {{"ca", &tls.ca_file, &tls.ca_as_written},
                 {"cert", &tls.cert_file, &tls.cert_as_written},
                 {"key", &tls.key_file, &tls.key_as_written}};
    for (auto& [key, out, as_written] : slots) {
      ASSIGN_OR_RETURN(*as_written, RequiredString(fields, map, key));
      *out = ResolvePath(base_dir_, *as_written);
    }
    for (auto& [key, out, as_written] : slots) {
      RETURN_IF_ERROR(Check(CheckReadableFile(*out), fields.at(std::string(key))));
    }
    RETURN_IF_ERROR(Check(CheckPrivateFile(tls.key_file, "private key"), fields.at("key")));
    if (auto it = fields.find("control"); it != fields.end()) {
      ASSIGN_OR_RETURN(tls.control, w_.Bool(it->second));
    }
    config->tls = std::move(tls);
    return absl::OkStatus();
  }

  // A number of seconds in (0, max] at `key`, if present.
  Status Seconds(const Fields& fields, absl::string_view key, double max, double* out) const {
    auto it = fields.find(key);
    if (it == fields.end()) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string text, w_.Scalar(it->second, "a number"));
    StatusOr<double> value = ParseNumber(text);
    RETURN_IF_ERROR(Check(value.status(), it->second));
    if (!(*value > 0 && *value <= max)) {
      return Error(it->second, absl::StrCat("must be > 0 and <= ", max, " seconds, got ", text));
    }
    *out = *value;
    return absl::OkStatus();
  }

  Status ParseLinks(const Entry& map, LinkConfig* links) const {
    ASSIGN_OR_RETURN(Fields fields, w_.Map(map, kLinkKeys));
    RETURN_IF_ERROR(
        Seconds(fields, "heartbeat_interval_seconds", 3600, &links->heartbeat_interval_seconds));
    RETURN_IF_ERROR(
        Seconds(fields, "probe_interval_seconds", 86400, &links->probe_interval_seconds));
    if (auto it = fields.find("probe_bytes"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string text, w_.Scalar(it->second, "a number"));
      StatusOr<uint64_t> value = ParseWholeNumber(text);
      RETURN_IF_ERROR(Check(value.status(), it->second));
      if (*value < (64u << 10) || *value > (1u << 30)) {
        return Error(
            it->second,
            absl::StrCat("must be between 65536 (64 KiB) and 1073741824 (1 GiB), got ", text));
      }
      links->probe_bytes = *value;
    }
    RETURN_IF_ERROR(
        Seconds(fields, "reconnect_initial_seconds", 60, &links->reconnect_initial_seconds));
    RETURN_IF_ERROR(Seconds(fields, "reconnect_max_seconds", 3600, &links->reconnect_max_seconds));
    RETURN_IF_ERROR(
        Seconds(fields, "gossip_refresh_seconds", 86400, &links->gossip_refresh_seconds));
    if (links->reconnect_max_seconds < links->reconnect_initial_seconds) {
      bool max_given = fields.count("reconnect_max_seconds") > 0;
      std::string key = max_given ? "reconnect_max_seconds" : "reconnect_initial_seconds";
      return Error(fields.at(std::string(key)),
                   absl::StrCat("reconnect_max_seconds (", links->reconnect_max_seconds,
                                ") must be >= reconnect_initial_seconds (",
                                links->reconnect_initial_seconds, ")"));
    }
    return absl::OkStatus();
  }

  YamlWalker w_;
  std::string source_;
  std::string base_dir_;
};

}  // namespace

StatusOr<SiteConfig> ParseSiteConfig(const std::string& yaml_text, const std::string& source,
                                     const std::string& base_dir) {
  return ConfigParser(source, base_dir).Parse(yaml_text);
}

StatusOr<SiteConfig> LoadSiteConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, "site config"));
  return ParseSiteConfig(text, path, std::filesystem::path(path).parent_path().string());
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

}  // namespace longhaul::daemon
