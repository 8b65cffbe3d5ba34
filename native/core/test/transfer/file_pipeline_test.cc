// Tests of the file pipeline without a GPU or a disk: a fake file (in memory, with partial reads,
// EINTR, O_DIRECT's alignment rules and injected failures: EIO, a file that shrinks, a full disk)
// and a fake DMA engine on its own thread that moves chunks between the ring and a "device" vector
// after random delays, reading and writing the ring at the moment it runs, so ring bytes reused
// too early corrupt the data and the byte comparison fails. Then the same pipeline over a real
// file (PosixFile) into host memory (HostTransport).
#include "core/transfer/file_pipeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/test/check.h"
#include "core/test/transfer/fake_dma.h"

using namespace cm::core;

constexpr size_t KiB = 1024;

static std::vector<char> Pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  std::mt19937 rng(seed);
  for (auto& c : v) c = static_cast<char>(rng());
  return v;
}

// Memory aligned to 4 KiB, as a pinned ring is.
struct AlignedRing {
  explicit AlignedRing(size_t n)
      : p(static_cast<char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {}
  ~AlignedRing() { std::free(p); }
  char* p;
};

// A file in memory. Reads may come back short or interrupted; with `align`, a read whose buffer
// (relative to `ring`), offset or length is not a multiple of it fails with EINVAL, as O_DIRECT
// does.
class FakeFile : public FileIo {
 public:
  explicit FakeFile(std::vector<char> data, unsigned seed = 1)
      : data_(std::move(data)), rng_(seed) {}
  long long Read(char* buf, size_t n, uint64_t offset) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++reads;
    if (align > 1 &&
        (offset % align || n % align ||
         (reinterpret_cast<uintptr_t>(buf) - reinterpret_cast<uintptr_t>(ring)) % align))
      return ++misaligned, -EINVAL;
    if (interrupt && rng_() % 4 == 0) return -EINTR;
    if (fail_at_offset >= 0 && offset <= static_cast<uint64_t>(fail_at_offset) &&
        static_cast<uint64_t>(fail_at_offset) < offset + n)
      return -EIO;
    if (shrink_after && reads > shrink_after) data_.resize(std::min(data_.size(), shrink_to));
    if (offset >= data_.size()) return 0;
    size_t m = std::min<size_t>(n, data_.size() - offset);
    if (partial && m > 1 && align == 1) m = 1 + rng_() % m;
    std::memcpy(buf, data_.data() + offset, m);
    return static_cast<long long>(m);
  }
  long long Write(const char* buf, size_t n, uint64_t offset) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (interrupt && rng_() % 4 == 0) return -EINTR;
    if (offset + n > space) {
      if (offset >= space) return -ENOSPC;
      n = space - offset;  // what fits, as write(2) does before ENOSPC
    }
    if (partial && n > 1) n = 1 + rng_() % n;
    if (data_.size() < offset + n) data_.resize(offset + n);
    std::memcpy(data_.data() + offset, buf, n);
    return static_cast<long long>(n);
  }
  std::vector<char>& data() { return data_; }

  size_t align = 1;
  const char* ring = nullptr;
  bool interrupt = false, partial = false;
  long long fail_at_offset = -1;
  int shrink_after = 0;
  size_t shrink_to = 0;
  size_t space = SIZE_MAX;
  int reads = 0, misaligned = 0;

 private:
  std::mutex mutex_;
  std::vector<char> data_;
  std::mt19937 rng_;
};

static void TestPlan() {
  CHECK(PlanFile(5, 0, {}).chunks.empty());
  FileShape s{64 * KiB, 3, 16 * KiB, 4096};
  // [5000, 5000 + 200 KiB): windows from 4096, each 64 KiB, the last ends at the aligned end.
  FilePlan p = PlanFile(5000, 200 * KiB, s);
  CHECK(p.chunks.size() == 4);
  CHECK(p.chunks[0].offset == 0 && p.chunks[0].length == 64 * KiB - 904);
  CHECK(p.chunks[0].ring_offset == 904);
  CHECK(p.chunks[1].offset == 64 * KiB - 904 && p.chunks[1].ring_offset == 64 * KiB);
  CHECK(p.chunks[3].after == 0 && p.chunks[3].slot == 0 && p.chunks[2].after == -1);
  // Properties over random ranges and shapes: chunks tile [0, n) in order; with alignment every
  // I/O is aligned in the file and the ring and covers its chunk's bytes.
  std::mt19937 rng(5);
  for (int t = 0; t < 2000; ++t) {
    FileShape r{(1 + rng() % 16) * 4096 + rng() % 3000, 2 + static_cast<int>(rng() % 4),
                (1 + rng() % 8) * 4096 + rng() % 100, rng() % 2 ? 4096u : 1u};
    const FileShape n = NormalizeFileShape(r);
    uint64_t offset = rng() % (1 << 20);
    size_t len = 1 + rng() % (1 << 19);
    FilePlan q = PlanFile(offset, len, r);
    size_t at = 0, piece = 0;
    for (size_t k = 0; k < q.chunks.size(); ++k) {
      const StagingChunk& c = q.chunks[k];
      CHECK(c.offset == at && c.length > 0 && c.length <= n.chunk);
      CHECK(c.ring_offset >= c.slot * n.chunk &&
            c.ring_offset + c.length <= (c.slot + 1) * n.chunk);
      CHECK(c.first_piece == piece && c.pieces > 0);
      // The chunk's pieces read a contiguous window holding its bytes.
      const FilePiece& first = q.pieces[c.first_piece];
      const FilePiece& last = q.pieces[c.first_piece + c.pieces - 1];
      CHECK(first.file_offset <= offset + c.offset);
      CHECK(first.file_offset + (c.ring_offset - first.ring_offset) == offset + c.offset);
      CHECK(last.file_offset + last.need == offset + c.offset + c.length);
      for (size_t i = c.first_piece; i < c.first_piece + c.pieces; ++i) {
        const FilePiece& f = q.pieces[i];
        CHECK(f.chunk == k && f.need <= f.length && f.length <= n.piece && f.need > 0);
        CHECK(f.file_offset % n.align == 0 && f.length % n.align == 0 &&
              f.ring_offset % n.align == 0);
        CHECK(f.ring_offset + f.length <= (c.slot + 1) * n.chunk);
      }
      at += c.length;
      piece += c.pieces;
    }
    CHECK(at == len && piece == q.pieces.size());
  }
}

static void TestReads() {
  std::mt19937 rng(11);
  for (int t = 0; t < 60; ++t) {
    const size_t file_bytes = 1 + rng() % (700 * KiB);
    FakeFile file(Pattern(file_bytes, t), t);
    const uint64_t offset = rng() % file_bytes;
    const size_t n = 1 + rng() % (file_bytes - offset);
    FileShape shape{(1 + rng() % 8) * 16 * KiB, 2 + static_cast<int>(rng() % 3),
                    (1 + rng() % 4) * 4 * KiB, t % 2 ? 4096u : 1u};
    file.align = shape.align;
    file.interrupt = t % 3 == 0;
    file.partial = t % 4 == 1;
    const FileShape norm = NormalizeFileShape(shape);
    std::vector<char> device(n + 64, 'x');
    FakeDma dma(device, true, FileRingBytes(norm), norm.slots, t);
    file.ring = dma.ring();
    CopyTeam team(t % 5 == 0 ? 1 : 4);
    FileProgress progress{0};
    FileStatus st = RunFileRead(&team, dma, file, offset, n, shape, &progress);
    CHECK(st.ok());
    CHECK(file.misaligned == 0);
    CHECK(std::memcmp(device.data(), file.data().data() + offset, n) == 0);
    // Nothing written past the range.
    CHECK(std::all_of(device.begin() + n, device.end(), [](char c) { return c == 'x'; }));
    CHECK(progress.load() == n && dma.in_order && dma.finished_with_nothing_moving);
  }
}

static void TestWrites() {
  std::mt19937 rng(12);
  for (int t = 0; t < 40; ++t) {
    const size_t n = 1 + rng() % (600 * KiB);
    const uint64_t offset = rng() % 5000;
    std::vector<char> device = Pattern(n, 100 + t);
    FakeFile file({}, t);
    file.interrupt = t % 3 == 0;
    file.partial = t % 2 == 0;
    FileShape shape{(1 + rng() % 8) * 16 * KiB, 2 + static_cast<int>(rng() % 3),
                    (1 + rng() % 4) * 4 * KiB, 1};
    const FileShape norm = NormalizeFileShape(shape);
    FakeDma dma(device, false, FileRingBytes(norm), norm.slots, t);
    CopyTeam team(t % 4 == 0 ? 1 : 3);
    FileProgress progress{0};
    FileStatus st = RunFileWrite(&team, dma, file, offset, n, shape, &progress);
    CHECK(st.ok());
    CHECK(file.data().size() == offset + n);
    CHECK(std::memcmp(device.data(), file.data().data() + offset, n) == 0);
    CHECK(progress.load() == n && dma.in_order && dma.finished_with_nothing_moving);
  }
}

static void TestFailures() {
  const size_t file_bytes = 900 * KiB;
  const FileShape shape{64 * KiB, 3, 16 * KiB, 1};
  for (int threads : {1, 4}) {
    // EIO half-way: the first failure is reported with its place, nothing is still moving, and
    // the device is not written past the range.
    {
      FakeFile file(Pattern(file_bytes, 1));
      file.fail_at_offset = 450 * KiB + 3;
      std::vector<char> device(file_bytes + 16, 'x');
      FakeDma dma(device, true, FileRingBytes(shape), shape.slots, 1);
      CopyTeam team(threads);
      FileStatus st = RunFileRead(&team, dma, file, 0, file_bytes, shape);
      CHECK(st.kind == FileStatus::kIo && st.err == EIO && st.call == "pread");
      CHECK(st.offset <= 450 * KiB + 3 && st.offset + 16 * KiB > 450 * KiB + 3);
      CHECK(dma.finished_with_nothing_moving);
      CHECK(device[file_bytes] == 'x');
    }
    // The file shrinks under the read: a read finds its end (the first to fail may be one that
    // starts past it, with several threads).
    {
      FakeFile file(Pattern(file_bytes, 2));
      file.shrink_after = 10;
      file.shrink_to = 300 * KiB + 7;
      std::vector<char> device(file_bytes, 'x');
      FakeDma dma(device, true, FileRingBytes(shape), shape.slots, 2);
      CopyTeam team(threads);
      FileStatus st = RunFileRead(&team, dma, file, 0, file_bytes, shape);
      CHECK(st.kind == FileStatus::kShrunk && st.offset >= 300 * KiB + 7 && st.offset < file_bytes);
      if (threads == 1) CHECK(st.offset == 300 * KiB + 7);
      CHECK(dma.finished_with_nothing_moving);
    }
    // The same with O_DIRECT's rules: the short block read at the new end is the end.
    {
      FakeFile file(Pattern(file_bytes, 3));
      FileShape direct = shape;
      direct.align = 4096;
      file.align = 4096;
      file.shrink_after = 5;
      file.shrink_to = 200 * KiB + 100;
      std::vector<char> device(file_bytes, 'x');
      FakeDma dma(device, true, FileRingBytes(direct), direct.slots, 3);
      file.ring = dma.ring();
      CopyTeam team(threads);
      FileStatus st = RunFileRead(&team, dma, file, 10, file_bytes - 10, direct);
      CHECK(st.kind == FileStatus::kShrunk && file.misaligned == 0);
    }
    // A range past the end of the file from the start: a short read. With several threads the
    // first read to find the end may be one that starts past it.
    {
      FakeFile file(Pattern(100 * KiB, 4));
      std::vector<char> device(200 * KiB, 'x');
      FakeDma dma(device, true, FileRingBytes(shape), shape.slots, 4);
      CopyTeam team(threads);
      FileStatus st = RunFileRead(&team, dma, file, 0, 200 * KiB, shape);
      CHECK(st.kind == FileStatus::kShrunk && st.offset >= 100 * KiB && st.offset < 200 * KiB);
      if (threads == 1) CHECK(st.offset == 100 * KiB);
      CHECK(dma.finished_with_nothing_moving);
    }
    // A full disk while writing.
    {
      std::vector<char> device = Pattern(file_bytes, 5);
      FakeFile file({});
      file.space = 500 * KiB + 11;
      FakeDma dma(device, false, FileRingBytes(shape), shape.slots, 5);
      CopyTeam team(threads);
      FileProgress progress{0};
      FileStatus st = RunFileWrite(&team, dma, file, 0, file_bytes, shape, &progress);
      CHECK(st.kind == FileStatus::kIo && st.err == ENOSPC && st.call == "pwrite");
      CHECK(progress.load() < file_bytes && dma.finished_with_nothing_moving);
    }
    // The DMA engine fails: reported as the transport's, and the pipeline stops.
    for (bool read : {true, false}) {
      std::vector<char> device = Pattern(file_bytes, 6);
      FakeFile file(Pattern(file_bytes, 7));
      FakeDma dma(device, read, FileRingBytes(shape), shape.slots, 6);
      dma.fail_issue_at = 4;
      CopyTeam team(threads);
      FileStatus st = read ? RunFileRead(&team, dma, file, 0, file_bytes, shape)
                           : RunFileWrite(&team, dma, file, 0, file_bytes, shape);
      CHECK(st.kind == FileStatus::kTransport && st.transport.code == 7 && st.call == "fakeIssue");
      CHECK(dma.finished_with_nothing_moving);
    }
  }
}

// A real file, read and written through PosixFile into host memory, with and without O_DIRECT
// (where the file system under /tmp allows it).
static void TestRealFile() {
  char path[] = "/tmp/cm-file-pipeline-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  const size_t n = 3 * 1024 * KiB + 123;
  std::vector<char> data = Pattern(n, 9);
  FileShape shape{256 * KiB, 3, 64 * KiB, 1};
  AlignedRing ring(FileRingBytes(shape));
  PosixFile file(fd);
  CopyTeam team(3);
  HostTransport up(ring.p, data.data(), false);
  CHECK(RunFileWrite(&team, up, file, 0, n, shape).ok());
  std::vector<char> back(n - 1000, 0);
  HostTransport down(ring.p, back.data(), true);
  CHECK(RunFileRead(&team, down, file, 1000, n - 1000, shape).ok());
  CHECK(std::memcmp(back.data(), data.data() + 1000, n - 1000) == 0);
  int direct = open(path, O_RDONLY | O_DIRECT);
  if (direct >= 0) {
    PosixFile dfile(direct);
    FileShape d = shape;
    d.align = 4096;
    std::fill(back.begin(), back.end(), 0);
    FileStatus st = RunFileRead(&team, down, dfile, 1000, n - 1000, d);
    // Some file systems open with O_DIRECT and refuse the reads (EINVAL): that is what the
    // measurement at first use finds out.
    CHECK(st.ok() || (st.kind == FileStatus::kIo && st.err == EINVAL));
    if (st.ok()) CHECK(std::memcmp(back.data(), data.data() + 1000, n - 1000) == 0);
    close(direct);
  }
  // The storage's own rate: no destination, the bytes stay in the ring.
  HostTransport none(ring.p, nullptr, true);
  CHECK(RunFileRead(&team, none, file, 0, n, shape).ok());
  close(fd);
  unlink(path);
}

static void TestPreferDirect() {
  CHECK(PreferDirect(3e9, 3e9));
  CHECK(PreferDirect(2.9e9, 3e9));
  CHECK(!PreferDirect(2e9, 3e9));
  CHECK(!PreferDirect(0, 0));
}

// Straight between the file and host memory: every range arrives byte for byte through short
// and interrupted reads and writes, nothing outside the range is touched, progress counts every
// byte once, and failures are reported as the ring's pipeline reports them.
static void TestHostDirect() {
  const size_t file_bytes = 900 * KiB + 123, piece = 64 * KiB;
  const std::vector<char> data = Pattern(file_bytes, 11);
  struct Range {
    uint64_t offset;
    size_t n;
  };
  for (CopyTeam* team : {static_cast<CopyTeam*>(nullptr), new CopyTeam(1), new CopyTeam(4)}) {
    for (Range r : {Range{0, file_bytes}, Range{7, 500 * KiB + 3}, Range{file_bytes - 1, 1},
                    Range{100, 0}, Range{3, piece}}) {
      FakeFile file(data, 12);
      file.partial = file.interrupt = true;
      std::vector<char> host(r.n + 32, 'x');
      FileProgress progress{0};
      FileStatus st = ReadFileToHost(team, file, r.offset, r.n, host.data() + 16, piece, &progress);
      CHECK(st.ok() && progress.load() == r.n);
      CHECK(std::equal(host.begin() + 16, host.begin() + 16 + r.n, data.begin() + r.offset));
      CHECK(std::all_of(host.begin(), host.begin() + 16, [](char c) { return c == 'x'; }));
      CHECK(std::all_of(host.end() - 16, host.end(), [](char c) { return c == 'x'; }));
      // And back: into an empty file at the same offset.
      FakeFile out({}, 13);
      out.partial = out.interrupt = true;
      FileProgress wrote{0};
      st = WriteFileFromHost(team, out, r.offset, r.n, host.data() + 16, piece, &wrote);
      CHECK(st.ok() && wrote.load() == r.n);
      CHECK(out.data().size() == (r.n ? r.offset + r.n : 0));
      CHECK(std::equal(out.data().begin() + (r.n ? r.offset : 0), out.data().end(),
                       data.begin() + r.offset));
    }
    const bool several = team && team->threads() > 1;
    {  // The file shrinks under the read.
      FakeFile file(data, 14);
      file.shrink_after = 3;
      file.shrink_to = 300 * KiB + 7;
      std::vector<char> host(file_bytes);
      FileStatus st = ReadFileToHost(team, file, 0, file_bytes, host.data(), piece);
      CHECK(st.kind == FileStatus::kShrunk && st.offset >= 300 * KiB + 7 && st.offset < file_bytes);
      if (!several) CHECK(st.offset == 300 * KiB + 7);
    }
    {  // EIO half-way.
      FakeFile file(data, 15);
      file.fail_at_offset = 450 * KiB + 3;
      std::vector<char> host(file_bytes);
      FileStatus st = ReadFileToHost(team, file, 0, file_bytes, host.data(), piece);
      CHECK(st.kind == FileStatus::kIo && st.err == EIO && st.call == "pread");
      CHECK(st.offset <= 450 * KiB + 3 && st.offset + piece > 450 * KiB + 3);
    }
    {  // A full disk.
      FakeFile file({}, 16);
      file.space = 500 * KiB + 11;
      FileProgress progress{0};
      FileStatus st = WriteFileFromHost(team, file, 0, file_bytes, data.data(), piece, &progress);
      CHECK(st.kind == FileStatus::kIo && st.err == ENOSPC && st.call == "pwrite");
      CHECK(progress.load() < file_bytes);
    }
    delete team;
  }
}

void TestResidencySpans() {
  // Small files are looked at whole, in windows; the last one short.
  auto whole = ResidencySpans(10, 100, 4);
  CHECK(whole.size() == 3 && whole[0].first == 0 && whole[0].count == 4 && whole[2].first == 8 &&
        whole[2].count == 2);
  CHECK(ResidencySpans(0, 100, 4).empty());
  CHECK(ResidencySpans(100, 100, 4).size() == 25);
  // Past max_pages: max_pages / window_pages windows, in order, inside the file, not
  // overlapping, spread from its start to near its end, whatever its size (2^52 pages: a file
  // of 16 EiB of 4 KiB pages).
  for (uint64_t pages : {101ull, 1000ull, 1ull << 28, 1ull << 52}) {
    auto s = ResidencySpans(pages, 100, 4);
    CHECK(s.size() == 25);
    uint64_t looked = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      CHECK(s[i].count == 4 && s[i].first + s[i].count <= pages);
      if (i) CHECK(s[i].first >= s[i - 1].first + s[i - 1].count);
      looked += s[i].count;
    }
    CHECK(looked == 100);
    CHECK(s.front().first == 0 && s.back().first + 2 * (pages / 25) >= pages);
  }
}

int main() {
  TestResidencySpans();
  TestPlan();
  TestReads();
  TestWrites();
  TestFailures();
  TestRealFile();
  TestPreferDirect();
  TestHostDirect();
  if (failures) std::fprintf(stderr, "file pipeline tests: %d failures\n", failures);
  return failures ? 1 : 0;
}
