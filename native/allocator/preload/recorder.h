// CUDA_MEMORY_TRACE=FILE: the process's device allocations and frees on the group's device,
// written as a cuda-memory/trace@1 file (lib/allocator/trace.ts; docs/recording.md) that replay
// reads: an alloc per allocation (id: its address as "0x..." or, for cuMemCreate, "handle 0x..."),
// a free per free, an oom per refusal or out-of-memory answer, times in microseconds since the
// first event.
//
// The file is valid JSON after every write: events are written in batches (when 64 KiB wait or
// 100 ms have passed since the last batch, and at exit), each batch followed by the closing
// brackets, which the next batch writes over. A process killed mid-run leaves a trace that ends at
// its last batch. A child after fork records nothing (the file is the parent's).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace cm::preload {

class Recorder {
 public:
  static Recorder& Get();  // never destroyed
  bool enabled() const { return !path_.empty(); }

  void Alloc(bool handle, uint64_t id, uint64_t bytes) noexcept;
  void Free(bool handle, uint64_t id, uint64_t bytes) noexcept;
  void Oom(uint64_t bytes) noexcept;
  // Writes what waits (at exit).
  void Flush() noexcept;

  void BeforeFork() { mutex_.lock(); }
  void AfterForkParent() { mutex_.unlock(); }
  void AfterForkChild() noexcept;

 private:
  Recorder();
  void Event(const char* action, bool handle, uint64_t id, uint64_t bytes) noexcept;
  bool OpenLocked() noexcept;
  void WriteLocked() noexcept;

  std::mutex mutex_;
  std::string path_;
  int fd_ = -1;
  bool failed_ = false;  // could not open or write: said once, nothing more recorded
  uint64_t events_ = 0;
  off_t end_ = 0;  // where the next batch goes (over the closing brackets)
  std::string batch_;
  std::chrono::steady_clock::time_point start_, last_write_;
};

}  // namespace cm::preload
