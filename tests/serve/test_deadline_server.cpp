// DeadlineServer: a request whose bytes trickle in, each inside the stall timeout, is cut at
// the request deadline (408 through the error handler when its headers are in); requests
// that arrive in time are served, on one kept-alive connection too, and an answer that
// streams for longer than the deadline is not cut. Stalled connections wait in the
// reception without threads while others are served, and the connection cap marks
// connections overloaded, then closes them. Raw loopback sockets, timings with slack.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "oscar/serve/deadline_server.h"

using namespace oscar::serve;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// A server on a free loopback port: request deadline 1 s, stall timeout 0.5 s (or as
// given), keep-alive 3 s.
class Served {
 public:
  explicit Served(std::chrono::milliseconds stall = 500ms, int max_connections = 1024, int max_overflow = 64)
      : svr_(1000ms, max_connections, max_overflow) {
    svr_.set_read_timeout(0, std::chrono::duration_cast<std::chrono::microseconds>(stall).count());
    svr_.Get("/who", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(DeadlineServer::overloaded() ? "overloaded" : "normal", "text/plain");
    });
    svr_.set_keep_alive_timeout(3);
    svr_.Get("/ok", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    svr_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) { res.set_content(req.body, "text/plain"); });
    // Five chunks 0.4 s apart: 2 s of answer, twice the request deadline.
    svr_.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [n = 0](size_t, httplib::DataSink& sink) mutable {
        if (n == 5) {
          sink.done();
          return true;
        }
        std::this_thread::sleep_for(400ms);
        return sink.write("chunk", 5) && ++n > 0;
      });
    });
    svr_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
      if (!DeadlineServer::request_timed_out()) return httplib::Server::HandlerResponse::Unhandled;
      res.status = 408;
      res.set_content("timed out", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }));
    int listen_fd = -1;
    svr_.set_socket_options([&listen_fd](int sock) {
      httplib::default_socket_options(sock);
      listen_fd = sock;
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);  // httplib's backlog of 5 drops a burst's SYNs
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~Served() {
    svr_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  const DeadlineServer& server() const { return svr_; }

 private:
  DeadlineServer svr_;
  int port_ = 0;
  std::thread thread_;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

bool send_all(int fd, const std::string& s) {
  return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size());
}

// What the server sends until it closes, or until `wait` passes; `closed` says which.
std::string read_until_closed(int fd, Clock::duration wait, bool* closed) {
  std::string got;
  const auto end = Clock::now() + wait;
  *closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, size_t(n));
  }
  return got;
}

// One answer on a kept-alive connection: reads until `marker` (the end of its body).
std::string read_answer(int fd, const std::string& marker) {
  std::string got;
  const auto end = Clock::now() + 5s;
  while (got.find(marker) == std::string::npos && Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

// Sends `s` a byte every `gap` (inside the read timeout) until it is all sent or the
// server closes; returns the seconds from the first byte to the close, or -1.
double trickle(int fd, const std::string& s, Clock::duration gap) {
  const auto t0 = Clock::now();
  for (char c : s) {
    if (!send_all(fd, std::string(1, c))) return std::chrono::duration<double>(Clock::now() - t0).count();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(std::chrono::duration_cast<std::chrono::milliseconds>(gap).count())) > 0) {
      bool closed = false;
      read_until_closed(fd, 1s, &closed);
      return closed ? std::chrono::duration<double>(Clock::now() - t0).count() : -1;
    }
  }
  return -1;
}

// The calling process's thread count (/proc/self/status).
int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// Polls `done` every 10 ms for up to `wait`.
template <class F>
bool eventually(F done, Clock::duration wait) {
  const auto end = Clock::now() + wait;
  while (!done()) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

}  // namespace

TEST(DeadlineServer, ATricklingRequestLineIsCutAtTheDeadline) {
  Served s;
  const int fd = connect_to(s.port());
  // 0.2 s a byte: each read is well inside the 0.5-s read timeout, the whole far past 1 s.
  const double t = trickle(fd, "GET /ok HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n", 200ms);
  ::close(fd);
  EXPECT_GT(t, 0.9) << "closed before the deadline";
  EXPECT_LT(t, 2.0) << "not closed near the 1-s deadline (-1: never)";
}

TEST(DeadlineServer, ATricklingBodyIsAnswered408AndClosed) {
  Served s;
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n"));
  const auto t0 = Clock::now();
  std::string got;
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    if (!send_all(fd, "a")) break;
    got += read_until_closed(fd, 200ms, &closed);
  }
  got += read_until_closed(fd, 1s, &closed);
  const double t = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
  EXPECT_TRUE(closed);
  EXPECT_LT(t, 2.5);
}

TEST(DeadlineServer, RequestsInTimeAreServedOnAKeptAliveConnection) {
  Served s;
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"));
  EXPECT_NE(read_answer(fd, "hello").find("HTTP/1.1 200"), std::string::npos);
  // Idle for longer than a request's deadline, inside the keep-alive timeout: the next
  // request has its own deadline.
  std::this_thread::sleep_for(1500ms);
  ASSERT_TRUE(send_all(fd, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string second = read_answer(fd, "\r\n\r\nok");
  EXPECT_NE(second.find("HTTP/1.1 200"), std::string::npos) << second;
  // Two requests in one write (pipelined): both answered.
  ASSERT_TRUE(send_all(fd, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string both = read_answer(fd, "\r\n\r\nok");
  if (both.find("ok", both.find("\r\n\r\nok") + 4) == std::string::npos) both += read_answer(fd, "\r\n\r\nok");
  size_t answers = 0;
  for (size_t at = both.find("HTTP/1.1 200"); at != std::string::npos; at = both.find("HTTP/1.1 200", at + 1)) ++answers;
  EXPECT_EQ(answers, 2u) << both;
  ::close(fd);
}

TEST(DeadlineServer, AnAnswerLongerThanTheDeadlineIsNotCut) {
  Served s;
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  bool closed = false;
  const std::string got = read_until_closed(fd, 5s, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  size_t chunks = 0;
  for (size_t at = got.find("\r\nchunk\r\n"); at != std::string::npos; at = got.find("\r\nchunk\r\n", at + 1))
    ++chunks;
  EXPECT_EQ(chunks, 5u) << got;
}

TEST(DeadlineServer, AnIdleConnectionIsClosedAfterTheKeepAliveTimeout) {
  Served s;
  const int fd = connect_to(s.port());
  const auto t0 = Clock::now();
  bool closed = false;
  read_until_closed(fd, 6s, &closed);
  const double t = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_GT(t, 2.5);
  EXPECT_LT(t, 4.0);
}

TEST(DeadlineServer, StalledConnectionsWaitWithoutThreadsWhileOthersAreServed) {
  Served s(2000ms);
  const int threads0 = thread_count();
  std::vector<int> stalled;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_to(s.port());
    ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
    stalled.push_back(fd);
  }
  ASSERT_TRUE(eventually([&] { return s.server().waiting_connections() == 300; }, 1s))
      << s.server().waiting_connections() << " waiting";
  EXPECT_EQ(s.server().open_connections(), 300);
  EXPECT_LT(thread_count(), threads0 + 8) << "threads before: " << threads0;
  const auto t0 = Clock::now();
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string got = read_answer(fd, "\r\n\r\nnormal");
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.5);
  ::close(fd);
  // At the 1-s request deadline each is answered 408 from the bytes that came, and closed.
  bool closed = false;
  const std::string answer = read_until_closed(stalled[0], 4s, &closed);
  EXPECT_TRUE(closed);
  EXPECT_NE(answer.find("HTTP/1.1 408"), std::string::npos) << answer;
  EXPECT_TRUE(eventually([&] { return s.server().open_connections() == 0; }, 3s)) << s.server().open_connections();
  for (int f : stalled) ::close(f);
}

TEST(DeadlineServer, AStalledRequestIsAnswered408AtTheStallTimeout) {
  Served s(300ms);
  const int fd = connect_to(s.port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  bool closed = false;
  const std::string got = read_until_closed(fd, 3s, &closed);
  const double t = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
  EXPECT_GT(t, 0.25);
  EXPECT_LT(t, 0.8) << "not cut at the 0.3-s stall timeout, before the 1-s deadline";
}

TEST(DeadlineServer, AClientThatLeavesMidRequestIsForgottenAtOnce) {
  Served s(2000ms);
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  ASSERT_TRUE(eventually([&] { return s.server().waiting_connections() == 1; }, 1s));
  const auto t0 = Clock::now();
  ::close(fd);  // its bytes stay unread in the server's socket: the hang-up must be seen anyway
  EXPECT_TRUE(eventually([&] { return s.server().open_connections() == 0; }, 1s));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.5) << "kept until a timeout";
}

TEST(DeadlineServer, ConnectionsOverTheCapAreOverloadedAndPastItsMarginClosed) {
  Served s(2000ms, /*max_connections=*/4, /*max_overflow=*/2);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_to(s.port()));
  ASSERT_TRUE(eventually([&] { return s.server().open_connections() == 4; }, 1s));
  std::vector<int> over;
  for (int i = 0; i < 2; ++i) {
    over.push_back(connect_to(s.port()));
    ASSERT_TRUE(eventually([&] { return s.server().open_connections() == 5 + i; }, 1s));
  }
  for (int fd : over) {
    ASSERT_TRUE(send_all(fd, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_NE(read_answer(fd, "overloaded").find("overloaded"), std::string::npos);
  }
  const int past = connect_to(s.port());  // the seventh: closed at once, unanswered
  bool closed = false;
  EXPECT_EQ(read_until_closed(past, 1s, &closed), "");
  EXPECT_TRUE(closed);
  ::close(past);
  for (int fd : idle) ::close(fd);
  for (int fd : over) ::close(fd);
  ASSERT_TRUE(eventually([&] { return s.server().open_connections() == 0; }, 2s)) << s.server().open_connections();
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(read_answer(fd, "\r\n\r\nnormal").find("normal"), std::string::npos);
  ::close(fd);
}

TEST(Reception, RequestCompleteNeedsTheHeadersAndTheBody) {
  auto complete = [](const std::string& s) { return Reception::request_complete(s.data(), s.size()); };
  EXPECT_TRUE(complete("GET / HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(complete("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_FALSE(complete("GET / HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_FALSE(complete(""));
  EXPECT_FALSE(complete("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc"));
  EXPECT_TRUE(complete("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde"));
  EXPECT_TRUE(complete("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcdeGET"));  // pipelined
  EXPECT_FALSE(complete("POST / HTTP/1.1\r\ncontent-LENGTH:5 \r\nHost: x\r\n\r\nab"));
  // Handed to the worker at their headers: chunked, too large to peek, malformed.
  EXPECT_TRUE(complete("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5"));
  EXPECT_TRUE(complete("POST / HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n{"));
  EXPECT_TRUE(complete("POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n{"));
  EXPECT_TRUE(complete("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n{"));
  // A header block that fills the peek without ending: the worker refuses it.
  std::string longer = "GET / HTTP/1.1\r\nX-Pad: " + std::string(Reception::kPeekBytes, 'a');
  EXPECT_TRUE(complete(longer));
  EXPECT_FALSE(complete(longer.substr(0, 1000)));
}
