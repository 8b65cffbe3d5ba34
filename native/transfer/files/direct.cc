#include "transfer/files/direct.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "core/base/errno_name.h"
#include "transfer/files/engine.h"
#include "transfer/files/open.h"

namespace cm::files {

namespace {

// Reads below this never use O_DIRECT under 'auto' (nor measure it): a few blocks' worth of
// buffered reads cost little, and a measurement would cost more than the read.
constexpr size_t kDirectFrom = 16u << 20;
// The measurement reads this much each way, on a file at least four times as large.
constexpr size_t kMeasureBytes = 16u << 20;

// Whether the range's pages are in the page cache, by reading one block at its start, middle and
// end without waiting for the storage (RWF_NOWAIT fails with EAGAIN where it would have to).
bool LooksCached(int fd, uint64_t offset, size_t n) {
#ifdef RWF_NOWAIT
  alignas(64) char buf[kAlign];
  for (uint64_t at : {offset, offset + n / 2, offset + n - 1}) {
    iovec v{buf, sizeof buf};
    if (preadv2(fd, &v, 1, static_cast<off_t>(at / kAlign * kAlign), RWF_NOWAIT) <= 0) return false;
  }
  return true;
#else
  return false;
#endif
}

std::mutex choice_mutex;
std::map<dev_t, DirectChoice>& Choices() {
  static auto* choices = new std::map<dev_t, DirectChoice>();
  return *choices;
}

// Reads n bytes at `offset` into a host ring and drops them: the storage's rate on this path.
double TimedRead(core::CopyTeam& team, char* ring, int fd, uint64_t offset, size_t n, bool direct,
                 core::FileStatus* st) {
  core::PosixFile file(fd);
  core::HostTransport none(ring, nullptr, true);
  auto t0 = std::chrono::steady_clock::now();
  *st = core::RunFileRead(&team, none, file, offset, n, Shape(direct));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st->ok() && s > 0 ? n / s : 0;
}

// Measures, on this file, cold reads of kMeasureBytes each way: O_DIRECT from the start, buffered
// from the middle after dropping those pages from the cache (and dropping them again after, so
// the measurement leaves the cache as it was, less that part).
DirectChoice Measure(int fd, const std::string& path, uint64_t size) {
  DirectChoice c;
  Error err;
  std::shared_ptr<FileEngine> host = GetEngine(-1, &err);
  if (!host) return c.reason = "no memory for the measurement", c;
  std::lock_guard<std::mutex> lock(host->mutex);
  std::shared_ptr<core::CopyTeam> team = HostTeam();
  int d = ReopenDirect(fd, path);
  if (d < 0) {
    c.reason = std::string("the file system refuses O_DIRECT (") + core::ErrnoName(-d) + ")";
    return c;
  }
  core::FileStatus st;
  c.direct_rate = TimedRead(*team, host->ring, d, 0, kMeasureBytes, true, &st);
  close(d);
  if (!st.ok()) {
    c.reason = "an O_DIRECT read failed (" + std::string(core::ErrnoName(st.err)) + ")";
    return c;
  }
  const uint64_t mid = size / 2 / kAlign * kAlign;
  posix_fadvise(fd, static_cast<off_t>(mid), kMeasureBytes, POSIX_FADV_DONTNEED);
  c.buffered_rate = TimedRead(*team, host->ring, fd, mid, kMeasureBytes, false, &st);
  posix_fadvise(fd, static_cast<off_t>(mid), kMeasureBytes, POSIX_FADV_DONTNEED);
  c.direct = core::PreferDirect(c.direct_rate, c.buffered_rate);
  c.reason = std::string(c.direct ? "O_DIRECT" : "buffered") + " measured faster cold";
  return c;
}

}  // namespace

bool ChooseDirect(int fd, const std::string& path, const struct stat& st, uint64_t offset, size_t n,
                  DirectMode mode, std::string* why) {
  if (mode != DirectMode::kAuto) {
    *why = "asked for";
    return mode == DirectMode::kOn;
  }
  if (n < kDirectFrom) return *why = "a small read", false;
  if (LooksCached(fd, offset, n)) return *why = "the range is in the page cache", false;
  std::lock_guard<std::mutex> lock(choice_mutex);
  auto it = Choices().find(st.st_dev);
  if (it == Choices().end()) {
    if (static_cast<uint64_t>(st.st_size) < 4 * kMeasureBytes)
      return *why = "not measured yet on this file system (the file is too small to)", false;
    it = Choices().emplace(st.st_dev, Measure(fd, path, static_cast<uint64_t>(st.st_size))).first;
  }
  *why = it->second.reason;
  return it->second.direct;
}

std::map<dev_t, DirectChoice> DirectChoicesMade() {
  std::lock_guard<std::mutex> lock(choice_mutex);
  return Choices();
}

}  // namespace cm::files
