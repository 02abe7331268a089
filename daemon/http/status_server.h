// A small HTTP/1.1 server (Boost.Beast) for longhauld's status endpoint: /metrics, /healthz
// and the like. GET and HEAD on a fixed set of paths, each answered by a handler; every
// connection is its own asynchronous session with a read deadline, so a slow or broken
// client never holds up another one, and a handler that throws costs one 500, not the server.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace longhaul::http {

// What a handler returns. `status` must be 100..599 (anything else is answered with 500).
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra response headers, e.g. {"Cache-Control", "no-cache"}.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Produces the response for one path. Called on the server's threads; handlers for
// different connections may run concurrently, so a handler must be thread-safe.
using HttpHandler = std::function<HttpResponse()>;

class StatusServer {
 public:
  // Listens on `address`, "host:port": host is an IPv4 literal, an IPv6 literal (in
  // brackets, "[::1]:9090") or "localhost" (127.0.0.1); port 0 picks a free port. Serves
  // GET and HEAD for the exact paths in `handlers` (the query string is ignored): 404 for
  // other paths, 405 for other methods, 500 when a handler throws. Keep-alive is supported.
  // Runs on threads of its own until Stop(). Errors (bad address, port in use) name the
  // address. `stop_grace` bounds how long Stop() waits for requests being answered.
  // REQUIRES: every path in `handlers` starts with '/' and has a handler.
  static StatusOr<std::unique_ptr<StatusServer>> Start(
      const std::string& address, std::map<std::string, HttpHandler> handlers,
      std::chrono::milliseconds stop_grace = std::chrono::seconds(2));

  ~StatusServer();  // Calls Stop().
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  // The port listened on (the one picked when `address` asked for port 0).
  int port() const;

  // Stops accepting, closes idle connections, lets requests being answered finish (for at
  // most the stop grace, 2 s by default; a handler still running after that delays only the
  // final thread join) and joins the server's threads. Idempotent and thread-safe, but must
  // not be called from a handler (it joins the thread the handler runs on).
  void Stop();

  // True while Stop() is blocked waiting for requests being answered to finish. A test seam:
  // a test holds a handler until Stop() waits for it, so that the wake-up at the end of the
  // request is a real one (a missing notify then keeps Stop() waiting for its whole grace).
  bool StopIsDraining() const;

 private:
  class Impl;
  explicit StatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace longhaul::http
