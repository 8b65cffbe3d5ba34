#include "allocator/preload/recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "allocator/preload/member.h"  // Say

namespace cm::preload {

namespace {

constexpr size_t kBatchBytes = 64 << 10;
constexpr auto kBatchTime = std::chrono::milliseconds(100);
constexpr char kClosing[] = "\n]}\n";

// The text as the inside of a JSON string: quotes, backslashes and control characters escaped.
std::string JsonText(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string CommandLine() {
  std::string cmd;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cmd;
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  for (ssize_t i = 0; i < n; ++i) cmd += buf[i] ? buf[i] : ' ';
  while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
  return cmd;
}

}  // namespace

Recorder& Recorder::Get() {
  static Recorder* r = new Recorder();
  return *r;
}

Recorder::Recorder() {
  const char* p = std::getenv("CUDA_MEMORY_TRACE");
  if (p && *p) path_ = p;
}

// A file of this process's own: CUDA_MEMORY_TRACE if nobody has made it yet, else beside it with
// this process's pid. Never opened through a link, never over an existing file.
int Recorder::CreateLocked() noexcept {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  try {
    file_ = path_;
    int fd = open(file_.c_str(), kFlags, 0600);
    for (int n = 0; fd < 0 && errno == EEXIST && n < 100; ++n) {
      file_ = path_ + "." + std::to_string(getpid()) + (n ? "." + std::to_string(n) : "");
      fd = open(file_.c_str(), kFlags, 0600);
    }
    if (fd >= 0 && file_ != path_)
      Say("CUDA_MEMORY_TRACE: " + path_ + " is another process's (or an earlier run's); this " +
          "process records in " + file_);
    return fd;
  } catch (...) {
    return -1;
  }
}

bool Recorder::OpenLocked() noexcept {
  if (fd_ >= 0) return true;
  if (failed_) return false;
  fd_ = CreateLocked();
  if (fd_ < 0) {
    failed_ = true;
    Say("CUDA_MEMORY_TRACE: cannot write " + (file_.empty() ? path_ : file_) + " (" +
        std::strerror(errno) + "); nothing is recorded");
    return false;
  }
  start_ = last_write_ = std::chrono::steady_clock::now();
  batch_ = "{\"schema\":\"cuda-memory/trace@1\",\"source\":\"cuda-memory preload, pid " +
           std::to_string(getpid()) + ": " + JsonText(CommandLine()) + "\",\"events\":[\n";
  return true;
}

void Recorder::Event(const char* action, const char* kind, uint64_t id, uint64_t bytes) noexcept {
  if (path_.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!OpenLocked()) return;
  auto now = std::chrono::steady_clock::now();
  char buf[192];
  double us = std::chrono::duration<double, std::micro>(now - start_).count();
  int n;
  if (id || std::strcmp(action, "oom") != 0)
    n = std::snprintf(
        buf, sizeof buf, "%s{\"action\":\"%s\",\"id\":\"%s%s0x%llx\",\"bytes\":%llu,\"time\":%.1f}",
        events_ ? ",\n" : "", action, kind, *kind ? " " : "", static_cast<unsigned long long>(id),
        static_cast<unsigned long long>(bytes), us);
  else
    n = std::snprintf(buf, sizeof buf, "%s{\"action\":\"oom\",\"bytes\":%llu,\"time\":%.1f}",
                      events_ ? ",\n" : "", static_cast<unsigned long long>(bytes), us);
  try {
    batch_.append(buf, static_cast<size_t>(n));
  } catch (...) {
    return;
  }
  ++events_;
  if (batch_.size() >= kBatchBytes || now - last_write_ >= kBatchTime) WriteLocked();
}

void Recorder::WriteLocked() noexcept {
  if (fd_ < 0 || batch_.empty()) return;
  last_write_ = std::chrono::steady_clock::now();
  try {
    std::string out = batch_ + kClosing;
    ssize_t w = pwrite(fd_, out.data(), out.size(), end_);
    if (w != static_cast<ssize_t>(out.size())) {
      failed_ = true;
      Say("CUDA_MEMORY_TRACE: cannot write " + path_ + " (" +
          (w < 0 ? std::strerror(errno) : "short write") + "); recording stops");
      close(fd_);
      fd_ = -1;
      return;
    }
    end_ += static_cast<off_t>(batch_.size());
    batch_.clear();
  } catch (...) {
  }
}

void Recorder::Alloc(const char* kind, uint64_t id, uint64_t bytes) noexcept {
  Event("alloc", kind, id, bytes);
}
void Recorder::Free(const char* kind, uint64_t id, uint64_t bytes) noexcept {
  Event("free", kind, id, bytes);
}
void Recorder::Oom(uint64_t bytes) noexcept { Event("oom", "", 0, bytes); }

void Recorder::Flush() noexcept {
  if (path_.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  WriteLocked();
}

void Recorder::AfterForkChild() noexcept {
  // The child records in a file of its own (the parent's is the parent's), from its own start.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  file_.clear();
  batch_.clear();
  events_ = 0;
  end_ = 0;
  failed_ = false;
  mutex_.unlock();
}

}  // namespace cm::preload
