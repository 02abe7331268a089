// StatusServer: an acceptor on its own strand plus one asynchronous Beast session per
// connection, run by a small pool of threads. Sessions register themselves so that Stop()
// can close idle ones and wait (bounded) for those still writing a response.
#include "daemon/http/status_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "third_party/beast.h"

namespace longhaul::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr int kThreads = 2;
constexpr auto kRequestTimeout = std::chrono::seconds(10);  // to read one whole request
constexpr auto kWriteTimeout = std::chrono::seconds(10);
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
constexpr std::uint32_t kHeaderLimit = 16 * 1024;
constexpr std::uint64_t kBodyLimit = 64 * 1024;
constexpr std::size_t kMaxConnections = 256;
constexpr const char* kTextType = "text/plain; charset=utf-8";

class Session;

// State shared by the server and its sessions (which may outlive the server's Stop()).
struct Shared {
  std::map<std::string, HttpHandler> handlers;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable sessions_done;  // sessions became empty
  bool draining = false;  // Stop() waits on sessions_done (guarded by mu; a test seam)
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // guarded by mu
};

// Parses "host:port" / "[v6]:port"; "localhost" means 127.0.0.1.
StatusOr<tcp::endpoint> ParseAddress(const std::string& address) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("status server: bad listen address \"", address, "\": ", why));
  };
  std::string host, port_text;
  if (!address.empty() && address[0] == '[') {
    const std::size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return bad("expected [ipv6]:port");
    }
    host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    const std::size_t colon = address.rfind(':');
    if (colon == std::string::npos) return bad("expected host:port");
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port_text) > 65535) {
    return bad("port must be a number from 0 to 65535");
  }
  if (host == "localhost") host = "127.0.0.1";
  beast::error_code ec;
  const net::ip::address ip = net::ip::make_address(host, ec);
  if (ec) return bad("host must be an IPv4 or IPv6 literal or \"localhost\"");
  return tcp::endpoint(ip, static_cast<unsigned short>(std::stoi(port_text)));
}

// One connection: read a request, answer it, repeat while keep-alive. All its handlers run
// on the connection's strand, so the members need no lock.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {}

  ~Session() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->sessions.erase(this);
    if (shared_->sessions.empty()) shared_->sessions_done.notify_all();
  }

  // Called on the acceptor's strand as soon as the connection is accepted, so that a Stop()
  // that closes the acceptor after it sees this session: registered, it is closed by Stop()
  // even if its first handler has not run yet. False (and closed) when the server is stopping
  // or full.
  bool Register() {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (!shared_->stopping && shared_->sessions.size() < kMaxConnections) {
        shared_->sessions.emplace(this, weak_from_this());
        return true;
      }
    }
    Close();
    return false;
  }

  void Start() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::ReadRequest, shared_from_this()));
  }

  // Called by Stop() once no thread runs any more, for connections its grace did not close.
  void CloseNow() { Close(); }

  // Called by Stop(): closes the connection unless a response is being written.
  void ServerStopping() {
    net::post(stream_.get_executor(),
              beast::bind_front_handler(&Session::OnServerStopping, shared_from_this()));
  }

 private:
  void ReadRequest() {
    if (shared_->stopping) return Close();
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    reading_ = true;
    stream_.expires_after(kRequestTimeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t /*bytes*/) {
    reading_ = false;
    if (!ec) return Respond(parser_->release());
    if (shared_->stopping || ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == bhttp::error::partial_message) {
      return Close();
    }
    // A malformed request gets a short answer before the connection closes.
    if (ec == bhttp::error::header_limit) {
      return WriteError(bhttp::status::request_header_fields_too_large, ec.message());
    }
    if (ec == bhttp::error::body_limit) {
      return WriteError(bhttp::status::payload_too_large, ec.message());
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) {
      return WriteError(bhttp::status::bad_request, ec.message());
    }
    Close();  // a socket error
  }

  void Respond(const bhttp::request<bhttp::string_body>& request) {
    res_ = {};
    res_.version(request.version());
    const bool head = request.method() == bhttp::verb::head;
    const bool keep_alive = request.keep_alive() && !shared_->stopping;
    if (request.method() != bhttp::verb::get && !head) {
      res_.set(bhttp::field::allow, "GET, HEAD");
      Fill(405, kTextType, "method not allowed\n", head);
      return Write(keep_alive);
    }
    const beast::string_view target = request.target();
    std::string path(target.data(), target.size());
    path = path.substr(0, path.find('?'));
    const auto it = shared_->handlers.find(path);
    if (it == shared_->handlers.end()) {
      Fill(404, kTextType, "not found\n", head);
      return Write(keep_alive);
    }
    HttpResponse response;
    std::string error;
    try {
      response = it->second();
      if (response.status < 200 || response.status > 599) {
        error = absl::StrCat("handler returned invalid status ", response.status);
      }
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
    if (!error.empty()) {
      spdlog::error("status server: handler for {} failed: {}", path, error);
      Fill(500, kTextType, "internal server error: " + error + "\n", head);
    } else {
      if (response.status == 204 || response.status == 304) response.body.clear();
      for (const auto& [name, value] : response.headers) res_.set(name, value);
      Fill(response.status, response.content_type, std::move(response.body), head);
    }
    Write(keep_alive);
  }

  // Sets status, type and body; a HEAD response keeps the length but drops the body.
  void Fill(int status, const std::string& content_type, std::string body, bool head) {
    res_.result(static_cast<unsigned>(status));
    res_.set(bhttp::field::server, "longhauld");
    res_.set(bhttp::field::content_type, content_type);
    if (head) {
      res_.content_length(body.size());
    } else {
      res_.body() = std::move(body);
      res_.prepare_payload();
    }
  }

  void WriteError(bhttp::status status, const std::string& message) {
    res_ = {};
    Fill(static_cast<int>(status), kTextType, message + "\n", /*head=*/false);
    Write(/*keep_alive=*/false);
  }

  void Write(bool keep_alive) {
    res_.keep_alive(keep_alive);
    stream_.expires_after(kWriteTimeout);
    bhttp::async_write(
        stream_, res_,
        beast::bind_front_handler(&Session::OnWrite, shared_from_this(), keep_alive));
  }

  void OnWrite(bool keep_alive, beast::error_code ec, std::size_t /*bytes*/) {
    if (ec || !keep_alive || shared_->stopping) return Close();
    ReadRequest();
  }

  void OnServerStopping() {
    if (reading_) Close();  // a write in progress closes the connection when it completes
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<Shared> shared_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> res_;
  bool reading_ = false;
};

}  // namespace

class StatusServer::Impl {
 public:
  Impl(std::map<std::string, HttpHandler> handlers, std::chrono::milliseconds stop_grace)
      : stop_grace_(stop_grace),
        acceptor_(net::make_strand(ioc_)),
        retry_timer_(acceptor_.get_executor()),
        work_(ioc_.get_executor()),
        shared_(std::make_shared<Shared>()) {
    shared_->handlers = std::move(handlers);
  }

  ~Impl() { Stop(); }

  Status Listen(const tcp::endpoint& endpoint, const std::string& address) {
    auto failed = [&](const char* step, const beast::error_code& ec) {
      return absl::UnavailableError(absl::StrCat("status server: cannot listen on ", address, ": ",
                                                 step, ": ", ec.message()));
    };
    beast::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (ec) return failed("open", ec);
    acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (ec) return failed("setsockopt", ec);
    acceptor_.bind(endpoint, ec);
    if (ec) return failed("bind", ec);
    acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return failed("listen", ec);
    const tcp::endpoint local = acceptor_.local_endpoint(ec);
    if (ec) return failed("getsockname", ec);
    port_ = local.port();
    return absl::OkStatus();
  }

  void Run() {
    net::post(acceptor_.get_executor(), [this] { DoAccept(); });
    for (int i = 0; i < kThreads; ++i) {
      threads_.emplace_back([this] {
        for (;;) {
          try {
            ioc_.run();
            return;
          } catch (const std::exception& e) {
            spdlog::error("status server: unexpected exception: {}", e.what());
          }
        }
      });
    }
  }

  int port() const { return port_; }

  bool StopIsDraining() const {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->draining;
  }

  void Stop() {
    std::lock_guard<std::mutex> stop_lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    if (threads_.empty()) {  // never ran: nothing is in flight
      beast::error_code ec;
      acceptor_.close(ec);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + stop_grace_;

    // Stop accepting (on the acceptor's strand, where the accept loop runs).
    auto closed = std::make_shared<std::promise<void>>();
    std::future<void> closed_future = closed->get_future();
    net::post(acceptor_.get_executor(), [this, closed] {
      beast::error_code ec;
      acceptor_.close(ec);
      retry_timer_.cancel();
      closed->set_value();
    });
    closed_future.wait_until(deadline);

    // Close idle connections; the others close after their response is written.
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stopping = true;  // no session registers from here on
    }
    for (auto& session : LiveSessions()) session->ServerStopping();
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      shared_->draining = true;  // seen by others only while the wait below has released mu
      shared_->sessions_done.wait_until(lock, deadline, [&] { return shared_->sessions.empty(); });
      shared_->draining = false;
    }
    work_.reset();
    ioc_.stop();
    for (std::thread& thread : threads_) thread.join();

    // What the grace did not see done (its handlers still queued on a loaded machine) is done
    // here, with no thread left to race, so that a client never waits on a stopped server:
    // the acceptor closed, the queued handlers run (an accept completed before the close drops
    // its socket, a session stopping closes its own), and any connection still open closed.
    beast::error_code ec;
    acceptor_.close(ec);
    retry_timer_.cancel();
    ioc_.restart();
    ioc_.poll();
    for (auto& session : LiveSessions()) session->CloseNow();
  }

 private:
  // The registered sessions still alive, each held for the caller (released outside the lock:
  // a session's destructor takes it).
  std::vector<std::shared_ptr<Session>> LiveSessions() {
    std::vector<std::shared_ptr<Session>> live;
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (auto& [ptr, weak] : shared_->sessions) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
    return live;
  }

  void DoAccept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           beast::bind_front_handler(&Impl::OnAccept, this));
  }

  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (!acceptor_.is_open()) return;
    if (ec) {  // for example out of file descriptors: try again shortly
      spdlog::warn("status server: accept failed: {}", ec.message());
      retry_timer_.expires_after(kAcceptRetryDelay);
      retry_timer_.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && acceptor_.is_open()) DoAccept();
      });
      return;
    }
    auto session = std::make_shared<Session>(std::move(socket), shared_);
    if (session->Register()) session->Start();
    DoAccept();
  }

  const std::chrono::milliseconds stop_grace_;
  net::io_context ioc_{kThreads};
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::mutex stop_mu_;
  bool stopped_ = false;
};

StatusOr<std::unique_ptr<StatusServer>> StatusServer::Start(
    const std::string& address, std::map<std::string, HttpHandler> handlers,
    std::chrono::milliseconds stop_grace) {
  for (const auto& [path, handler] : handlers) {
    if (path.empty() || path[0] != '/' || !handler) {
      return absl::InvalidArgumentError(absl::StrCat("status server on ", address, ": path \"",
                                                     path,
                                                     "\" must start with '/' and have a handler"));
    }
  }
  ASSIGN_OR_RETURN(const tcp::endpoint endpoint, ParseAddress(address));
  auto impl = std::make_unique<Impl>(std::move(handlers), stop_grace);
  RETURN_IF_ERROR(impl->Listen(endpoint, address));
  impl->Run();
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(impl)));
}

StatusServer::StatusServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusServer::~StatusServer() { Stop(); }

int StatusServer::port() const { return impl_->port(); }

void StatusServer::Stop() { impl_->Stop(); }

bool StatusServer::StopIsDraining() const { return impl_->StopIsDraining(); }

}  // namespace longhaul::http
