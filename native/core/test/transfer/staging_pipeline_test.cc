// Tests of the staged pipeline and the copy team without a GPU: a fake DMA engine on its own
// thread moves chunks between the ring and a "device" vector after random delays, reading and
// writing the ring at the moment it runs, so ring bytes reused too early corrupt the data and the
// byte comparison fails.
#include "core/transfer/staging_pipeline.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/test/check.h"
#include "core/test/transfer/fake_dma.h"
#include "core/transfer/copy_team.h"
#include "core/transfer/file_pipeline.h"  // HostTransport

using namespace cm::core;

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

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
    CHECK(p.chunks[0].pieces == 4 && p.chunks[1].pieces == 8 && p.chunks[3].pieces == 12);
    // Cut finely (to the device), the first chunk goes to every thread, in pieces down to 16 KiB.
    StagingPlan fine = PlanStaging(4 * MiB, shape, 12, {0, true});
    CHECK(fine.chunks[0].pieces == 12 && fine.chunks[1].pieces == 8);
    CHECK(PlanStaging(32 * KiB, shape, 12, {0, true}).chunks[0].pieces == 2);
  }
  StagingPlan big = PlanStaging(64 * MiB, shape, 12);
  CHECK(big.chunks.back().length <= 8 * MiB && big.chunks[6].length == 8 * MiB);

  // Shrinking to a last chunk: 512K, 1M, then the middle 1M, then 1M, 512K.
  StagingShape taper{512 * KiB, 8 * MiB, 8, 512 * KiB};
  std::vector<size_t> want = {512 * KiB, MiB, MiB, MiB, 512 * KiB}, got;
  for (const StagingChunk& c : PlanStaging(4 * MiB, taper, 12).chunks) got.push_back(c.length);
  CHECK(got == want);
  // 64 MiB: 512K..8M up, 8M..512K down (31 MiB), the other 33 MiB in five equal chunks between.
  got.clear();
  for (const StagingChunk& c : PlanStaging(64 * MiB, taper, 12).chunks) got.push_back(c.length);
  CHECK(got.size() == 15 && got[0] == 512 * KiB && got[4] == 8 * MiB && got[10] == 8 * MiB);
  CHECK(got.back() == 512 * KiB && got[13] == MiB);
  for (size_t i = 5; i < 10 && got.size() == 15; ++i)
    CHECK(got[i] <= 8 * MiB && got[i] >= 6 * MiB && got[i] % 4096 == 0);
  // In the ring (8 x 8 MiB): each chunk where the last ended; a chunk that would run past the end
  // starts over at 0 and waits for the chunk that used those bytes before.
  StagingPlan at = PlanStaging(4 * MiB, taper, 12, {62 * MiB});
  CHECK(at.chunks[0].ring_offset == 62 * MiB && at.chunks[1].ring_offset == 62 * MiB + 512 * KiB);
  CHECK(at.chunks[2].ring_offset == 0 && at.chunks[2].after == -1);
  CHECK(at.ring_end == 2 * MiB + 512 * KiB);
  StagingPlan wrap = PlanStaging(200 * MiB, taper, 12);
  CHECK(wrap.chunks[10].after == 2 && wrap.chunks[11].ring_offset == 0);
  CHECK(wrap.chunks[11].after == 4);  // [0, 7.68 MiB) was last used by chunk 4 (7.5 to 15.5)
  // A copy the first chunk holds is one chunk; a little more ends in a small one.
  CHECK(PlanStaging(300 * KiB, taper, 12).chunks.size() == 1);
  StagingPlan two = PlanStaging(700 * KiB + 5, taper, 12);
  CHECK(two.chunks.size() == 2 && two.chunks[1].length == 188 * KiB + 5);
  // Growing to the end (to the device, where the caller issues): doubling from the first chunk
  // until the rest is at most twice the next, which is then the last chunk; last_chunk unused.
  auto grown = [&](size_t n) {
    std::vector<size_t> lengths;
    for (const StagingChunk& c : PlanStaging(n, taper, 12, {0, true, true}).chunks)
      lengths.push_back(c.length);
    return lengths;
  };
  CHECK(grown(MiB) == (std::vector<size_t>{512 * KiB, 512 * KiB}));
  CHECK(grown(2 * MiB) == (std::vector<size_t>{512 * KiB, 1536 * KiB}));
  CHECK(grown(4 * MiB) == (std::vector<size_t>{512 * KiB, MiB, 2560 * KiB}));
  CHECK(grown(16 * MiB) ==
        (std::vector<size_t>{512 * KiB, MiB, 2 * MiB, 4 * MiB, 4352 * KiB, 4352 * KiB}));
  // Past the largest chunk: 8 MiB chunks, then the last 12.5 MiB in two equal ones.
  std::vector<size_t> long_run = grown(36 * MiB);
  CHECK(long_run.size() == 8 && long_run[4] == 8 * MiB && long_run[5] == 8 * MiB &&
        long_run[6] == 6400 * KiB && long_run[7] == 6400 * KiB);
  CHECK(grown(300 * KiB) == (std::vector<size_t>{300 * KiB}));
  CHECK(grown(700 * KiB + 5) == (std::vector<size_t>{512 * KiB, 188 * KiB + 5}));
  // Properties over random sizes and shapes: chunks and pieces tile [0, n) in order, on 4 KiB
  // boundaries, each chunk fits its slot and is cut into at most `threads` pieces.
  std::mt19937 rng(3);
  for (int t = 0; t < 400; ++t) {
    size_t n = rng() % (40 * MiB) + 1;
    StagingShape s{(rng() % (4 * MiB)) + 1, (rng() % (16 * MiB)) + 4096,
                   static_cast<int>(rng() % 8) + 1, t % 3 == 0 ? 0 : (rng() % (4 * MiB)) + 1};
    const size_t max_chunk = std::max<size_t>(64 * KiB, s.max_chunk / 4096 * 4096);
    auto bound = [&](size_t bytes) {
      return std::clamp<size_t>(bytes / 4096 * 4096, 64 * KiB, max_chunk);
    };
    int threads = static_cast<int>(rng() % 16) + 1;
    const size_t ring = StagingRingBytes(s);
    const bool grow = t % 4 == 1;
    StagingPlan q = PlanStaging(n, s, threads, {rng() % (2 * ring), t % 2 == 0, grow});
    size_t at = 0, piece_at = 0;
    bool ok = true;
    for (size_t c = 0; c < q.chunks.size(); ++c) {
      const StagingChunk& ch = q.chunks[c];
      ok = ok && ch.offset == at && ch.offset % 4096 == 0 && ch.length > 0;
      ok = ok && ch.length <= max_chunk;
      ok = ok && ch.slot == static_cast<int>(c % s.slots);
      // In the ring, on a page, after the chunk before (or at the start); it waits for every
      // earlier chunk that shares its ring bytes and for the one `slots` back.
      const size_t bytes = (ch.length + 4095) / 4096 * 4096;
      ok = ok && ch.ring_offset % 4096 == 0 && ch.ring_offset + bytes <= ring;
      if (c > 0) {
        const StagingChunk& prev = q.chunks[c - 1];
        const size_t end = (prev.ring_offset + (prev.length + 4095) / 4096 * 4096) % ring;
        ok = ok && (ch.ring_offset == end || ch.ring_offset == 0);
      }
      ok = ok && ch.after < static_cast<long>(c) && ch.after >= static_cast<long>(c) - s.slots;
      for (size_t j = 0; j < c; ++j) {
        const StagingChunk& e = q.chunks[j];
        const size_t e_bytes = (e.length + 4095) / 4096 * 4096;
        if (e.ring_offset < ch.ring_offset + bytes && ch.ring_offset < e.ring_offset + e_bytes)
          ok = ok && static_cast<long>(j) <= ch.after;
      }
      ok = ok && ch.pieces >= 1 && ch.pieces <= static_cast<size_t>(threads);
      for (size_t k = ch.first_piece; k < ch.first_piece + ch.pieces; ++k) {
        ok = ok && q.pieces[k].chunk == c && q.pieces[k].offset == piece_at;
        ok = ok && (q.pieces[k].offset % 4096 == 0);
        piece_at += q.pieces[k].length;
      }
      at += ch.length;
    }
    ok = ok && at == n && piece_at == n && q.ring_end < ring && q.ring_end % 4096 == 0;
    ok = ok && q.chunks.front().length <= bound(s.first_chunk);
    // (A copy the first chunk holds is one chunk, whatever the last chunk's size.)
    if (s.last_chunk && !grow && q.chunks.size() > 1)
      ok = ok && q.chunks.back().length <= bound(s.last_chunk);
    // Growing: chunks never shrink but for the last two (what was left, cut in two when it is
    // over the largest chunk), and those are at least half the chunk before them, unless the
    // copy is the first chunk and a little more.
    for (size_t c = 1; grow && c < q.chunks.size(); ++c) {
      const size_t len = q.chunks[c].length, before = q.chunks[c - 1].length;
      if (c + 2 < q.chunks.size())
        ok = ok && len >= before;
      else if (q.chunks.size() > 2)
        ok = ok && 2 * len + 8192 >= before;
    }
    CHECK(ok);
  }
}

static bool SamePlan(const StagingPlan& a, const StagingPlan& b) {
  bool same = a.chunks.size() == b.chunks.size() && a.pieces.size() == b.pieces.size() &&
              a.ring_end == b.ring_end;
  for (size_t c = 0; same && c < a.chunks.size(); ++c) {
    const StagingChunk &x = a.chunks[c], &y = b.chunks[c];
    same = x.offset == y.offset && x.length == y.length && x.ring_offset == y.ring_offset &&
           x.slot == y.slot && x.after == y.after && x.first_piece == y.first_piece &&
           x.pieces == y.pieces;
  }
  for (size_t p = 0; same && p < a.pieces.size(); ++p) {
    const StagingPiece &x = a.pieces[p], &y = b.pieces[p];
    same = x.chunk == y.chunk && x.offset == y.offset && x.length == y.length;
  }
  return same;
}

// The plan of a staged copy: PlanStaging with the first chunk cut finely to the device, and
// chunks that grow to the end where the caller issues (to the device, below kCallerIssuesBelow
// under kAuto, with more than one thread).
static void TestPlanStagedCopy() {
  const StagingShape shape{512 * KiB, 8 * MiB, 8, 512 * KiB};
  const auto to_device = StagingDirection::kToDevice, to_host = StagingDirection::kToHost;
  const size_t below = 4 * MiB, above = kCallerIssuesBelow + 3 * MiB, start = 5 * MiB;
  CHECK(SamePlan(PlanStagedCopy(to_device, IssueMode::kAuto, below, shape, 12, start),
                 PlanStaging(below, shape, 12, {start, true, true})));
  CHECK(PlanStagedCopy(to_device, IssueMode::kAuto, below, shape, 12, 0).chunks.size() == 3);
  CHECK(SamePlan(PlanStagedCopy(to_device, IssueMode::kAuto, above, shape, 12, start),
                 PlanStaging(above, shape, 12, {start, true, false})));
  CHECK(SamePlan(PlanStagedCopy(to_host, IssueMode::kAuto, below, shape, 12, start),
                 PlanStaging(below, shape, 12, {start, false, false})));
  CHECK(PlanStagedCopy(to_host, IssueMode::kAuto, below, shape, 12, 0).chunks.size() == 5);
  // The issue mode and the team decide as CallerIssues does.
  CHECK(SamePlan(PlanStagedCopy(to_device, IssueMode::kCaller, above, shape, 12, 0),
                 PlanStaging(above, shape, 12, {0, true, true})));
  CHECK(SamePlan(PlanStagedCopy(to_device, IssueMode::kAnyThread, below, shape, 12, 0),
                 PlanStaging(below, shape, 12, {0, true, false})));
  CHECK(SamePlan(PlanStagedCopy(to_device, IssueMode::kAuto, below, shape, 1, 0),
                 PlanStaging(below, shape, 1, {0, true, false})));
}

static void RoundTrip(CopyTeam& team, size_t n, const StagingShape& shape, unsigned seed,
                      bool streaming, IssueMode issue = IssueMode::kAuto) {
  std::vector<char> src = Pattern(n, seed), back(n, 0), device(n, 0);
  // Start somewhere in the ring, as a copy after others does.
  size_t pos = (seed * 7919 * 4096) % StagingRingBytes(shape);
  {
    FakeDma dma(device, StagingDirection::kToDevice, shape, seed);
    TransportStatus s = RunStaged(team, dma, StagingDirection::kToDevice, src.data(), n, shape,
                                  streaming, &pos, issue);
    CHECK(s.ok() && dma.finished_with_nothing_moving && dma.in_order);
    // The caller as issuer: every chunk from this thread (a copy of one piece, or a team of one,
    // runs on this thread anyway).
    if (issue == IssueMode::kCaller)
      CHECK(dma.issuers.size() == 1 && dma.issuers[0] == std::this_thread::get_id());
  }
  CHECK(device == src);
  {
    FakeDma dma(device, StagingDirection::kToHost, shape, seed + 1);
    TransportStatus s =
        RunStaged(team, dma, StagingDirection::kToHost, back.data(), n, shape, streaming, &pos);
    CHECK(s.ok());
  }
  CHECK(back == src);
}

// Copies one after another through one ring per direction, each starting where the last ended:
// sizes from a byte to several rings, so chunks wrap round the ring within a copy and between
// copies, and the FakeDma's delays catch ring bytes used again too early.
static void TestRingInTurn() {
  CopyTeam team(5);
  StagingShape shape{64 * KiB, 512 * KiB, 4, 64 * KiB};
  const size_t ring = StagingRingBytes(shape);
  std::mt19937 rng(11);
  std::vector<char> device(5 * ring);
  FakeDma up(device, StagingDirection::kToDevice, shape, 21);
  FakeDma down(device, StagingDirection::kToHost, shape, 22);
  size_t up_pos = 0, down_pos = 0;
  for (int k = 0; k < 40; ++k) {
    const size_t n = k % 5 == 0 ? 1 + rng() % 4096 : 1 + rng() % (5 * ring);
    std::vector<char> src = Pattern(n, 100 + k), back(n, 0);
    const size_t expect = PlanStagedCopy(StagingDirection::kToDevice, IssueMode::kAuto, n, shape,
                                         team.threads(), up_pos)
                              .ring_end;
    CHECK(
        RunStaged(team, up, StagingDirection::kToDevice, src.data(), n, shape, k % 2 == 0, &up_pos)
            .ok());
    CHECK(up_pos == expect && up_pos % 4096 == 0 && up_pos < ring);
    CHECK(std::equal(src.begin(), src.end(), device.begin()));
    CHECK(RunStaged(team, down, StagingDirection::kToHost, back.data(), n, shape, k % 3 == 0,
                    &down_pos)
              .ok());
    CHECK(back == src);
  }
  CHECK(up.finished_with_nothing_moving);
}

static void TestRoundTrips() {
  const size_t sizes[] = {1, 4095, 64 * KiB, MiB + 3, 4 * MiB, 13 * MiB + 77, 40 * MiB};
  const StagingShape shapes[] = {{256 * KiB, 8 * MiB, 4},
                                 {64 * KiB, 1 * MiB, 2},
                                 {MiB, MiB, 3},
                                 {128 * KiB, 2 * MiB, 5, 64 * KiB}};
  for (int threads : {1, 3, 8})
    for (IssueMode issue : {IssueMode::kCaller, IssueMode::kAnyThread}) {
      CopyTeam team(threads);
      unsigned seed = 1;
      for (const StagingShape& shape : shapes)
        for (size_t n : sizes) {
          RoundTrip(team, n, shape, seed, seed % 2 == 0, issue);
          ++seed;
        }
    }
  // kAuto: the caller issues below kCallerIssuesBelow, team threads from there.
  CopyTeam team(4);
  const StagingShape shape{512 * KiB, 8 * MiB, 8, 512 * KiB};
  for (size_t n : {4 * MiB, kCallerIssuesBelow}) {
    std::vector<char> src = Pattern(n, 3), device(n, 0);
    FakeDma dma(device, StagingDirection::kToDevice, shape, 5);
    size_t pos = 0;
    CHECK(RunStaged(team, dma, StagingDirection::kToDevice, src.data(), n, shape, true, &pos).ok());
    CHECK(device == src && dma.in_order);
    const bool caller_only =
        dma.issuers.size() == 1 && dma.issuers[0] == std::this_thread::get_id();
    CHECK(caller_only == (n < kCallerIssuesBelow));
    // Where the caller issues, chunks grow to the end: 512K, 1M, 2.5M; from 64 MiB they shrink
    // again toward the end (15 chunks, as in TestPlan).
    CHECK(dma.transfers == (n < kCallerIssuesBelow ? 3 : 15));
  }
}

// Both directions at once on one team, from two threads, as a bidirectional copy runs.
static void TestBothDirectionsAtOnce() {
  CopyTeam team(6);
  StagingShape shape{128 * KiB, 2 * MiB, 4, 256 * KiB};
  const size_t n = 24 * MiB + 4096 * 3 + 5;
  size_t p1 = 0, p2 = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<char> up = Pattern(n, 40 + round), device_up(n, 0);
    std::vector<char> device_down = Pattern(n, 50 + round), down(n, 0);
    FakeDma h2d(device_up, StagingDirection::kToDevice, shape, 1);
    FakeDma d2h(device_down, StagingDirection::kToHost, shape, 2);
    TransportStatus a, b;
    std::thread other([&] {
      b = RunStaged(team, d2h, StagingDirection::kToHost, down.data(), n, shape, true, &p2);
    });
    a = RunStaged(team, h2d, StagingDirection::kToDevice, up.data(), n, shape, true, &p1);
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
    for (auto [dir, issue] : {std::pair{StagingDirection::kToDevice, IssueMode::kCaller},
                              std::pair{StagingDirection::kToDevice, IssueMode::kAnyThread},
                              std::pair{StagingDirection::kToHost, IssueMode::kAuto}}) {
      std::vector<char> device(n, 0);
      FakeDma dma(device, dir, shape, at);
      dma.fail_issue_at = at;
      size_t pos = 0;
      TransportStatus s = RunStaged(team, dma, dir, host.data(), n, shape, false, &pos, issue);
      CHECK(s.code == 7 && s.call == "fakeIssue");
      // Chunks already copied may still have been issued by other threads, never all of them.
      CHECK(dma.finished_with_nothing_moving && dma.transfers >= at - 1);
      const bool caller = CallerIssues(dir, issue, n, team.threads());
      CHECK(dma.transfers <
            static_cast<int>(PlanStaging(n, shape, 4, {0, false, caller}).chunks.size()));
    }
    std::vector<char> device(n, 0);
    FakeDma dma(device, StagingDirection::kToHost, shape, at);
    dma.fail_wait_at = at;
    size_t pos = 0;
    TransportStatus s =
        RunStaged(team, dma, StagingDirection::kToHost, host.data(), n, shape, false, &pos);
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

// A job of pieces that sleep (no CPU). With `other`: the pieces of it the team's started threads
// did, and how many pieces of `other` had started at the first of them.
class TurnJob : public TeamJob {
 public:
  TurnJob(size_t pieces, const std::atomic<size_t>* other) : pieces_(pieces), other_(other) {}
  size_t pieces() const override { return pieces_; }
  void Do(size_t) override {
    started.fetch_add(1);
    if (other_ && std::this_thread::get_id() != caller && helped.fetch_add(1) == 0)
      other_at_first_help.store(other_->load());
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::thread::id caller;  // set before Run
  std::atomic<size_t> started{0}, helped{0}, other_at_first_help{SIZE_MAX};

 private:
  size_t pieces_;
  const std::atomic<size_t>* other_;
};

// Two jobs at once on one team (both directions of a copy): the started threads serve both a piece
// at a time, so the second gets them while the first still has most of its pieces to do, not only
// once the first has run out.
static void TestJobsServedInTurn() {
  CopyTeam team(4);
  TurnJob first(400, nullptr), second(40, &first.started);
  std::thread a([&] { team.Run(first); });
  while (first.started.load() < 8) std::this_thread::yield();  // the team is on the first job
  std::thread b([&] {
    second.caller = std::this_thread::get_id();
    team.Run(second);
  });
  b.join();
  a.join();
  CHECK(second.helped.load() > 0);
  CHECK(second.other_at_first_help.load() < 200);
}

// A job whose pieces take a while without using a CPU, counting how many threads are in it at once.
class SlowJob : public TeamJob {
 public:
  explicit SlowJob(size_t pieces) : pieces_(pieces) {}
  size_t pieces() const override { return pieces_; }
  void Do(size_t) override {
    int now = inside_.fetch_add(1) + 1;
    int seen = most_.load();
    while (now > seen && !most_.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    inside_.fetch_sub(1);
  }
  int most() const { return most_.load(); }

 private:
  size_t pieces_;
  std::atomic<int> inside_{0}, most_{0};
};

// Teams on one CpuShare: alone, a team runs all its threads; while others run too, at most
// max(2, cpus / k) of them; and the staged pipeline, whose caller waits for the team's pieces,
// still ends when the share leaves the team only one started thread.
static void TestCpuShare() {
  auto share = std::make_shared<CpuShare>(8);
  CHECK(share->PerTeam() == 8);
  share->Enter();
  CHECK(share->PerTeam() == 8);
  share->Enter();
  share->Enter();
  CHECK(share->PerTeam() == 2 && share->active() == 3);
  share->Leave();
  share->Leave();
  share->Leave();
  CHECK(share->active() == 0 && CpuShare(0).cpus() == 1 && CpuShare(3).PerTeam() == 3);

  CopyTeam team(6, {}, share);
  {
    SlowJob alone(300);
    team.Run(alone);
    CHECK(alone.most() > 2 && alone.most() <= 6);
    CHECK(share->active() == 0);
  }
  // Three other teams running: this one may have 8 / 4 = 2 threads at work, the caller counted.
  for (int i = 0; i < 3; ++i) share->Enter();
  {
    SlowJob crowded(300);
    team.Run(crowded);
    CHECK(crowded.most() <= 2);
  }
  // Seven others: the floor of 2, so the caller that issues in order gets its pieces done.
  for (int i = 0; i < 4; ++i) share->Enter();
  CHECK(share->PerTeam() == 2);
  const StagingShape shape{64 * KiB, 1 * MiB, 3};
  for (IssueMode issue : {IssueMode::kCaller, IssueMode::kAnyThread})
    RoundTrip(team, 5 * MiB + 7, shape, 41, true, issue);
  for (int i = 0; i < 7; ++i) share->Leave();
  CHECK(share->active() == 0);

  // Four real teams at once on the share, each copying its own buffers: all bytes arrive.
  std::vector<std::unique_ptr<CopyTeam>> teams;
  for (int i = 0; i < 4; ++i) teams.emplace_back(new CopyTeam(5, {}, share));
  const size_t n = 3 * MiB + 5;
  std::vector<std::vector<char>> src, dst;
  for (int i = 0; i < 4; ++i) {
    src.push_back(Pattern(n, 500 + i));
    dst.emplace_back(n, 0);
  }
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i)
    callers.emplace_back([&, i] {
      for (int round = 0; round < 10; ++round)
        teams[i]->Copy(dst[i].data(), src[i].data(), n, round % 2 == 0);
    });
  for (auto& t : callers) t.join();
  bool same = true;
  for (int i = 0; i < 4; ++i) same = same && dst[i] == src[i];
  CHECK(same && share->active() == 0);
}

// A team restricted to the CPUs this process may run on says so, and copies as any other.
void TestPinnedTeam() {
  cpu_set_t set;
  CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  CopyTeam team(3, cpus);
  CHECK(team.pinned());
  std::vector<char> from(5 << 20), to(5 << 20);
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<char>(i * 7 + 3);
  team.Copy(to.data(), from.data(), from.size(), true);
  CHECK(from == to);
  CHECK(!CopyTeam(2).pinned());
}

// A team starts only the threads its share can ever let work: 256 asked for on 2 CPUs start 1
// (2 with the caller), and still copy everything.
static void TestTeamStartsWhatCanRun() {
  auto two = std::make_shared<CpuShare>(2);
  CopyTeam team(256, {}, two);
  CHECK(team.threads() == 2);
  const size_t n = 5 * MiB + 3;
  std::vector<char> src = Pattern(n, 77), dst(n, 0);
  team.Copy(dst.data(), src.data(), n, false);
  CHECK(dst == src);
  CHECK(CopyTeam(6, {}, std::make_shared<CpuShare>(16)).threads() == 6);
  CHECK(CopyTeam(6, {}, std::make_shared<CpuShare>(1)).threads() == 2);
  CHECK(CopyTeam(5).threads() == 5);  // no share: as asked
}

// The benchmark's host half (StagingEngine::HostHalf): a staged copy through a HostTransport, its
// chunks moved by memcpy between the ring and a stand-in for the device as they are issued, or
// not at all with none. Both ways, in turns through one ring each, chunks wrapping round it.
static void TestHostTransportStandIn() {
  CopyTeam team(4);
  StagingShape shape{64 * KiB, 512 * KiB, 4, 64 * KiB};
  const size_t ring_bytes = StagingRingBytes(shape);
  std::vector<char> up_ring(ring_bytes), down_ring(ring_bytes);
  size_t up_pos = 0, down_pos = 0;
  unsigned seed = 11;
  for (size_t n : {size_t{1}, 100 * KiB + 3, ring_bytes, 3 * ring_bytes + 4 * KiB + 5}) {
    std::vector<char> src = Pattern(n, seed++), device(n, 0), back(n, 0);
    HostTransport to_device(up_ring.data(), device.data(), true);
    CHECK(RunStaged(team, to_device, StagingDirection::kToDevice, src.data(), n, shape, n % 2 == 0,
                    &up_pos)
              .ok());
    CHECK(device == src);
    HostTransport to_host(down_ring.data(), device.data(), false);
    CHECK(RunStaged(team, to_host, StagingDirection::kToHost, back.data(), n, shape, n % 2 == 1,
                    &down_pos)
              .ok());
    CHECK(back == src);
    // With no stand-in nothing reaches past the ring, and the copy still runs to its end.
    HostTransport none(up_ring.data(), nullptr, true);
    CHECK(RunStaged(team, none, StagingDirection::kToDevice, src.data(), n, shape, false, &up_pos)
              .ok());
  }
}

int main() {
  TestTeamStartsWhatCanRun();
  TestPlan();
  TestPlanStagedCopy();
  TestRoundTrips();
  TestRingInTurn();
  TestBothDirectionsAtOnce();
  TestFailures();
  TestTeamCopy();
  TestManyJobsAtOnce();
  TestCpuShare();
  TestPinnedTeam();
  TestHostTransportStandIn();
  TestJobsServedInTurn();
  if (failures) std::fprintf(stderr, "staging tests: %d failures\n", failures);
  return failures ? 1 : 0;
}
