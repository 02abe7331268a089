// Tests of StatusServer over real loopback connections: routing, methods, keep-alive,
// failing handlers, clients that stall mid-request, Stop(), and bind errors.
#include "daemon/http/status_server.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "third_party/beast.h"

namespace longhaul::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Response = bhttp::response<bhttp::string_body>;

constexpr auto kClientTimeout = std::chrono::seconds(5);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A blocking test client on one connection. Every operation gives up after kClientTimeout
// (Beast's stream timeout), so a broken server fails the test instead of hanging it.
class Client {
 public:
  explicit Client(int port, std::chrono::seconds timeout = kClientTimeout) : timeout_(timeout) {
    beast::error_code ec;
    stream_.expires_after(timeout_);
    stream_.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                          [&](beast::error_code e) { ec = e; });
    RunIo();
    INFO("connect: " << ec.message());
    REQUIRE(!ec);
  }

  // Sends one request and reads the response.
  Response Request(bhttp::verb method, const std::string& target, bool keep_alive = true) {
    bhttp::request<bhttp::empty_body> request{method, target, 11};
    request.set(bhttp::field::host, "127.0.0.1");
    request.keep_alive(keep_alive);
    beast::error_code ec;
    stream_.expires_after(timeout_);
    bhttp::async_write(stream_, request, [&](beast::error_code e, std::size_t) { ec = e; });
    RunIo();
    INFO("write: " << ec.message());
    REQUIRE(!ec);
    return ReadResponse(/*head=*/method == bhttp::verb::head);
  }

  Response Get(const std::string& target) { return Request(bhttp::verb::get, target); }

  Response ReadResponse(bool head = false) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.skip(head);
    beast::error_code ec;
    stream_.expires_after(timeout_);
    bhttp::async_read(stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    RunIo();
    INFO("read: " << ec.message());
    REQUIRE(!ec);
    return parser.release();
  }

  void SendRaw(const std::string& bytes) {
    beast::error_code ec;
    stream_.expires_after(timeout_);
    net::async_write(stream_, net::buffer(bytes),
                     [&](beast::error_code e, std::size_t) { ec = e; });
    RunIo();
    REQUIRE(!ec);
  }

  // True if the server closes the connection (within kClientTimeout) without sending more.
  bool ServerCloses() {
    char byte;
    beast::error_code ec;
    stream_.expires_after(timeout_);
    stream_.async_read_some(net::buffer(&byte, 1),
                            [&](beast::error_code e, std::size_t) { ec = e; });
    RunIo();
    return ec == net::error::eof || ec == net::error::connection_reset;
  }

 private:
  void RunIo() {
    ioc_.restart();
    ioc_.run();
  }

  std::chrono::seconds timeout_;
  net::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
};

std::map<std::string, HttpHandler> TestHandlers() {
  std::map<std::string, HttpHandler> handlers;
  handlers["/hello"] = [] { return HttpResponse{200, "text/plain; charset=utf-8", "hello\n"}; };
  handlers["/metrics"] = [] {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", "up 1\n"};
  };
  handlers["/throws"] = []() -> HttpResponse { throw std::runtime_error("boom"); };
  handlers["/throws-int"] = []() -> HttpResponse { throw 42; };
  handlers["/bad-status"] = [] { return HttpResponse{1234, "text/plain", "x"}; };
  handlers["/teapot"] = [] { return HttpResponse{418, "text/plain", "short and stout\n"}; };
  return handlers;
}

std::unique_ptr<StatusServer> StartTestServer(
    std::map<std::string, HttpHandler> handlers,
    std::chrono::milliseconds stop_grace = std::chrono::seconds(2)) {
  auto server = StatusServer::Start("127.0.0.1:0", std::move(handlers), stop_grace);
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  REQUIRE((*server)->port() > 0);
  return std::move(server).value();
}

TEST_CASE("GET and HEAD on registered paths", "[status_server]") {
  auto server = StartTestServer(TestHandlers());
  Client client(server->port());

  Response hello = client.Get("/hello");
  CHECK(hello.result_int() == 200);
  CHECK(hello.body() == "hello\n");
  CHECK(hello[bhttp::field::content_type] == "text/plain; charset=utf-8");
  CHECK(hello.keep_alive());

  // The same connection serves the next requests (keep-alive); the query string is ignored.
  Response metrics = client.Get("/metrics?name[]=up");
  CHECK(metrics.result_int() == 200);
  CHECK(metrics.body() == "up 1\n");
  CHECK(metrics[bhttp::field::content_type] == "text/plain; version=0.0.4; charset=utf-8");

  Response head = client.Request(bhttp::verb::head, "/hello");
  CHECK(head.result_int() == 200);
  CHECK(head.body().empty());
  CHECK(head[bhttp::field::content_length] == "6");

  CHECK(client.Get("/teapot").result_int() == 418);

  Response last = client.Request(bhttp::verb::get, "/hello", /*keep_alive=*/false);
  CHECK(last.body() == "hello\n");
  CHECK_FALSE(last.keep_alive());
  CHECK(client.ServerCloses());
}

TEST_CASE("unknown paths get 404, other methods 405", "[status_server]") {
  auto server = StartTestServer(TestHandlers());
  Client client(server->port());
  CHECK(client.Get("/nope").result_int() == 404);
  CHECK(client.Get("/hello/").result_int() == 404);
  CHECK(client.Get("/").result_int() == 404);
  CHECK(client.Request(bhttp::verb::head, "/nope").result_int() == 404);

  Response post = client.Request(bhttp::verb::post, "/hello");
  CHECK(post.result_int() == 405);
  CHECK(post[bhttp::field::allow] == "GET, HEAD");
  CHECK(client.Request(bhttp::verb::delete_, "/metrics").result_int() == 405);
  CHECK(client.Get("/hello").result_int() == 200);  // still serving on this connection
}

TEST_CASE("a throwing handler gives 500 and the server keeps serving", "[status_server]") {
  auto server = StartTestServer(TestHandlers());
  Client client(server->port());
  Response thrown = client.Get("/throws");
  CHECK(thrown.result_int() == 500);
  CHECK(thrown.body().find("boom") != std::string::npos);
  CHECK(client.Get("/hello").result_int() == 200);
  CHECK(client.Get("/throws-int").result_int() == 500);
  CHECK(client.Get("/bad-status").result_int() == 500);
  CHECK(client.Get("/hello").body() == "hello\n");
  CHECK(Client(server->port()).Get("/hello").result_int() == 200);
}

TEST_CASE("garbage gets 400 and a closed connection", "[status_server]") {
  auto server = StartTestServer(TestHandlers());
  Client client(server->port());
  client.SendRaw("THIS IS NOT HTTP\r\n\r\n");
  CHECK(client.ReadResponse().result_int() == 400);
  CHECK(client.ServerCloses());
  CHECK(Client(server->port()).Get("/hello").result_int() == 200);
}

TEST_CASE("clients stalled mid-request do not block others", "[status_server]") {
  auto server = StartTestServer(TestHandlers());
  // More stalled clients than the server has threads.
  std::vector<std::unique_ptr<Client>> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(std::make_unique<Client>(server->port()));
    stalled.back()->SendRaw("GET /hello HTTP/1.1\r\nHost: 127.");
  }
  Client client(server->port());
  CHECK(client.Get("/hello").body() == "hello\n");
  CHECK(client.Get("/metrics").body() == "up 1\n");

  // Every stalled client is still connected and is answered once it finishes its request: the
  // server did not serve the others by timing any of them out first.
  for (auto& s : stalled) {
    s->SendRaw("0.0.1\r\n\r\n");
    CHECK(s->ReadResponse().body() == "hello\n");
  }
}

TEST_CASE("Stop returns promptly and closes idle connections", "[status_server]") {
  auto server = StartTestServer(TestHandlers());
  const int port = server->port();
  Client idle(port);
  CHECK(idle.Get("/hello").result_int() == 200);  // now an idle keep-alive connection
  Client stalled(port);
  stalled.SendRaw("GET /hel");
  // Connections made just before Stop(): some are still queued (accepted, their first handler
  // not yet run, or not yet accepted) when it closes the acceptor. Every one is closed too.
  std::vector<std::unique_ptr<Client>> late;
  for (int i = 0; i < 16; ++i) {
    late.push_back(std::make_unique<Client>(port));
    late.back()->SendRaw("GET /hello HTTP/1.1\r\n");
  }

  const auto start = Clock::now();
  server->Stop();
  CHECK(SecondsSince(start) < 60);  // returns at all (a hang), not how fast
  CHECK(idle.ServerCloses());
  CHECK(stalled.ServerCloses());
  for (auto& client : late) CHECK(client->ServerCloses());
  server->Stop();  // idempotent

  // Nothing listens any more.
  net::io_context ioc;
  tcp::socket socket(ioc);
  beast::error_code ec;
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  CHECK(ec);
}

// Hang guards of the drain test: bounds on steps that take microseconds, not timings. Stop()
// is given a grace longer than kGuard, so a Stop() that is not woken when the request ends
// (it would return at the end of its grace) fails the test at kGuard.
constexpr auto kGuard = std::chrono::seconds(15);
constexpr auto kDrainGrace = std::chrono::seconds(30);

// Polls `done` until it holds; false after kGuard.
template <typename Pred>
bool WaitUntil(Pred done) {
  const auto deadline = Clock::now() + kGuard;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_CASE("Stop lets a request being answered finish", "[status_server]") {
  // The handler is held until Stop() is waiting for it (StopIsDraining), so the request is
  // being answered when Stop() starts draining, and what ends Stop()'s wait is the request
  // finishing, not the order in which the threads happened to run.
  std::atomic<bool> entered{false};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto handlers = TestHandlers();
  handlers["/slow"] = [&entered, released] {
    entered = true;
    if (released.wait_for(kDrainGrace) != std::future_status::ready) {
      return HttpResponse{500, "text/plain", "the test never released the handler\n"};
    }
    return HttpResponse{200, "text/plain", "done\n"};
  };
  auto server = StartTestServer(std::move(handlers), kDrainGrace);
  Client client(server->port(), kDrainGrace);
  auto request = std::async(std::launch::async, [&] { return client.Get("/slow").body(); });
  const bool in_handler = WaitUntil([&] { return entered.load(); });
  std::future<void> stop;
  bool draining = false;
  if (in_handler) {
    stop = std::async(std::launch::async, [&] { server->Stop(); });
    draining = WaitUntil([&] { return server->StopIsDraining(); });
  }
  release.set_value();
  REQUIRE(in_handler);
  {
    INFO("Stop() never waited for the request being answered");
    REQUIRE(draining);
  }
  {
    INFO("Stop() was not woken when the request it waited for finished");
    REQUIRE(stop.wait_for(kGuard) == std::future_status::ready);
  }
  REQUIRE(request.wait_for(kGuard) == std::future_status::ready);
  CHECK(request.get() == "done\n");
  CHECK_FALSE(server->StopIsDraining());
}

TEST_CASE("binding a port in use fails and names the address", "[status_server]") {
  auto first = StartTestServer(TestHandlers());
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = StatusServer::Start(address, TestHandlers());
  REQUIRE_FALSE(second.ok());
  INFO(second.status().ToString());
  CHECK(std::string(second.status().message()).find(address) != std::string::npos);
  CHECK(Client(first->port()).Get("/hello").result_int() == 200);  // the first one is fine
}

TEST_CASE("bad addresses and handler maps are rejected with a clear error", "[status_server]") {
  for (const std::string address : {"nonsense", "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:http",
                                    "example.invalid:80", "[::1:80", ":80", "300.1.1.1:80"}) {
    auto server = StatusServer::Start(address, TestHandlers());
    INFO(address);
    REQUIRE_FALSE(server.ok());
    CHECK(server.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(server.status().message()).find(address) != std::string::npos);
  }
  std::map<std::string, HttpHandler> no_slash;
  no_slash["metrics"] = [] { return HttpResponse{}; };
  CHECK(StatusServer::Start("127.0.0.1:0", no_slash).status().code() ==
        absl::StatusCode::kInvalidArgument);
  std::map<std::string, HttpHandler> empty_handler;
  empty_handler["/metrics"] = nullptr;
  CHECK_FALSE(StatusServer::Start("127.0.0.1:0", empty_handler).ok());
}

TEST_CASE("localhost and IPv6 literals are accepted", "[status_server]") {
  auto local = StatusServer::Start("localhost:0", TestHandlers());
  REQUIRE(local.ok());
  CHECK(Client((*local)->port()).Get("/hello").result_int() == 200);

  // Where the machine has no IPv6 the bind fails, but the address itself must parse.
  auto v6 = StatusServer::Start("[::1]:0", TestHandlers());
  if (!v6.ok()) CHECK(v6.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace longhaul::http
