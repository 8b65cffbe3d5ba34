#include "staging_pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace cm::core {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMinPiece = 64u << 10;

size_t PageDown(size_t n) { return n / kPage * kPage; }

}  // namespace

StagingPlan PlanStaging(size_t n, const StagingShape& shape, int threads) {
  StagingPlan plan;
  const size_t max_chunk = std::max(kMinPiece, PageDown(shape.max_chunk));
  const int slots = std::max(1, shape.slots);
  size_t size = std::clamp(PageDown(shape.first_chunk), kMinPiece, max_chunk);
  for (size_t off = 0, i = 0; off < n; ++i) {
    StagingChunk c;
    c.offset = off;
    c.length = std::min(size, n - off);
    c.slot = static_cast<int>(i % slots);
    c.first_piece = plan.pieces.size();
    const size_t pages = (c.length + kPage - 1) / kPage;
    const size_t parts =
        std::clamp<size_t>(c.length / kMinPiece, 1, static_cast<size_t>(std::max(1, threads)));
    for (size_t k = 0; k < parts; ++k) {
      size_t begin = std::min(c.length, pages * k / parts * kPage);
      size_t end = std::min(c.length, pages * (k + 1) / parts * kPage);
      if (end > begin) plan.pieces.push_back({i, off + begin, end - begin});
    }
    c.pieces = plan.pieces.size() - c.first_piece;
    plan.chunks.push_back(c);
    off += c.length;
    size = std::min(max_chunk, size * 2);
  }
  return plan;
}

namespace {

// CUDA_MEMORY_STAGING_TRACE in the environment (read once, at the first staged copy): each copy's
// timeline on stderr, per chunk when it was issued and landed and when its first piece started
// and its last piece ended, in microseconds from the start of the copy.
bool TraceWanted() {
  static const bool wanted = std::getenv("CUDA_MEMORY_STAGING_TRACE") != nullptr;
  return wanted;
}

class Trace {
 public:
  explicit Trace(size_t chunks) : chunks_(chunks) {}
  void Issued(size_t c) { Set(c, &Times::issued); }
  void Landed(size_t c) { Set(c, &Times::landed); }
  void PieceStarts(size_t c) {
    double t = Now();
    std::lock_guard<std::mutex> lock(mutex_);
    chunks_[c].first_piece = std::min(chunks_[c].first_piece, t);
  }
  void PieceEnds(size_t c) {
    double t = Now();
    std::lock_guard<std::mutex> lock(mutex_);
    chunks_[c].last_piece = std::max(chunks_[c].last_piece, t);
  }
  void Print(const char* direction, const StagingPlan& plan) const {
    std::fprintf(stderr, "cuda-memory staged %s: %zu chunks, %.1f us\n", direction, chunks_.size(),
                 Now());
    for (size_t c = 0; c < chunks_.size(); ++c)
      std::fprintf(stderr, "  chunk %zu (%zu bytes): issued %.1f, landed %.1f, pieces %.1f..%.1f\n",
                   c, plan.chunks[c].length, chunks_[c].issued, chunks_[c].landed,
                   chunks_[c].first_piece, chunks_[c].last_piece);
  }

 private:
  struct Times {
    double issued = -1, landed = -1, first_piece = 1e18, last_piece = -1;
  };
  double Now() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
        .count();
  }
  void Set(size_t c, double Times::*field) {
    double t = Now();
    std::lock_guard<std::mutex> lock(mutex_);
    chunks_[c].*field = t;
  }
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::vector<Times> chunks_;
};

class StagedJob : public TeamJob {
 public:
  StagedJob(const StagingPlan& plan, StagingTransport& transport, StagingDirection direction,
            char* host, size_t slots, bool streaming)
      : plan_(plan),
        transport_(transport),
        to_device_(direction == StagingDirection::kToDevice),
        host_(host),
        slots_(slots),
        streaming_(streaming),
        copied_(new std::atomic<size_t>[plan.chunks.size()]),
        issued_(new std::atomic<bool>[plan.chunks.size()]),
        ready_(new std::atomic<int>[plan.chunks.size()]),
        issuable_(new std::atomic<bool>[plan.chunks.size()]) {
    for (size_t c = 0; c < plan.chunks.size(); ++c) {
      issuable_[c].store(false);
      copied_[c].store(0);
      issued_[c].store(false);
      ready_[c].store(kUnchecked);
    }
    if (TraceWanted()) trace_ = std::make_unique<Trace>(plan.chunks.size());
  }

  size_t pieces() const override { return plan_.pieces.size(); }

  // Prints the copy's timeline on stderr when tracing (see Trace below).
  void Dump(const char* direction) const {
    if (trace_) trace_->Print(direction, plan_);
  }

  // Device-to-host: the first `slots` chunks go to the DMA engine before any thread starts.
  void IssueFirst() {
    for (size_t c = 0; c < std::min(slots_, plan_.chunks.size()); ++c) MarkIssuable(c);
  }

  void Do(size_t i) override {
    if (failed_.load(std::memory_order_acquire)) return;
    const StagingPiece& p = plan_.pieces[i];
    const StagingChunk& c = plan_.chunks[p.chunk];
    char* ring = transport_.slot(c.slot) + (p.offset - c.offset);
    if (to_device_) {
      // The slot is free once the chunk that last filled it has reached the device.
      if (p.chunk >= slots_ && !AwaitSlot(p.chunk)) return;
      if (trace_) trace_->PieceStarts(p.chunk);
      CopyBytes(ring, host_ + p.offset, p.length, streaming_);
      if (trace_) trace_->PieceEnds(p.chunk);
      if (copied_[p.chunk].fetch_add(1, std::memory_order_acq_rel) + 1 == c.pieces)
        MarkIssuable(p.chunk);
    } else {
      if (!AwaitSlot(p.chunk)) return;
      if (trace_) trace_->PieceStarts(p.chunk);
      CopyBytes(host_ + p.offset, ring, p.length, streaming_);
      if (trace_) trace_->PieceEnds(p.chunk);
      // The slot's last piece is out: the chunk `slots` later may land in it.
      if (copied_[p.chunk].fetch_add(1, std::memory_order_acq_rel) + 1 == c.pieces &&
          p.chunk + slots_ < plan_.chunks.size())
        MarkIssuable(p.chunk + slots_);
    }
  }

  TransportStatus error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  bool failed() const { return failed_.load(); }

 private:
  bool Check(const TransportStatus& s) {
    if (s.ok()) return true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.ok()) error_ = s;
    failed_.store(true, std::memory_order_release);
    return false;
  }

  // Chunks go to the DMA engine in order and from one thread at a time: whoever finds the next
  // chunk ready issues it and every ready one after it. Concurrent cudaMemcpyAsync calls from
  // several threads queue inside the driver (7 to 20 us each were measured on the H100 host),
  // and out of order they would make the engine wait for a later chunk. seq_cst on the flags and
  // the re-check after unlocking make sure a chunk marked while another thread held the lock is
  // issued by one of the two.
  void MarkIssuable(size_t c) {
    issuable_[c].store(true);
    const size_t n = plan_.chunks.size();
    for (;;) {
      if (!issue_mutex_.try_lock()) return;
      size_t k = next_issue_;
      while (k < n && issuable_[k].load() && !failed_.load() && IssueChunk(k)) ++k;
      next_issue_ = k;
      issue_mutex_.unlock();
      if (k >= n || !issuable_[k].load() || failed_.load()) return;
    }
  }

  bool IssueChunk(size_t c) {
    if (!Check(transport_.Issue(plan_.chunks[c]))) return false;
    if (trace_) trace_->Issued(c);
    issued_[c].store(true, std::memory_order_release);
    return true;
  }

  // Waits until the slot of chunk c may be touched: its earlier occupant has reached the device
  // (to the device), or chunk c has landed in it (to the host). One piece's thread asks the
  // transport; the chunk's other pieces wait on its answer, so the driver sees one wait per chunk
  // rather than one per thread. False when the copy failed first.
  bool AwaitSlot(size_t c) {
    int state = ready_[c].load(std::memory_order_acquire);
    if (state == kReady) return true;
    if (state == kUnchecked && ready_[c].compare_exchange_strong(state, kWaiting)) {
      size_t landing = to_device_ ? c - slots_ : c;
      if (!(AwaitIssued(landing) && Check(transport_.Wait(plan_.chunks[c].slot)))) return false;
      if (trace_) trace_->Landed(landing);
      ready_[c].store(kReady, std::memory_order_release);
      return true;
    }
    while (ready_[c].load(std::memory_order_acquire) != kReady) {
      if (failed_.load(std::memory_order_acquire)) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // Waits until chunk c has been handed to the DMA engine; false when the copy failed first.
  bool AwaitIssued(size_t c) {
    while (!issued_[c].load(std::memory_order_acquire)) {
      if (failed_.load(std::memory_order_acquire)) return false;
      std::this_thread::yield();
    }
    return true;
  }

  const StagingPlan& plan_;
  StagingTransport& transport_;
  const bool to_device_;
  char* const host_;
  const size_t slots_;
  const bool streaming_;
  std::unique_ptr<std::atomic<size_t>[]> copied_;
  std::unique_ptr<std::atomic<bool>[]> issued_;
  static constexpr int kUnchecked = 0, kWaiting = 1, kReady = 2;
  std::unique_ptr<std::atomic<int>[]> ready_;
  std::unique_ptr<std::atomic<bool>[]> issuable_;
  std::mutex issue_mutex_;
  size_t next_issue_ = 0;  // guarded by issue_mutex_
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  TransportStatus error_;
  std::unique_ptr<Trace> trace_;
};

}  // namespace

TransportStatus RunStaged(CopyTeam& team, StagingTransport& transport, StagingDirection direction,
                          char* host, size_t n, const StagingShape& shape, bool streaming) {
  if (n == 0) return {};
  StagingPlan plan = PlanStaging(n, shape, team.threads());
  StagedJob job(plan, transport, direction, host, static_cast<size_t>(std::max(1, shape.slots)),
                streaming);
  if (direction == StagingDirection::kToHost) job.IssueFirst();
  if (!job.failed()) team.Run(job);
  // Even after a failure: nothing may still be moving into or out of the ring when this returns.
  TransportStatus finish = transport.Finish();
  job.Dump(direction == StagingDirection::kToHost ? "d2h" : "h2d");
  return job.failed() ? job.error() : finish;
}

}  // namespace cm::core
