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

namespace oscar::serve {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

thread_local bool t_timed_out = false;

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
      if (Clock::now() >= deadline_) return fail_on_deadline();
      if (wait_for(fd_, POLLIN, read_wait()) <= 0) return Clock::now() >= deadline_ ? fail_on_deadline() : -1;
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

}  // namespace

bool DeadlineServer::request_timed_out() { return t_timed_out; }

bool DeadlineServer::wait_for_request(socket_t sock) const {
  const auto end = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
  // In slices, so that a stopping server's idle connections end within one.
  while (svr_sock_ != INVALID_SOCKET) {
    const auto left = end - Clock::now();
    if (left <= Clock::duration::zero()) return false;
    const int r = wait_for(sock, POLLIN, std::min(milliseconds(100), ceil_ms(left)));
    if (r != 0) return r > 0;
  }
  return false;
}

bool DeadlineServer::process_and_close_socket(socket_t sock) {
  DeadlineStream strm(sock, timeout_of(read_timeout_sec_, read_timeout_usec_),
                      timeout_of(write_timeout_sec_, write_timeout_usec_));
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    if (strm.buffered() == 0 && !wait_for_request(sock)) break;
    t_timed_out = false;
    strm.set_deadline(Clock::now() + request_timeout_);
    bool closed = false;
    ok = process_request(strm, /*close_connection=*/left == 1, closed, nullptr);
    // A request that ran out of time leaves the rest of its bytes unread: the connection
    // cannot be reused.
    if (!ok || closed || strm.timed_out()) break;
  }
  t_timed_out = false;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace oscar::serve
