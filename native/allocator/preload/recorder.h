// CUDA_MEMORY_TRACE=FILE: the process's device allocations and frees on the group's device,
// written as a cuda-memory/trace@1 file (lib/allocator/trace.ts; docs/recording.md) that replay
// reads: an alloc per allocation (id: its address as "0x...", or the kind of handle and its value:
// "handle 0x..." for cuMemCreate, "array 0x...", "pool 0x..." for what a stream-ordered pool
// reserves beyond its allocations, "graph device N" for the graph reserve), with the bytes it is
// charged (what the device takes for it: core/allocator/footprint.h); a free per free, an oom per
// refusal or out-of-memory answer, times in microseconds since the first event.
//
// Several processes may record under one CUDA_MEMORY_TRACE (a launcher and its workers, a forked
// child): the first to record creates FILE itself, and never over another's (O_CREAT | O_EXCL |
// O_NOFOLLOW, mode 0600); every other writes FILE.<pid> (FILE.<pid>.<n> if that exists too) and
// says so on stderr, so no process destroys another's trace, and a link planted at FILE is never
// followed. `cuda-memory run --trace FILE` removes an earlier FILE before the program starts.
//
// The file is valid JSON after every write: events are written in batches (when 64 KiB wait or
// 100 ms have passed since the last batch, and at exit), each batch followed by the closing
// brackets, which the next batch writes over. A process killed mid-run leaves a trace that ends at
// its last batch.
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

  // kind: "" for an address, else the id's prefix ("handle", "array", "pool", "graph device").
  void Alloc(const char* kind, uint64_t id, uint64_t bytes) noexcept;
  void Free(const char* kind, uint64_t id, uint64_t bytes) noexcept;
  void Oom(uint64_t bytes) noexcept;
  // Writes what waits (at exit).
  void Flush() noexcept;

  void BeforeFork() { mutex_.lock(); }
  void AfterForkParent() { mutex_.unlock(); }
  void AfterForkChild() noexcept;
  // The file this process writes (empty before its first event).
  std::string file() const { return file_; }

 private:
  Recorder();
  void Event(const char* action, const char* kind, uint64_t id, uint64_t bytes) noexcept;
  int CreateLocked() noexcept;
  bool OpenLocked() noexcept;
  void WriteLocked() noexcept;

  std::mutex mutex_;
  std::string path_;  // CUDA_MEMORY_TRACE
  std::string file_;  // what this process writes: path_, or path_.<pid>
  int fd_ = -1;
  bool failed_ = false;  // could not open or write: said once, nothing more recorded
  uint64_t events_ = 0;
  off_t end_ = 0;  // where the next batch goes (over the closing brackets)
  std::string batch_;
  std::chrono::steady_clock::time_point start_, last_write_;
};

}  // namespace cm::preload
