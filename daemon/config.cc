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
#include "common/yaml_load.h"
#include "daemon/config_checks.h"

namespace longhaul::daemon {
namespace {

using config_internal::CheckDevice;
using config_internal::CheckLogLevel;
using config_internal::CheckReadableFile;
using config_internal::CheckSiteName;
using config_internal::ClosestKey;
using config_internal::HostPort;
using config_internal::ParseHostPort;
using config_internal::ParseNumber;
using config_internal::ParseWholeNumber;
using config_internal::ReadFileToString;
using config_internal::ResolvePath;

// A value in the YAML tree with the key that names it (for list items and the root, the
// node itself). The key's mark locates a value that is missing or empty.
struct Entry {
  YAML::Node key;
  YAML::Node value;
};
using Fields = std::map<std::string, Entry, std::less<>>;

const std::vector<absl::string_view> kTopKeys = {
    "site", "listen",   "peers", "data_dir",  "data_roots", "devices",
    "tls",  "insecure", "auth",  "log_level", "links",      "memory_limit_mb"};
const std::vector<absl::string_view> kListenKeys = {"peer", "control", "status"};
const std::vector<absl::string_view> kPeerKeys = {"name", "address"};
const std::vector<absl::string_view> kTlsKeys = {"ca", "cert", "key", "control"};
const std::vector<absl::string_view> kAuthKeys = {"token_file"};
const std::vector<absl::string_view> kLinkKeys = {
    "heartbeat_interval_seconds", "probe_interval_seconds", "probe_bytes",
    "reconnect_initial_seconds", "reconnect_max_seconds"};

std::string Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// What a node holds, for "expected X, got Y" messages.
std::string Kind(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return absl::StrCat("'", node.Scalar(), "'");
  return "nothing";
}

// Two listen addresses that cannot both be bound (port 0 picks a free port, so never).
bool Conflicts(const HostPort& a, const HostPort& b) {
  return a.port != 0 && a.port == b.port && (a.host == b.host || a.wildcard || b.wildcard);
}

class Walker {
 public:
  Walker(std::string source, std::string base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  StatusOr<SiteConfig> Parse(const std::string& text) {
    if (text.size() > kMaxYamlBytes) {
      return Error(YAML::Mark::null_mark(), "",
                   absl::StrCat("the config is ", text.size(), " bytes, more than the limit of ",
                                kMaxYamlBytes));
    }
    try {
      const YamlDocuments docs = LoadYamlDocuments(text);
      if (docs.count == 0) return Error(YAML::Mark::null_mark(), "", "the config is empty");
      if (docs.count > 1) return Error(docs.second_start, "", TooManyDocuments(docs));
      return ParseRoot(Entry{docs.first, docs.first});
    } catch (const YAML::Exception& e) {
      return Error(e.mark, "", absl::StrCat("invalid YAML: ", e.msg));
    }
  }

 private:
  Status Error(const YAML::Mark& mark, const std::string& path, absl::string_view problem) const {
    int line = mark.is_null() ? 1 : mark.line + 1;
    int column = mark.is_null() ? 1 : mark.column + 1;
    return absl::InvalidArgumentError(absl::StrCat(source_, ":", line, ":", column, ": ",
                                                   path.empty() ? "(root)" : path, ": ", problem));
  }
  Status Error(const Entry& at, const std::string& path, absl::string_view problem) const {
    return Error(at.value.IsNull() ? at.key.Mark() : at.value.Mark(), path, problem);
  }
  // Locates a problem reported by a config_internal check.
  Status Check(const Status& status, const Entry& at, const std::string& path) const {
    return status.ok() ? status : Error(at, path, status.message());
  }

  // The entries of map `e`, after checking that every key is known and appears once.
  StatusOr<Fields> MapFields(const Entry& e, const std::string& path,
                             const std::vector<absl::string_view>& known) const {
    if (!e.value.IsMap())
      return Error(e, path, absl::StrCat("expected a map, got ", Kind(e.value)));
    Fields fields;
    for (auto it = e.value.begin(); it != e.value.end(); ++it) {
      if (!it->first.IsScalar()) return Error(it->first.Mark(), path, "keys must be strings");
      const std::string name = it->first.Scalar();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string problem = absl::StrCat("unknown key '", name, "'");
        std::string hint = ClosestKey(name, known);
        if (!hint.empty()) absl::StrAppend(&problem, " (did you mean '", hint, "'?)");
        return Error(it->first.Mark(), Join(path, name), problem);
      }
      if (!fields.emplace(name, Entry{it->first, it->second}).second) {
        return Error(it->first.Mark(), Join(path, name), "duplicate key");
      }
    }
    return fields;
  }

  // The items of list `e`.
  StatusOr<std::vector<Entry>> ListItems(const Entry& e, const std::string& path) const {
    if (!e.value.IsSequence()) {
      return Error(e, path, absl::StrCat("expected a list, got ", Kind(e.value)));
    }
    std::vector<Entry> items;
    for (const YAML::Node& item : e.value) items.push_back(Entry{item, item});
    return items;
  }

  // The text of scalar `e`; `what` names the expected value ("a number").
  StatusOr<std::string> Scalar(const Entry& e, const std::string& path,
                               absl::string_view what) const {
    if (!e.value.IsScalar()) {
      return Error(e, path, absl::StrCat("expected ", what, ", got ", Kind(e.value)));
    }
    return e.value.Scalar();
  }

  StatusOr<std::string> String(const Entry& e, const std::string& path) const {
    ASSIGN_OR_RETURN(std::string text, Scalar(e, path, "a string"));
    if (text.empty()) return Error(e, path, "must not be empty");
    return text;
  }

  // true or false.
  StatusOr<bool> Bool(const Entry& e, const std::string& path) const {
    ASSIGN_OR_RETURN(std::string text, Scalar(e, path, "true or false"));
    if (text != "true" && text != "false") {
      return Error(e, path, absl::StrCat("expected true or false, got '", text, "'"));
    }
    return text == "true";
  }

  // The string at `key` of map `map` (whose entries are `fields`), which must be present.
  StatusOr<std::string> RequiredString(const Fields& fields, const Entry& map,
                                       const std::string& map_path, absl::string_view key) const {
    auto it = fields.find(key);
    if (it == fields.end())
      return Error(map.value.Mark(), Join(map_path, key), "missing required key");
    return String(it->second, Join(map_path, key));
  }

  // A path from the config, resolved against base_dir_.
  StatusOr<std::string> RequiredPath(const Fields& fields, const Entry& map,
                                     const std::string& map_path, absl::string_view key) const {
    ASSIGN_OR_RETURN(std::string path, RequiredString(fields, map, map_path, key));
    return ResolvePath(base_dir_, path);
  }

  StatusOr<SiteConfig> ParseRoot(const Entry& root) const {
    SiteConfig config;
    config.source = source_;
    ASSIGN_OR_RETURN(Fields top, MapFields(root, "", kTopKeys));
    ASSIGN_OR_RETURN(config.site, RequiredString(top, root, "", "site"));
    RETURN_IF_ERROR(Check(CheckSiteName(config.site), top.at("site"), "site"));
    RETURN_IF_ERROR(ParseListen(top, root, &config));
    if (auto it = top.find("peers"); it != top.end() && !it->second.value.IsNull()) {
      RETURN_IF_ERROR(ParsePeers(it->second, &config));
    }
    ASSIGN_OR_RETURN(config.data_dir, RequiredPath(top, root, "", "data_dir"));
    if (auto it = top.find("devices"); it != top.end()) {
      RETURN_IF_ERROR(ParseDevices(it->second, &config));
    }
    if (auto it = top.find("data_roots"); it != top.end() && !it->second.value.IsNull()) {
      ASSIGN_OR_RETURN(std::vector<Entry> items, ListItems(it->second, "data_roots"));
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string path = absl::StrCat("data_roots[", i, "]");
        ASSIGN_OR_RETURN(std::string root, String(items[i], path));
        if (root.empty()) return Error(items[i], path, "empty path");
        config.data_roots.push_back(ResolvePath(base_dir_, root));
      }
    }
    if (config.data_roots.empty()) config.data_roots.push_back(config.data_dir);
    if (auto it = top.find("tls"); it != top.end()) {
      RETURN_IF_ERROR(ParseTls(it->second, &config));
    }
    if (auto it = top.find("insecure"); it != top.end()) {
      ASSIGN_OR_RETURN(config.insecure, Bool(it->second, "insecure"));
    }
    if (!config.insecure) {
      const Entry& listen = top.at("listen");
      ASSIGN_OR_RETURN(Fields fields, MapFields(listen, "listen", kListenKeys));
      RETURN_IF_ERROR(CheckPlaintext(fields, "peer", config.peer_listen, config.tls.has_value(),
                                     "anyone who reaches it could pose as a peer; configure "
                                     "tls:, listen on 127.0.0.1, or set insecure: true"));
      RETURN_IF_ERROR(CheckPlaintext(
          fields, "control", config.control_listen, config.tls && config.tls->control,
          "the control token would travel in the clear; set tls: {control: true} (the CLI "
          "then needs --tls-ca), listen on 127.0.0.1, or set insecure: true"));
    }
    if (top.find("auth") == top.end()) {
      return Error(root.value.Mark(), "auth", "missing required key");
    }
    const Entry& auth = top.at("auth");
    ASSIGN_OR_RETURN(Fields auth_fields, MapFields(auth, "auth", kAuthKeys));
    ASSIGN_OR_RETURN(config.token_file, RequiredPath(auth_fields, auth, "auth", "token_file"));
    RETURN_IF_ERROR(Check(ReadTokenFile(config.token_file).status(), auth_fields.at("token_file"),
                          "auth.token_file"));
    if (auto it = top.find("log_level"); it != top.end()) {
      ASSIGN_OR_RETURN(config.log_level, String(it->second, "log_level"));
      RETURN_IF_ERROR(Check(CheckLogLevel(config.log_level), it->second, "log_level"));
    }
    if (auto it = top.find("links"); it != top.end() && !it->second.value.IsNull()) {
      RETURN_IF_ERROR(ParseLinks(it->second, &config.links));
    }
    if (auto it = top.find("memory_limit_mb"); it != top.end()) {
      ASSIGN_OR_RETURN(std::string text, Scalar(it->second, "memory_limit_mb", "a number"));
      StatusOr<uint64_t> value = ParseWholeNumber(text);
      RETURN_IF_ERROR(Check(value.status(), it->second, "memory_limit_mb"));
      if (*value < 1 || *value > (uint64_t{1} << 30)) {
        return Error(it->second, "memory_limit_mb",
                     absl::StrCat("must be between 1 and 1073741824 MiB, got ", text));
      }
      config.memory_limit_bytes = static_cast<int64_t>(*value) << 20;
    }
    return config;
  }

  Status ParseListen(const Fields& top, const Entry& root, SiteConfig* config) const {
    if (top.find("listen") == top.end()) {
      return Error(root.value.Mark(), "listen", "missing required key");
    }
    const Entry& listen = top.at("listen");
    ASSIGN_OR_RETURN(Fields fields, MapFields(listen, "listen", kListenKeys));
    std::pair<absl::string_view, std::string*> slots[] = {{"peer", &config->peer_listen},
                                                          {"control", &config->control_listen},
                                                          {"status", &config->status_listen}};
    std::vector<std::pair<std::string, HostPort>> bound;
    for (auto& [key, out] : slots) {
      std::string path = Join("listen", key);
      ASSIGN_OR_RETURN(*out, RequiredString(fields, listen, "listen", key));
      const Entry& at = fields.at(std::string(key));
      StatusOr<HostPort> address = ParseHostPort(*out, /*allow_port_zero=*/true);
      RETURN_IF_ERROR(Check(address.status(), at, path));
      for (const auto& [other_path, other] : bound) {
        if (Conflicts(*address, other)) {
          return Error(at, path, absl::StrCat("same address as ", other_path));
        }
      }
      bound.emplace_back(path, *address);
    }
    return absl::OkStatus();
  }

  Status ParsePeers(const Entry& list, SiteConfig* config) const {
    ASSIGN_OR_RETURN(std::vector<Entry> items, ListItems(list, "peers"));
    std::map<std::string, std::string> name_paths, address_paths;  // -> path of first use
    for (const std::string& own :
         {config->peer_listen, config->control_listen, config->status_listen}) {
      address_paths.emplace(ParseHostPort(own, true)->Key(), "this site's own listen address");
    }
    for (size_t i = 0; i < items.size(); ++i) {
      std::string path = absl::StrCat("peers[", i, "]");
      ASSIGN_OR_RETURN(Fields fields, MapFields(items[i], path, kPeerKeys));
      PeerConfig peer;
      ASSIGN_OR_RETURN(peer.name, RequiredString(fields, items[i], path, "name"));
      const Entry& name = fields.at("name");
      RETURN_IF_ERROR(Check(CheckSiteName(peer.name), name, path + ".name"));
      if (peer.name == config->site) {
        return Error(name, path + ".name", absl::StrCat("'", peer.name, "' is this site's name"));
      }
      if (auto [it, added] = name_paths.emplace(peer.name, path); !added) {
        return Error(name, path + ".name",
                     absl::StrCat("duplicate peer name '", peer.name, "' (also ", it->second, ")"));
      }
      ASSIGN_OR_RETURN(peer.address, RequiredString(fields, items[i], path, "address"));
      const Entry& address_at = fields.at("address");
      StatusOr<HostPort> address = ParseHostPort(peer.address, /*allow_port_zero=*/false);
      RETURN_IF_ERROR(Check(address.status(), address_at, path + ".address"));
      if (address->wildcard) {
        return Error(address_at, path + ".address", "cannot dial a wildcard address");
      }
      if (auto [it, added] = address_paths.emplace(address->Key(), path); !added) {
        return Error(
            address_at, path + ".address",
            absl::StrCat("duplicate address '", peer.address, "' (also ", it->second, ")"));
      }
      config->peers.push_back(std::move(peer));
    }
    return absl::OkStatus();
  }

  Status ParseDevices(const Entry& list, SiteConfig* config) const {
    ASSIGN_OR_RETURN(std::vector<Entry> items, ListItems(list, "devices"));
    if (items.empty()) return Error(list, "devices", "must list at least one device");
    config->devices.clear();
    for (size_t i = 0; i < items.size(); ++i) {
      std::string path = absl::StrCat("devices[", i, "]");
      ASSIGN_OR_RETURN(std::string device, String(items[i], path));
      RETURN_IF_ERROR(Check(CheckDevice(device), items[i], path));
      if (std::find(config->devices.begin(), config->devices.end(), device) !=
          config->devices.end()) {
        return Error(items[i], path, absl::StrCat("duplicate device '", device, "'"));
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
    return Error(listen.at(std::string(key)), Join("listen", key),
                 absl::StrCat("'", address, "' is not a loopback address and is served without ",
                              "TLS: ", why));
  }

  Status ParseTls(const Entry& map, SiteConfig* config) const {
    ASSIGN_OR_RETURN(Fields fields, MapFields(map, "tls", kTlsKeys));
    TlsConfig tls;
    struct Slot {
      absl::string_view key;
      std::string* path;
      std::string* as_written;
    } slots[] = {{"ca", &tls.ca_file, &tls.ca_as_written},
                 {"cert", &tls.cert_file, &tls.cert_as_written},
                 {"key", &tls.key_file, &tls.key_as_written}};
    for (auto& [key, out, as_written] : slots) {
      ASSIGN_OR_RETURN(*as_written, RequiredString(fields, map, "tls", key));
      *out = ResolvePath(base_dir_, *as_written);
    }
    for (auto& [key, out, as_written] : slots) {
      RETURN_IF_ERROR(
          Check(CheckReadableFile(*out), fields.at(std::string(key)), Join("tls", key)));
    }
    RETURN_IF_ERROR(
        Check(CheckPrivateFile(tls.key_file, "private key"), fields.at("key"), "tls.key"));
    if (auto it = fields.find("control"); it != fields.end()) {
      ASSIGN_OR_RETURN(tls.control, Bool(it->second, "tls.control"));
    }
    config->tls = std::move(tls);
    return absl::OkStatus();
  }

  // A number of seconds in (0, max] at `key`, if present.
  Status Seconds(const Fields& fields, absl::string_view key, double max, double* out) const {
    auto it = fields.find(key);
    if (it == fields.end()) return absl::OkStatus();
    std::string path = Join("links", key);
    ASSIGN_OR_RETURN(std::string text, Scalar(it->second, path, "a number"));
    StatusOr<double> value = ParseNumber(text);
    RETURN_IF_ERROR(Check(value.status(), it->second, path));
    if (!(*value > 0 && *value <= max)) {
      return Error(it->second, path,
                   absl::StrCat("must be > 0 and <= ", max, " seconds, got ", text));
    }
    *out = *value;
    return absl::OkStatus();
  }

  Status ParseLinks(const Entry& map, LinkConfig* links) const {
    ASSIGN_OR_RETURN(Fields fields, MapFields(map, "links", kLinkKeys));
    RETURN_IF_ERROR(
        Seconds(fields, "heartbeat_interval_seconds", 3600, &links->heartbeat_interval_seconds));
    RETURN_IF_ERROR(
        Seconds(fields, "probe_interval_seconds", 86400, &links->probe_interval_seconds));
    if (auto it = fields.find("probe_bytes"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string text, Scalar(it->second, "links.probe_bytes", "a number"));
      StatusOr<uint64_t> value = ParseWholeNumber(text);
      RETURN_IF_ERROR(Check(value.status(), it->second, "links.probe_bytes"));
      if (*value < (64u << 10) || *value > (1u << 30)) {
        return Error(
            it->second, "links.probe_bytes",
            absl::StrCat("must be between 65536 (64 KiB) and 1073741824 (1 GiB), got ", text));
      }
      links->probe_bytes = *value;
    }
    RETURN_IF_ERROR(
        Seconds(fields, "reconnect_initial_seconds", 60, &links->reconnect_initial_seconds));
    RETURN_IF_ERROR(Seconds(fields, "reconnect_max_seconds", 3600, &links->reconnect_max_seconds));
    if (links->reconnect_max_seconds < links->reconnect_initial_seconds) {
      bool max_given = fields.count("reconnect_max_seconds") > 0;
      std::string key = max_given ? "reconnect_max_seconds" : "reconnect_initial_seconds";
      return Error(fields.at(std::string(key)), Join("links", key),
                   absl::StrCat("reconnect_max_seconds (", links->reconnect_max_seconds,
                                ") must be >= reconnect_initial_seconds (",
                                links->reconnect_initial_seconds, ")"));
    }
    return absl::OkStatus();
  }

  std::string source_;
  std::string base_dir_;
};

}  // namespace

StatusOr<SiteConfig> ParseSiteConfig(const std::string& yaml_text, const std::string& source,
                                     const std::string& base_dir) {
  return Walker(source, base_dir).Parse(yaml_text);
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
