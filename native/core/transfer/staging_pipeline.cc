#include "core/transfer/staging_pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace cm::core {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMinPiece = 64u << 10;
// The first chunk to the device is cut finer: nothing moves until it is in the ring, so every
// thread takes part (docs/transfers.md gives what that saved).
constexpr size_t kMinFirstPiece = 16u << 10;

size_t PageDown(size_t n) { return n / kPage * kPage; }

// One slot: the largest chunk, on pages, at least one piece.
size_t SlotBytes(const StagingShape& shape) {
  return std::max(kMinPiece, PageDown(shape.max_chunk));
}

// Chunk lengths in pages, front to back: doubling from `first` at the front and, with a `last`,
// doubling from it at the back too (so halving toward the end). The two ends are taken in turn
// until each has reached `max` or the next one would leave nothing over; what is left between
// them is cut into equal chunks no larger than the largest beside them.
// `to_end` (no `last`): doubling from `first` until what is left is no more than twice the next
// chunk; that rest is the last chunk, or equal chunks of at most `max`.
std::vector<size_t> ChunkPages(size_t pages, size_t first, size_t last, size_t max, bool to_end) {
  std::vector<size_t> front, back;
  if (to_end) last = 0;
  const bool taper = last != 0;
  size_t grow[2] = {first, last}, rest = pages, widest = 0;
  bool done[2] = {false, false};
  for (int end = 0; rest > 0 && !(done[0] && done[1]); end = taper ? 1 - end : 0) {
    if (done[end]) continue;
    size_t& s = grow[end];
    if (taper && s >= rest) break;
    if (to_end && !front.empty() && rest <= 2 * s) break;
    const size_t take = std::min(s, rest);
    (end == 0 ? front : back).push_back(take);
    widest = std::max(widest, take);
    rest -= take;
    done[end] = taper && take == max;
    s = std::min(max, s * 2);
  }
  if (rest > 0) {
    if (widest == 0) widest = rest;  // the whole copy fits the first chunk
    if (to_end) widest = max;
    const size_t k = (rest + widest - 1) / widest;
    for (size_t j = 0; j < k; ++j) front.push_back(rest * (j + 1) / k - rest * j / k);
  }
  front.insert(front.end(), back.rbegin(), back.rend());
  return front;
}

}  // namespace

size_t StagingRingBytes(const StagingShape& shape) {
  return SlotBytes(shape) * static_cast<size_t>(std::max(1, shape.slots));
}

bool CallerIssues(StagingDirection direction, IssueMode issue, size_t n, int threads) {
  return direction == StagingDirection::kToDevice && threads > 1 &&
         (issue == IssueMode::kCaller || (issue == IssueMode::kAuto && n < kCallerIssuesBelow));
}

StagingPlan PlanStaging(size_t n, const StagingShape& shape, int threads, const PlanOptions& o) {
  const size_t ring_start = o.ring_start;
  const bool fine_first = o.fine_first;
  StagingPlan plan;
  const size_t ring_bytes = StagingRingBytes(shape);
  plan.ring_end = PageDown(ring_start) % ring_bytes;
  if (n == 0) return plan;
  const size_t max_pages = SlotBytes(shape) / kPage;
  auto pages_of = [&](size_t bytes) {
    return std::clamp(PageDown(bytes), kMinPiece, max_pages * kPage) / kPage;
  };
  const size_t last = shape.last_chunk ? pages_of(shape.last_chunk) : 0;
  const std::vector<size_t> lengths = ChunkPages(
      (n + kPage - 1) / kPage, pages_of(shape.first_chunk), last, max_pages, o.grow_to_end);
  const int slots = std::max(1, shape.slots);
  size_t off = 0, pos = plan.ring_end;
  for (size_t i = 0; i < lengths.size(); ++i) {
    StagingChunk c;
    c.offset = off;
    c.length = std::min(lengths[i] * kPage, n - off);  // the last page may be partial
    c.slot = static_cast<int>(i % slots);
    // The ring in turn: where the chunk before ended, or back at the start if it does not fit.
    const size_t bytes = lengths[i] * kPage;
    if (pos + bytes > ring_bytes) pos = 0;
    c.ring_offset = pos;
    pos = (pos + bytes) % ring_bytes;
    c.after = static_cast<long>(i) - slots;  // -1 or less: none
    for (size_t j = i; j-- > 0 && static_cast<long>(j) > c.after;) {
      const size_t e_at = plan.chunks[j].ring_offset, e_bytes = lengths[j] * kPage;
      if (e_at < c.ring_offset + bytes && c.ring_offset < e_at + e_bytes) {
        c.after = static_cast<long>(j);
        break;
      }
    }
    c.after = std::max(c.after, -1L);
    c.first_piece = plan.pieces.size();
    const size_t pages = lengths[i];
    const size_t parts =
        std::clamp<size_t>(c.length / (i == 0 && fine_first ? kMinFirstPiece : kMinPiece), 1,
                           static_cast<size_t>(std::max(1, threads)));
    for (size_t k = 0; k < parts; ++k) {
      size_t begin = std::min(c.length, pages * k / parts * kPage);
      size_t end = std::min(c.length, pages * (k + 1) / parts * kPage);
      if (end > begin) plan.pieces.push_back({i, off + begin, end - begin});
    }
    c.pieces = plan.pieces.size() - c.first_piece;
    plan.chunks.push_back(c);
    off += c.length;
  }
  plan.ring_end = pos;
  return plan;
}

StagingPlan PlanStagedCopy(StagingDirection direction, IssueMode issue, size_t n,
                           const StagingShape& shape, int threads, size_t ring_start) {
  const bool to_device = direction == StagingDirection::kToDevice;
  return PlanStaging(n, shape, threads,
                     {ring_start, to_device, CallerIssues(direction, issue, n, threads)});
}

namespace {

// CUDA_MEMORY_STAGING_TRACE in the environment (read once, at the first staged copy): each copy's
// timeline on stderr, per chunk when the call that issues it started and returned, when a thread
// began waiting for it and saw it land, and when its first piece started and its last piece
// ended, in microseconds from the start of the copy.
bool TraceWanted() {
  static const bool wanted = std::getenv("CUDA_MEMORY_STAGING_TRACE") != nullptr;
  return wanted;
}

constexpr unsigned kSpinsBeforeYield = 4096;

inline void Relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

class Trace {
 public:
  explicit Trace(size_t chunks) : chunks_(new Times[chunks]), count_(chunks) {}
  void Issuing(size_t c) { chunks_[c].issuing.store(Now()); }
  void Issued(size_t c) { chunks_[c].issued.store(Now()); }
  void Waiting(size_t c) { chunks_[c].waiting.store(Now()); }
  void Landed(size_t c) { chunks_[c].landed.store(Now()); }
  // Lock-free, so that tracing does not put the team to sleep on a mutex and change the timeline
  // it records.
  void PieceStarts(size_t c) { Lower(chunks_[c].first_piece, Now()); }
  void PieceEnds(size_t c) { Raise(chunks_[c].last_piece, Now()); }
  void Print(const char* direction, const StagingPlan& plan) const {
    std::fprintf(stderr, "cuda-memory staged %s: %zu chunks, %.1f us\n", direction, count_,
                 Now() / 1e3);
    auto us = [](const std::atomic<int64_t>& t) { return t.load() / 1e3; };
    for (size_t c = 0; c < count_; ++c) {
      const Times& t = chunks_[c];
      std::fprintf(
          stderr, "  chunk %zu (%zu bytes): issue %.1f..%.1f, wait %.1f..%.1f, pieces %.1f..%.1f\n",
          c, plan.chunks[c].length, us(t.issuing), us(t.issued), us(t.waiting), us(t.landed),
          us(t.first_piece), us(t.last_piece));
    }
  }

 private:
  // Nanoseconds from the start of the copy; -1000 (printed -1.0): never happened.
  struct Times {
    std::atomic<int64_t> issuing{-1000}, issued{-1000}, waiting{-1000}, landed{-1000},
        first_piece{INT64_MAX}, last_piece{-1000};
  };
  int64_t Now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start_)
        .count();
  }
  static void Lower(std::atomic<int64_t>& a, int64_t t) {
    int64_t seen = a.load();
    while (t < seen && !a.compare_exchange_weak(seen, t)) {
    }
  }
  static void Raise(std::atomic<int64_t>& a, int64_t t) {
    int64_t seen = a.load();
    while (t > seen && !a.compare_exchange_weak(seen, t)) {
    }
  }
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::unique_ptr<Times[]> chunks_;
  size_t count_;
};

class StagedJob : public TeamJob {
 public:
  StagedJob(const StagingPlan& plan, StagingTransport& transport, StagingDirection direction,
            char* host, bool streaming, bool issuer)
      : plan_(plan),
        transport_(transport),
        to_device_(direction == StagingDirection::kToDevice),
        issuer_(issuer),
        host_(host),
        streaming_(streaming),
        copied_(new std::atomic<size_t>[plan.chunks.size()]),
        issued_(new std::atomic<bool>[plan.chunks.size()]),
        ready_(new std::atomic<int>[plan.chunks.size()]),
        moved_(new std::atomic<bool>[plan.chunks.size()]) {
    for (size_t c = 0; c < plan.chunks.size(); ++c) {
      moved_[c].store(false);
      copied_[c].store(0);
      issued_[c].store(false);
      ready_[c].store(kUnchecked);
    }
    if (TraceWanted()) trace_ = std::make_unique<Trace>(plan.chunks.size());
  }

  size_t pieces() const override { return plan_.pieces.size(); }

  // Piece i would only wait: its ring bytes are not free yet (AwaitSlot), and either the chunk it
  // waits for is not issued yet or another thread already waits for it to land.
  bool Blocked(size_t i) const override {
    if (i >= plan_.pieces.size()) return false;
    const size_t c = plan_.pieces[i].chunk;
    const long landing = to_device_ ? plan_.chunks[c].after : static_cast<long>(c);
    if (landing < 0) return false;
    const int state = ready_[c].load(std::memory_order_acquire);
    return state == kWaiting ||
           (state == kUnchecked && !issued_[landing].load(std::memory_order_acquire));
  }

  // Prints the copy's timeline on stderr when tracing (see Trace below).
  void Dump(const char* direction) const {
    if (trace_) trace_->Print(direction, plan_);
  }

  // Device-to-host: the chunks that wait for nothing go to the DMA engine before any thread
  // starts.
  void IssueFirst() { Pump(); }

  void Do(size_t i) override {
    if (failed_.load(std::memory_order_acquire)) return;
    const StagingPiece& p = plan_.pieces[i];
    const StagingChunk& c = plan_.chunks[p.chunk];
    char* ring = transport_.ring() + c.ring_offset + (p.offset - c.offset);
    if (to_device_) {
      // The ring bytes are free once the chunk that used them before has reached the device.
      if (c.after >= 0 && !AwaitSlot(p.chunk)) return;
      if (trace_) trace_->PieceStarts(p.chunk);
      CopyBytes(ring, host_ + p.offset, p.length, streaming_);
    } else {
      if (!AwaitSlot(p.chunk)) return;
      if (trace_) trace_->PieceStarts(p.chunk);
      CopyBytes(host_ + p.offset, ring, p.length, streaming_);
    }
    if (trace_) trace_->PieceEnds(p.chunk);
    // The chunk's last piece is in the ring (to the device: the chunk may go) or out of it (to the
    // host: chunks waiting for its ring bytes may land there).
    if (copied_[p.chunk].fetch_add(1, std::memory_order_acq_rel) + 1 == c.pieces) {
      moved_[p.chunk].store(true);
      if (!issuer_) Pump();
    }
  }

  // With an issuer (to the device): the thread that runs this issues every chunk, in order, as
  // soon as its last piece is in the ring, and copies nothing itself. Returns when all are issued
  // or the copy failed.
  void IssueInOrder() {
    for (size_t k = 0; k < plan_.chunks.size(); ++k) {
      // Spins (a chunk is a few to a few hundred microseconds of copying), but yields once it has
      // waited long, so that on a busy host it does not keep a CPU from the threads it waits for.
      for (unsigned spins = 0; !moved_[k].load(std::memory_order_acquire); ++spins) {
        if (failed_.load(std::memory_order_acquire)) return;
        if (spins < kSpinsBeforeYield)
          Relax();
        else
          std::this_thread::yield();
      }
      if (!IssueChunk(k)) return;
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

  // Whether chunk c may go to the DMA engine: to the device, once its bytes are in the ring; to
  // the host, once every chunk up to the one it waits for has been copied out of the ring.
  bool Ready(size_t c) const {
    if (to_device_) return moved_[c].load();
    return plan_.chunks[c].after < static_cast<long>(out_prefix_.load());
  }

  // Chunks go to the DMA engine in order and from one thread at a time: whoever finds the next
  // chunk ready issues it and every ready one after it. Concurrent cudaMemcpyAsync calls from
  // several threads queue inside the driver (docs/transfers.md gives how long), and out of
  // order they would make the engine wait for a later chunk. seq_cst on the flags and
  // the re-check after unlocking make sure a chunk marked while another thread held the lock is
  // issued by one of the two.
  void Pump() {
    const size_t n = plan_.chunks.size();
    for (;;) {
      if (!issue_mutex_.try_lock()) return;
      if (!to_device_) {  // chunks copied out from the first one on, without a gap
        size_t p = out_prefix_.load();
        while (p < n && moved_[p].load()) ++p;
        out_prefix_.store(p);
      }
      size_t k = next_issue_;
      while (k < n && Ready(k) && !failed_.load() && IssueChunk(k)) ++k;
      next_issue_ = k;
      issue_mutex_.unlock();
      if (k >= n || failed_.load()) return;
      const size_t p = out_prefix_.load();
      if (!Ready(k) && (to_device_ || p >= n || !moved_[p].load())) return;
    }
  }

  bool IssueChunk(size_t c) {
    if (trace_) trace_->Issuing(c);
    if (!Check(transport_.Issue(plan_.chunks[c]))) return false;
    if (trace_) trace_->Issued(c);
    issued_[c].store(true, std::memory_order_release);
    return true;
  }

  // Waits until the ring bytes of chunk c may be touched: the chunk that used them before has
  // reached the device (to the device), or chunk c has landed in them (to the host). One piece's
  // thread asks the transport; the chunk's other pieces wait on its answer, so the driver sees
  // one wait per chunk rather than one per thread. False when the copy failed first.
  bool AwaitSlot(size_t c) {
    int state = ready_[c].load(std::memory_order_acquire);
    if (state == kReady) return true;
    if (state == kUnchecked && ready_[c].compare_exchange_strong(state, kWaiting)) {
      const size_t landing = to_device_ ? static_cast<size_t>(plan_.chunks[c].after) : c;
      if (trace_) trace_->Waiting(landing);
      if (!(AwaitIssued(landing) && Check(transport_.Wait(plan_.chunks[landing].slot))))
        return false;
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
  const bool issuer_;
  char* const host_;
  const bool streaming_;
  std::unique_ptr<std::atomic<size_t>[]> copied_;
  std::unique_ptr<std::atomic<bool>[]> issued_;
  static constexpr int kUnchecked = 0, kWaiting = 1, kReady = 2;
  std::unique_ptr<std::atomic<int>[]> ready_;
  std::unique_ptr<std::atomic<bool>[]> moved_;  // all pieces into (or out of) the ring
  std::atomic<size_t> out_prefix_{0};           // to the host: chunks [0, out_prefix_) are out
  std::mutex issue_mutex_;
  size_t next_issue_ = 0;  // guarded by issue_mutex_
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  TransportStatus error_;
  std::unique_ptr<Trace> trace_;
};

}  // namespace

TransportStatus RunStaged(CopyTeam& team, StagingTransport& transport, StagingDirection direction,
                          char* host, size_t n, const StagingShape& shape, bool streaming,
                          size_t* ring_pos, IssueMode issue) {
  if (n == 0) return {};
  const bool caller = CallerIssues(direction, issue, n, team.threads());
  StagingPlan plan = PlanStagedCopy(direction, issue, n, shape, team.threads(), *ring_pos);
  *ring_pos = plan.ring_end;
  // (One piece: the caller copies it and issues it itself, with no team thread woken.)
  const bool issuer = caller && plan.pieces.size() > 1;
  StagedJob job(plan, transport, direction, host, streaming, issuer);
  if (direction == StagingDirection::kToHost) job.IssueFirst();
  if (issuer)
    team.Run(job, [&job] { job.IssueInOrder(); });
  else if (!job.failed())
    team.Run(job);
  // Even after a failure: nothing may still be moving into or out of the ring when this returns.
  TransportStatus finish = transport.Finish();
  job.Dump(direction == StagingDirection::kToHost ? "d2h" : "h2d");
  return job.failed() ? job.error() : finish;
}

}  // namespace cm::core
