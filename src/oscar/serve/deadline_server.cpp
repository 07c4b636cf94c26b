#include "oscar/serve/deadline_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

namespace oscar::serve {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

thread_local bool t_timed_out = false;
thread_local bool t_overloaded = false;

milliseconds ceil_ms(Clock::duration d) {
  return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(d));
}

// poll() for one socket's events: > 0 ready (or closed, or failed), 0 timed out, < 0 error.
int wait_for(int fd, short events, milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(ceil_ms(end - Clock::now()).count()));
    if (r >= 0 || errno != EINTR) return r;
  }
}

// Whether the peer is still there: nothing to read, or data (a pipelined request); not an
// end of file or a reset. A client that left is found this way before its stream's next write.
bool peer_alive(int fd) {
  const int r = wait_for(fd, POLLIN, milliseconds(0));
  if (r == 0) return true;
  if (r < 0) return false;
  char c;
  ssize_t n;
  do n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return;
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> serv{};
  if (::getnameinfo(sa, len, host.data(), host.size(), serv.data(), serv.size(), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host.data();
    port = std::atoi(serv.data());
  }
}

// One connection's socket as httplib's Stream: reads buffered (httplib reads a request's
// lines a byte at a time), each read waiting at most the read timeout and never past the
// request's deadline; writes wait for room up to the write timeout, and fail once the peer
// has gone.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, Clock::duration read_timeout, Clock::duration write_timeout)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  void set_deadline(Clock::time_point t) { deadline_ = t, timed_out_ = false; }
  bool timed_out() const { return timed_out_; }
  size_t buffered() const { return end_ - off_; }

  bool is_readable() const override { return buffered() > 0 || wait_for(fd_, POLLIN, read_wait()) > 0; }
  bool is_writable() const override { return wait_for(fd_, POLLOUT, ceil_ms(write_timeout_)) > 0 && peer_alive(fd_); }

  ssize_t read(char* ptr, size_t size) override {
    if (buffered() == 0) {
      // Past the deadline, what has arrived is still read (the reception hands over a
      // request that ran out of time with its bytes unread), and then the read fails.
      const bool late = Clock::now() >= deadline_;
      if (wait_for(fd_, POLLIN, late ? milliseconds(0) : read_wait()) <= 0)
        return late || Clock::now() >= deadline_ ? fail_on_deadline() : -1;
      if (size >= buf_.size()) return recv_some(ptr, size);
      off_ = end_ = 0;
      const ssize_t n = recv_some(buf_.data(), buf_.size());
      if (n <= 0) return n;
      end_ = size_t(n);
    }
    const size_t n = std::min(size, buffered());
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  milliseconds read_wait() const { return ceil_ms(std::min(read_timeout_, deadline_ - Clock::now())); }
  ssize_t fail_on_deadline() {
    timed_out_ = t_timed_out = true;
    return -1;
  }
  ssize_t recv_some(char* p, size_t n) {
    ssize_t r;
    do r = ::recv(fd_, p, n, 0);
    while (r < 0 && errno == EINTR);
    return r;
  }

  int fd_;
  Clock::duration read_timeout_, write_timeout_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timed_out_ = false;
  std::array<char, 4096> buf_{};
  size_t off_ = 0, end_ = 0;
};

Clock::duration timeout_of(time_t sec, time_t usec) {
  return std::chrono::seconds(sec) + std::chrono::microseconds(usec);
}

// httplib's task queue, run on its accepting thread: each accepted socket goes straight to
// the reception. Its shutdown (when the server stops) closes the waiting connections and
// waits for the requests being served, as httplib's own pool would.
class AcceptInline final : public httplib::TaskQueue {
 public:
  explicit AcceptInline(std::function<void()> drain) : drain_(std::move(drain)) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { drain_(); }

 private:
  std::function<void()> drain_;
};

}  // namespace

DeadlineServer::DeadlineServer(std::chrono::milliseconds request_timeout, int max_connections, int max_overflow)
    : request_timeout_(request_timeout),
      max_connections_(std::max(max_connections, 1)),
      max_overflow_(std::max(max_overflow, 0)),
      workers_(std::make_unique<ConnectionPool>(max_connections_ + max_overflow_)) {
  new_task_queue = [this] { return new AcceptInline([this] { drain(); }); };
}

DeadlineServer::~DeadlineServer() { drain(); }

void DeadlineServer::drain() {
  {
    std::lock_guard lock(reception_m_);
    if (reception_) reception_->stop();
  }
  workers_->shutdown();
}

bool DeadlineServer::request_timed_out() { return t_timed_out; }
bool DeadlineServer::overloaded() { return t_overloaded; }

size_t DeadlineServer::waiting_connections() const {
  std::lock_guard lock(reception_m_);
  return reception_ ? reception_->waiting() : 0;
}

Reception& DeadlineServer::reception() {
  std::lock_guard lock(reception_m_);
  if (!reception_) {
    const auto read_timeout = std::chrono::duration_cast<milliseconds>(timeout_of(read_timeout_sec_, read_timeout_usec_));
    const Reception::Timeouts t{milliseconds(std::chrono::seconds(keep_alive_timeout_sec_)), read_timeout,
                                request_timeout_};
    reception_ = std::make_unique<Reception>(
        t, [this](Reception::Visit v) { workers_->enqueue([this, v] { serve(v); }); }, [this] { --open_; });
  }
  return *reception_;
}

bool DeadlineServer::process_and_close_socket(socket_t sock) {
  const int open = ++open_;
  if (open > max_connections_ + max_overflow_) {  // past the cap and its 503 margin
    close_connection(sock);
    return false;
  }
  Reception::Visit v;
  v.fd = sock;
  v.overloaded = open > max_connections_;
  v.requests_left = keep_alive_max_count_;
  reception().add(v);
  return true;
}

void DeadlineServer::serve(Reception::Visit v) {
  t_overloaded = v.overloaded;
  DeadlineStream strm(v.fd, timeout_of(read_timeout_sec_, read_timeout_usec_),
                      timeout_of(write_timeout_sec_, write_timeout_usec_));
  // A request that ran out of time in the reception gets its deadline now: what arrived is
  // parsed, then the read fails (a 408 once its headers are in).
  Clock::time_point deadline = v.timed_out ? Clock::now() : v.first_byte + request_timeout_;
  bool keep = false;
  for (size_t left = v.requests_left; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    t_timed_out = false;
    strm.set_deadline(deadline);
    bool closed = false;
    const bool ok = process_request(strm, /*close_connection=*/left == 1, closed, nullptr);
    // A request that ran out of time leaves the rest of its bytes unread: the connection
    // cannot be reused.
    if (!ok || closed || strm.timed_out() || left == 1) break;
    if (strm.buffered() == 0) {  // the next request, if any, waits in the reception
      v.requests_left = left - 1;
      keep = true;
      break;
    }
    deadline = Clock::now() + request_timeout_;  // a pipelined request, already partly read
  }
  t_timed_out = false;
  t_overloaded = false;
  if (keep && svr_sock_ != INVALID_SOCKET) {
    v.timed_out = false;
    reception().add(v);
  } else {
    close_connection(v.fd);
  }
}

void DeadlineServer::close_connection(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  --open_;
}

}  // namespace oscar::serve
