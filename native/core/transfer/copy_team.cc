#include "core/transfer/copy_team.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/device/numa.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cm::core {

void CopyBytes(char* dst, const char* src, size_t n, bool streaming) {
#if defined(__x86_64__)
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (!streaming || head >= n || n < 4096) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t blocks = n / 64;
  for (size_t i = 0; i < blocks; ++i, src += 64, dst += 64) {
    const __m128i* s = reinterpret_cast<const __m128i*>(src);
    __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
            d = _mm_loadu_si128(s + 3);
    __m128i* o = reinterpret_cast<__m128i*>(dst);
    _mm_stream_si128(o, a);
    _mm_stream_si128(o + 1, b);
    _mm_stream_si128(o + 2, c);
    _mm_stream_si128(o + 3, d);
  }
  std::memcpy(dst, src, n % 64);
  _mm_sfence();  // streaming stores are weakly ordered: finish them before anyone reads
#else
  std::memcpy(dst, src, n);
  std::atomic_thread_fence(std::memory_order_release);
  (void)streaming;
#endif
}

int CpuShare::PerTeam() const { return std::max(2, cpus_ / std::max(1, active())); }

CopyTeam::CopyTeam(int threads, const std::vector<int>& cpus, std::shared_ptr<CpuShare> share)
    : threads_(std::max(1, threads)), share_(std::move(share)) {
  // A thread the share never lets work would only sleep: start no more than it ever allows
  // (a lone team: its CPUs, and never below the floor of 2).
  if (share_) threads_ = std::min(threads_, std::max(2, share_->cpus()));
  pinned_ = !cpus.empty();
  for (int i = 1; i < threads_; ++i) {
    workers_.emplace_back(&CopyTeam::Worker, this, i);
    if (!cpus.empty()) pinned_ = PinThread(workers_.back().native_handle(), cpus) && pinned_;
  }
}

CopyTeam::~CopyTeam() {
  stop_.store(true);
  posted_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  for (auto& t : workers_) t.join();
}

size_t CopyTeam::Work(TeamJob& job, int index) {
  const size_t total = job.pieces();
  for (size_t done = 0;; ++done) {
    if (index > 0 && !Allowed(index)) return done;
    // With several jobs at once (both directions of a copy), a started thread takes one piece at
    // a time from each in turn (Worker moves on to the next place), and passes over a job whose
    // next piece would only wait for a chunk another thread already waits for. Staying on one job
    // until it ran out of pieces left the other to its caller alone: a 256 MiB copy to the host
    // ran at one thread's rate while the copy to the device had the team.
    const bool others = index > 0 && running_.load(std::memory_order_relaxed) > 1;
    if (others && (done > 0 || job.Blocked(job.next_.load(std::memory_order_relaxed)))) return done;
    size_t i = job.next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= total) return done;
    job.Do(i);
    job.done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

// Looks at every place once, starting at `first`, and works on the first job with pieces left
// that has one to do now.
CopyTeam::Found CopyTeam::TryWork(int first, int index) {
  Found found = Found::kNone;
  for (int k = 0; k < kJobs && found != Found::kDid; ++k) {
    Place& p = places_[(first + k) % kJobs];
    if (!p.job.load(std::memory_order_relaxed)) continue;
    p.users.fetch_add(1);
    TeamJob* job = p.job.load();
    if (job && job->next_.load(std::memory_order_relaxed) < job->pieces())
      found = Work(*job, index) > 0 ? Found::kDid : Found::kBlocked;
    p.users.fetch_sub(1);
  }
  return found;
}

void CopyTeam::Worker(int index) {
#if defined(__linux__)
  // Per thread on Linux (PRIO_PROCESS with a thread id); a failure leaves the thread as it was.
  const int tid = static_cast<int>(syscall(SYS_gettid));
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, tid);
  if (errno == 0) (void)setpriority(PRIO_PROCESS, tid, std::min(19, nice + kWorkerNice));
#endif
  unsigned turn = static_cast<unsigned>(index);
  while (!stop_.load()) {
    const uint64_t seen = posted_.load();
    // A thread the share leaves out neither works nor waits busily: it sleeps until the next job.
    const bool allowed = Allowed(index);
    const Found found = allowed ? TryWork(static_cast<int>(turn++ % kJobs), index) : Found::kNone;
    if (found == Found::kDid) continue;
    if (found == Found::kBlocked) {  // every job's next piece waits on another thread: soon
      std::this_thread::yield();
      continue;
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    bool posted = false;
    while (allowed && !(posted = posted_.load() != seen) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    if (posted) continue;
    sleepers_.fetch_add(1);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return posted_.load() != seen; });
    }
    sleepers_.fetch_sub(1);
  }
}

void CopyTeam::JobStarts() {
  if (running_.fetch_add(1) == 0 && share_) share_->Enter();
}

void CopyTeam::JobEnds() {
  if (running_.fetch_sub(1) == 1 && share_) share_->Leave();
}

void CopyTeam::Run(TeamJob& job) { Run(job, nullptr); }

void CopyTeam::Run(TeamJob& job, const std::function<void()>& beside) {
  const size_t total = job.pieces();
  if (workers_.empty() || (total <= 1 && !beside)) {
    Work(job, 0);
    if (beside) beside();
    return;
  }
  // Counted before the job is posted, so that the threads that look at it see this team running.
  JobStarts();
  int at = -1;
  while (at < 0) {
    for (int k = 0; k < kJobs && at < 0; ++k) {
      TeamJob* none = nullptr;
      if (places_[k].job.compare_exchange_strong(none, &job)) at = k;
    }
    if (at < 0) std::this_thread::yield();
  }
  posted_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  if (beside) beside();
  Work(job, 0);
  while (job.done_.load(std::memory_order_acquire) < total) std::this_thread::yield();
  places_[at].job.store(nullptr);
  while (places_[at].users.load() != 0) std::this_thread::yield();
  JobEnds();
}

namespace {

class ParallelCopy : public TeamJob {
 public:
  ParallelCopy(char* dst, const char* src, size_t n, size_t piece, bool streaming)
      : dst_(dst), src_(src), n_(n), piece_(piece), streaming_(streaming) {}
  size_t pieces() const override { return (n_ + piece_ - 1) / piece_; }
  void Do(size_t i) override {
    size_t off = i * piece_;
    CopyBytes(dst_ + off, src_ + off, std::min(piece_, n_ - off), streaming_);
  }

 private:
  char* dst_;
  const char* src_;
  size_t n_, piece_;
  bool streaming_;
};

}  // namespace

void CopyTeam::Copy(char* dst, const char* src, size_t n, bool streaming) {
  // Pieces on 4 KiB boundaries (no two threads write one page), at least 64 KiB (below that a
  // thread's start costs more than the copy), at most 4 MiB (so a slow thread holds up little).
  size_t piece = std::clamp<size_t>((n / threads_ + 4095) / 4096 * 4096, 64u << 10, 4u << 20);
  ParallelCopy job(dst, src, n, piece, streaming);
  Run(job);
}

}  // namespace cm::core
