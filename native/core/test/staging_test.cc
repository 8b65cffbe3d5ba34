// Tests of the staged pipeline and the copy team without a GPU: a fake DMA engine on its own
// thread moves chunks between the ring and a "device" vector after random delays, reading and
// writing the ring at the moment it runs, so a slot reused too early corrupts the data and the
// byte comparison fails.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "../copy_team.h"
#include "../staging_pipeline.h"
#include "check.h"

using namespace cm::core;

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

class FakeDma : public StagingTransport {
 public:
  FakeDma(std::vector<char>& device, StagingDirection direction, const StagingShape& shape,
          unsigned seed)
      : device_(device),
        to_device_(direction == StagingDirection::kToDevice),
        ring_(shape.slots, std::vector<char>(shape.max_chunk)),
        slot_seq_(shape.slots, 0),
        rng_(seed),
        engine_([this] { Run(); }) {}
  ~FakeDma() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    queued_.notify_all();
    engine_.join();
  }

  char* slot(int s) override { return ring_[s].data(); }

  TransportStatus Issue(const StagingChunk& c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_issue_at && ++issues_ == fail_issue_at) return {7, "fakeIssue"};
    if (c.length > ring_[c.slot].size()) return {9, "chunk larger than its slot"};
    slot_seq_[c.slot] = ++issued_;
    queue_.push_back({c, issued_});
    ++transfers;
    queued_.notify_all();
    return {};
  }

  TransportStatus Wait(int s) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (fail_wait_at && ++waits_ == fail_wait_at) return {11, "fakeWait"};
    uint64_t target = slot_seq_[s];
    done_.wait(lock, [&] { return completed_ >= target; });
    return {};
  }

  TransportStatus Finish() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return completed_ >= issued_; });
    finished_with_nothing_moving = queue_.empty() && completed_ == issued_;
    return {};
  }

  int fail_issue_at = 0, fail_wait_at = 0;
  int transfers = 0;
  bool finished_with_nothing_moving = false;

 private:
  struct Request {
    StagingChunk chunk;
    uint64_t seq;
  };

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Request r = queue_.front();
      queue_.pop_front();
      int delay = static_cast<int>(rng_() % 40);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
      char* ring = ring_[r.chunk.slot].data();
      if (to_device_)
        std::memcpy(device_.data() + r.chunk.offset, ring, r.chunk.length);
      else
        std::memcpy(ring, device_.data() + r.chunk.offset, r.chunk.length);
      lock.lock();
      completed_ = r.seq;
      done_.notify_all();
    }
  }

  std::vector<char>& device_;
  const bool to_device_;
  std::vector<std::vector<char>> ring_;
  std::vector<uint64_t> slot_seq_;
  std::mt19937 rng_;
  std::mutex mutex_;
  std::condition_variable queued_, done_;
  std::deque<Request> queue_;
  uint64_t issued_ = 0, completed_ = 0;
  int issues_ = 0, waits_ = 0;
  bool stop_ = false;
  std::thread engine_;
};

static std::vector<char> Pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  std::mt19937 rng(seed);
  for (auto& c : v) c = static_cast<char>(rng());
  return v;
}

static void TestPlan() {
  StagingShape shape{256 * KiB, 8 * MiB, 4};
  CHECK(PlanStaging(0, shape, 12).chunks.empty());
  StagingPlan p = PlanStaging(4 * MiB, shape, 12);
  // 256K, 512K, 1M, 2M, then the remaining 256K.
  CHECK(p.chunks.size() == 5);
  if (p.chunks.size() == 5) {
    CHECK(p.chunks[0].length == 256 * KiB && p.chunks[1].length == 512 * KiB);
    CHECK(p.chunks[2].length == MiB && p.chunks[3].length == 2 * MiB);
    CHECK(p.chunks[4].length == 256 * KiB && p.chunks[4].slot == 0);
    CHECK(p.chunks[0].pieces == 4 && p.chunks[3].pieces == 12);
  }
  StagingPlan big = PlanStaging(64 * MiB, shape, 12);
  CHECK(big.chunks.back().length <= 8 * MiB && big.chunks[6].length == 8 * MiB);
  // Properties over random sizes and shapes: chunks and pieces tile [0, n) in order, on 4 KiB
  // boundaries, each chunk fits its slot and is cut into at most `threads` pieces.
  std::mt19937 rng(3);
  for (int t = 0; t < 400; ++t) {
    size_t n = rng() % (40 * MiB) + 1;
    StagingShape s{(rng() % (4 * MiB)) + 1, (rng() % (16 * MiB)) + 4096,
                   static_cast<int>(rng() % 8) + 1};
    int threads = static_cast<int>(rng() % 16) + 1;
    StagingPlan q = PlanStaging(n, s, threads);
    size_t at = 0, piece_at = 0;
    bool ok = true;
    for (size_t c = 0; c < q.chunks.size(); ++c) {
      const StagingChunk& ch = q.chunks[c];
      ok = ok && ch.offset == at && ch.offset % 4096 == 0 && ch.length > 0;
      ok = ok && ch.length <= std::max<size_t>(64 * KiB, s.max_chunk / 4096 * 4096);
      ok = ok && ch.slot == static_cast<int>(c % s.slots);
      ok = ok && ch.pieces >= 1 && ch.pieces <= static_cast<size_t>(threads);
      for (size_t k = ch.first_piece; k < ch.first_piece + ch.pieces; ++k) {
        ok = ok && q.pieces[k].chunk == c && q.pieces[k].offset == piece_at;
        ok = ok && (q.pieces[k].offset % 4096 == 0);
        piece_at += q.pieces[k].length;
      }
      at += ch.length;
    }
    ok = ok && at == n && piece_at == n;
    CHECK(ok);
  }
}

static void RoundTrip(CopyTeam& team, size_t n, const StagingShape& shape, unsigned seed,
                      bool streaming) {
  std::vector<char> src = Pattern(n, seed), back(n, 0), device(n, 0);
  {
    FakeDma dma(device, StagingDirection::kToDevice, shape, seed);
    TransportStatus s =
        RunStaged(team, dma, StagingDirection::kToDevice, src.data(), n, shape, streaming);
    CHECK(s.ok() && dma.finished_with_nothing_moving);
  }
  CHECK(device == src);
  {
    FakeDma dma(device, StagingDirection::kToHost, shape, seed + 1);
    TransportStatus s =
        RunStaged(team, dma, StagingDirection::kToHost, back.data(), n, shape, streaming);
    CHECK(s.ok());
  }
  CHECK(back == src);
}

static void TestRoundTrips() {
  const size_t sizes[] = {1, 4095, 64 * KiB, MiB + 3, 4 * MiB, 13 * MiB + 77, 40 * MiB};
  const StagingShape shapes[] = {{256 * KiB, 8 * MiB, 4}, {64 * KiB, 1 * MiB, 2}, {MiB, MiB, 3}};
  for (int threads : {1, 3, 8}) {
    CopyTeam team(threads);
    unsigned seed = 1;
    for (const StagingShape& shape : shapes)
      for (size_t n : sizes) {
        RoundTrip(team, n, shape, seed, seed % 2 == 0);
        ++seed;
      }
  }
}

// Both directions at once on one team, from two threads, as a bidirectional copy runs.
static void TestBothDirectionsAtOnce() {
  CopyTeam team(6);
  StagingShape shape{128 * KiB, 2 * MiB, 4};
  const size_t n = 24 * MiB + 4096 * 3 + 5;
  for (int round = 0; round < 4; ++round) {
    std::vector<char> up = Pattern(n, 40 + round), device_up(n, 0);
    std::vector<char> device_down = Pattern(n, 50 + round), down(n, 0);
    FakeDma h2d(device_up, StagingDirection::kToDevice, shape, 1);
    FakeDma d2h(device_down, StagingDirection::kToHost, shape, 2);
    TransportStatus a, b;
    std::thread other(
        [&] { b = RunStaged(team, d2h, StagingDirection::kToHost, down.data(), n, shape, true); });
    a = RunStaged(team, h2d, StagingDirection::kToDevice, up.data(), n, shape, true);
    other.join();
    CHECK(a.ok() && b.ok());
    CHECK(device_up == up && down == device_down);
  }
}

// A failed transfer call ends the copy with that failure, with nothing left moving and no
// thread stuck, in both directions and wherever in the copy it happens.
static void TestFailures() {
  CopyTeam team(4);
  StagingShape shape{64 * KiB, MiB, 3};
  const size_t n = 9 * MiB;
  std::vector<char> host = Pattern(n, 9);
  for (int at : {1, 2, 5, 9}) {
    for (StagingDirection dir : {StagingDirection::kToDevice, StagingDirection::kToHost}) {
      std::vector<char> device(n, 0);
      FakeDma dma(device, dir, shape, at);
      dma.fail_issue_at = at;
      TransportStatus s = RunStaged(team, dma, dir, host.data(), n, shape, false);
      CHECK(s.code == 7 && s.call == "fakeIssue");
      // Chunks already copied may still have been issued by other threads, never all of them.
      CHECK(dma.finished_with_nothing_moving && dma.transfers >= at - 1);
      CHECK(dma.transfers < static_cast<int>(PlanStaging(n, shape, 4).chunks.size()));
    }
    std::vector<char> device(n, 0);
    FakeDma dma(device, StagingDirection::kToHost, shape, at);
    dma.fail_wait_at = at;
    TransportStatus s =
        RunStaged(team, dma, StagingDirection::kToHost, host.data(), n, shape, false);
    CHECK(s.code == 11 && s.call == "fakeWait");
    CHECK(dma.finished_with_nothing_moving);
  }
  // The team is still fine afterwards.
  RoundTrip(team, 3 * MiB + 1, shape, 99, true);
}

static void TestTeamCopy() {
  for (int threads : {1, 2, 7}) {
    CopyTeam team(threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, 300 * KiB + 13, 9 * MiB + 1}) {
      for (size_t skew : {size_t{0}, size_t{3}}) {
        std::vector<char> src = Pattern(n + skew, static_cast<unsigned>(n)), dst(n + skew, 0);
        team.Copy(dst.data() + skew, src.data() + skew, n, skew == 0);
        CHECK(n == 0 || std::memcmp(dst.data() + skew, src.data() + skew, n) == 0);
        CHECK(std::all_of(dst.begin(), dst.begin() + skew, [](char c) { return c == 0; }));
      }
    }
  }
}

// More jobs at once than the team has places for: the extra ones wait for a place.
static void TestManyJobsAtOnce() {
  CopyTeam team(3);
  const int callers = CopyTeam::kJobs + 4;
  const size_t n = 2 * MiB + 4096;
  std::vector<std::vector<char>> src, dst;
  for (int i = 0; i < callers; ++i) {
    src.push_back(Pattern(n, 300 + i));
    dst.emplace_back(n, 0);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i)
    threads.emplace_back([&, i] {
      for (int round = 0; round < 5; ++round)
        team.Copy(dst[i].data(), src[i].data(), n, i % 2 == 0);
    });
  for (auto& t : threads) t.join();
  bool same = true;
  for (int i = 0; i < callers; ++i) same = same && dst[i] == src[i];
  CHECK(same);
}

int main() {
  TestPlan();
  TestRoundTrips();
  TestBothDirectionsAtOnce();
  TestFailures();
  TestTeamCopy();
  TestManyJobsAtOnce();
  if (failures) std::fprintf(stderr, "staging tests: %d failures\n", failures);
  return failures ? 1 : 0;
}
