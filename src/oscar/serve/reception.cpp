#include "oscar/serve/reception.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace oscar::serve {

namespace {

// Case-insensitive: whether line (one header line, no CRLF) is `name: …`, and its value.
bool header_value(std::string_view line, std::string_view name, std::string_view& value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  value = line.substr(name.size() + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return true;
}

}  // namespace

bool Reception::request_complete(const char* bytes, size_t n) {
  const std::string_view s(bytes, n);
  const size_t end = s.find("\r\n\r\n");
  if (end == std::string_view::npos) return n >= kPeekBytes;  // headers too long: the worker refuses them
  const size_t body_at = end + 4;
  size_t length = 0;
  for (size_t at = s.find("\r\n") + 2; at < body_at - 2;) {  // header lines after the request line
    const size_t eol = s.find("\r\n", at);
    const std::string_view line = s.substr(at, eol - at);
    std::string_view v;
    if (header_value(line, "transfer-encoding", v)) return true;  // chunked: the worker reads it
    if (header_value(line, "content-length", v)) {
      char* stop = nullptr;
      const std::string value(v);
      const unsigned long long len = std::strtoull(value.c_str(), &stop, 10);
      if (value.empty() || *stop != '\0' || len > kPeekBytes) return true;  // malformed or large: the worker's
      length = size_t(len);
    }
    at = eol + 2;
  }
  return body_at + length <= n || body_at + length > kPeekBytes;
}

Reception::Reception(Timeouts timeouts, std::function<void(Visit)> ready, std::function<void()> closed)
    : timeouts_(timeouts), ready_(std::move(ready)), closed_(std::move(closed)), peek_(kPeekBytes) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw std::runtime_error(std::string("reception: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { run(); });
}

Reception::~Reception() {
  stop();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void Reception::add(Visit v) {
  {
    std::lock_guard lock(m_);
    if (!stopping_) {
      incoming_.push_back(v);
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
      return;
    }
  }
  ::shutdown(v.fd, SHUT_RDWR);
  ::close(v.fd);
  closed_();
}

void Reception::stop() {
  {
    std::lock_guard lock(m_);
    if (stopping_) return;
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

size_t Reception::waiting() const {
  std::lock_guard lock(m_);
  return n_waiting_;
}

void Reception::run() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  auto next_check = Clock::now();
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, 100);  // timeouts are checked at least this often
    std::vector<Visit> incoming;
    bool stopping;
    {
      std::lock_guard lock(m_);
      incoming.swap(incoming_);
      stopping = stopping_;
    }
    const auto now = Clock::now();
    for (const Visit& v : incoming) {
      // Edge-triggered: a peek leaves the bytes in the socket, so only new bytes (or the
      // peer's end) wake us again.
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
      ev.data.fd = v.fd;
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, v.fd, &ev) != 0) {
        ::close(v.fd);
        closed_();
        continue;
      }
      Waiting w{v, now, now, 0};
      w.visit.first_byte = {};
      w.visit.timed_out = false;
      waiting_[v.fd] = w;
      on_readable(v.fd);  // bytes that came before it was added
    }
    if (stopping) break;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &count, sizeof count);
      } else if (waiting_.count(fd)) {
        on_readable(fd);
      }
    }
    if (now >= next_check) {
      expire(now);
      next_check = now + std::chrono::milliseconds(50);
    }
    std::lock_guard lock(m_);
    n_waiting_ = waiting_.size();
  }
  for (auto& [fd, w] : waiting_) {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    closed_();
  }
  waiting_.clear();
  std::lock_guard lock(m_);
  n_waiting_ = 0;
  for (const Visit& v : incoming_) {
    ::close(v.fd);
    closed_();
  }
  incoming_.clear();
}

void Reception::on_readable(int fd) {
  Waiting& w = waiting_.at(fd);
  ssize_t got;
  do got = ::recv(fd, peek_.data(), peek_.size(), MSG_PEEK | MSG_DONTWAIT);
  while (got < 0 && errno == EINTR);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (got <= 0) return close_waiting(fd);  // the peer left (or the socket failed) before a whole request
  const auto now = Clock::now();
  if (w.seen == 0) w.visit.first_byte = now;
  if (size_t(got) > w.seen) w.seen = size_t(got), w.last_byte = now;
  if (request_complete(peek_.data(), size_t(got))) return leave(fd, false);
  // A peer that left after part of a request: its bytes are still unread, so the peek does
  // not see the end; the hang-up flag does. (A whole request from a half-closed peer is
  // still answered, above.)
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) close_waiting(fd);
}

void Reception::expire(Clock::time_point now) {
  std::vector<std::pair<int, bool>> out;  // fd, with bytes (answered 408) or idle (closed)
  for (const auto& [fd, w] : waiting_) {
    if (w.seen == 0) {
      if (now - w.since >= timeouts_.idle) out.emplace_back(fd, false);
    } else if (now - w.last_byte >= timeouts_.stall || now - w.visit.first_byte >= timeouts_.request) {
      out.emplace_back(fd, true);
    }
  }
  for (const auto& [fd, begun] : out) begun ? leave(fd, true) : close_waiting(fd);
}

void Reception::leave(int fd, bool timed_out) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  Visit v = waiting_.at(fd).visit;
  waiting_.erase(fd);
  v.timed_out = timed_out;
  ready_(v);
}

void Reception::close_waiting(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  waiting_.erase(fd);
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  closed_();
}

}  // namespace oscar::serve
