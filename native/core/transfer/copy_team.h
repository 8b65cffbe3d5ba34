// A team of host threads that share out memory copies: the staged path's CPU half. Work comes in
// jobs of numbered pieces; every team thread and the thread that runs the job claim pieces in
// order until none are left, so no thread waits at a barrier while another finishes its share.
// Several jobs may run at once (both directions of a bidirectional copy); the started threads
// serve them in turn, a piece at a time. No CUDA here: the staged pipeline (staging_pipeline.h) is
// one kind of job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cm::core {

// memcpy; with `streaming`, non-temporal stores for the bulk (the destination is not read by this
// CPU soon: it goes to a DMA engine, or to a buffer that JavaScript reads later), which saves the
// read-for-ownership of every destination line. Ends with a store fence, so the bytes are visible
// to a DMA engine started after it returns.
void CopyBytes(char* dst, const char* src, size_t n, bool streaming);

class CopyTeam;

// The CPUs that several copy teams (one per GPU) draw on. While k of its teams run a job, each
// runs at most max(2, cpus / k) threads, the caller counted: a lone team keeps its full size (up
// to the CPUs), and eight GPUs copying at once on 16 CPUs run 16 copy threads, not 96: as much
// in total, with far less delay for other threads (docs/several-gpus.md has the measurement). The
// floor of 2 keeps one started thread working, which a caller that waits for the team's pieces
// (CopyTeam::Run with `beside`) needs.
class CpuShare {
 public:
  explicit CpuShare(int cpus) : cpus_(cpus < 1 ? 1 : cpus) {}
  int cpus() const { return cpus_; }
  // Teams running a job now.
  int active() const { return active_.load(std::memory_order_relaxed); }
  // The threads, caller counted, that one running team may have at work now.
  int PerTeam() const;
  // A team starts or ends running jobs (CopyTeam calls these; public for tests).
  void Enter() { active_.fetch_add(1); }
  void Leave() { active_.fetch_sub(1); }

 private:
  const int cpus_;
  std::atomic<int> active_{0};
};

// One job: `pieces()` numbered units of work, run by Do(i) exactly once each, in any order and on
// any team thread. Do must not throw.
class TeamJob {
 public:
  virtual ~TeamJob() = default;
  virtual size_t pieces() const = 0;
  virtual void Do(size_t piece) = 0;
  // Whether Do(piece) would now only wait for another thread (one already waits for what it
  // needs): while other jobs run, a started thread then serves them instead. A hint, read
  // without claiming the piece.
  virtual bool Blocked(size_t /*piece*/) const { return false; }

 private:
  friend class CopyTeam;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
};

class CopyTeam {
 public:
  // `threads` counts the thread that calls Run(); threads - 1 are started here, each restricted
  // to `cpus` when it is not empty (the CPUs of the GPU's NUMA node: core/device/numa.h). With
  // `share`, the team's threads at work are capped while other teams of that share run jobs too,
  // and no more are started than the share lets one team run (max(2, its CPUs)): threads() says how
  // many.
  explicit CopyTeam(int threads, const std::vector<int>& cpus = {},
                    std::shared_ptr<CpuShare> share = nullptr);
  ~CopyTeam();
  CopyTeam(const CopyTeam&) = delete;
  CopyTeam& operator=(const CopyTeam&) = delete;

  // Runs `job` to the end, the calling thread taking part. Safe to call from several threads at
  // once (up to kJobs jobs run together; more wait for a place).
  void Run(TeamJob& job);
  // Runs `job` on the started threads while the calling thread runs `beside` (which may wait for
  // pieces the team does), then takes any pieces left and waits for the job to end. Without
  // started threads, the caller does every piece first and runs `beside` after.
  void Run(TeamJob& job, const std::function<void()>& beside);
  // A plain parallel memcpy with the team (CopyBytes over pieces of about n / threads).
  void Copy(char* dst, const char* src, size_t n, bool streaming);
  int threads() const { return threads_; }
  const CpuShare* share() const { return share_.get(); }
  // Every started thread was restricted to the CPUs asked for (false when none were asked for).
  bool pinned() const { return pinned_; }

  static constexpr int kJobs = 8;
  // How long a team thread keeps looking for work after its last piece before it sleeps: staged
  // copies come back to back, and waking a sleeping thread costs tens of microseconds on bare
  // metal and up to milliseconds in a virtual machine.
  static constexpr int kSpinMicros = 2000;
  // Nice value of the started threads (Linux): a little below the thread that asked for the copy
  // and the JavaScript thread, so that when every CPU is busy a timer or a request on the event
  // loop takes a CPU from a copy thread rather than waiting for its time slice to end.
  static constexpr int kWorkerNice = 5;

 private:
  void Worker(int index);
  // Claims and does pieces until none are left, or (for a started thread, index > 0) until the
  // share no longer lets this thread work, or, while other jobs run, after one piece or before
  // a piece that would only wait. Returns the pieces done.
  size_t Work(TeamJob& job, int index);
  // What a look at every job found: a piece done, only pieces that would wait, or nothing to do.
  enum class Found { kDid, kBlocked, kNone };
  Found TryWork(int first, int index);
  bool Allowed(int index) const { return !share_ || index < share_->PerTeam(); }
  void JobStarts();
  void JobEnds();

  // Jobs are published lock-free: a thread that finds a job announces itself in `users` before
  // reading `job`, and Run() waits for users to drain after clearing `job`, so the job outlives
  // every thread that saw it. Taking a lock here made eleven threads queue on one mutex at the
  // start of every copy.
  struct Place {
    std::atomic<TeamJob*> job{nullptr};
    std::atomic<int> users{0};
  };

  int threads_;
  bool pinned_ = false;
  std::shared_ptr<CpuShare> share_;
  std::atomic<int> running_{0};  // jobs of this team in Run() now
  std::vector<std::thread> workers_;
  Place places_[kJobs];
  std::atomic<uint64_t> posted_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;  // only for sleeping and waking
  std::condition_variable wake_;
};

}  // namespace cm::core
