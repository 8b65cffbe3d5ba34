#include "core/transfer/file_pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>

namespace cm::core {

namespace {
size_t AlignDown(uint64_t v, size_t a) { return static_cast<size_t>(v / a * a); }
bool PowerOfTwo(size_t v) { return v && !(v & (v - 1)); }
}  // namespace

FileShape NormalizeFileShape(FileShape s) {
  if (!PowerOfTwo(s.align)) s.align = 1;
  s.piece = std::max(s.align, AlignDown(s.piece, s.align));
  s.chunk = std::max(s.piece, AlignDown(s.chunk, s.align));
  s.piece = std::min(s.piece, s.chunk);
  s.slots = std::max(2, s.slots);
  return s;
}

FilePlan PlanFile(uint64_t offset, size_t n, const FileShape& shape_in) {
  const FileShape s = NormalizeFileShape(shape_in);
  FilePlan plan;
  if (n == 0) return plan;
  const uint64_t end = offset + n;
  const uint64_t aligned_end = (end + s.align - 1) / s.align * s.align;
  long k = 0;
  for (uint64_t w = AlignDown(offset, s.align); w < end; ++k) {
    const uint64_t we = std::min<uint64_t>(w + s.chunk, aligned_end);
    const uint64_t ds = std::max(w, offset), de = std::min(we, end);
    StagingChunk c;
    c.slot = static_cast<int>(k % s.slots);
    c.offset = static_cast<size_t>(ds - offset);
    c.length = static_cast<size_t>(de - ds);
    c.ring_offset = static_cast<size_t>(c.slot) * s.chunk + static_cast<size_t>(ds - w);
    c.after = k >= s.slots ? k - s.slots : -1;
    c.first_piece = plan.pieces.size();
    // Every piece starts before `end`: pieces start at aligned offsets, and an aligned offset at
    // or past `end` is at or past aligned_end, where the window stops.
    for (uint64_t p = w; p < we; p += s.piece) {
      FilePiece piece;
      piece.chunk = static_cast<size_t>(k);
      piece.file_offset = p;
      piece.length = static_cast<size_t>(std::min<uint64_t>(p + s.piece, we) - p);
      piece.need = static_cast<size_t>(std::min<uint64_t>(p + piece.length, end) - p);
      piece.ring_offset = static_cast<size_t>(c.slot) * s.chunk + static_cast<size_t>(p - w);
      plan.pieces.push_back(piece);
    }
    c.pieces = plan.pieces.size() - c.first_piece;
    plan.chunks.push_back(c);
    w = we;
  }
  return plan;
}

FileStatus ReadFully(FileIo& file, char* buf, size_t length, size_t need, uint64_t offset,
                     size_t align) {
  FileStatus st;
  size_t got = 0;
  while (got < need) {
    long long r = file.Read(buf + got, length - got, offset + got);
    if (r == -EINTR) continue;
    if (r < 0) {
      st.kind = FileStatus::kIo;
      st.err = static_cast<int>(-r);
      st.call = "pread";
      st.offset = offset + got;
      return st;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
    // O_DIRECT reads only whole blocks: a count that is not one ends at the end of the file, and
    // a read from there would fail with EINVAL.
    if (align > 1 && got % align) break;
  }
  if (got < need) {
    st.kind = FileStatus::kShrunk;
    st.call = "pread";
    st.offset = offset + got;
  }
  return st;
}

FileStatus WriteFully(FileIo& file, const char* buf, size_t n, uint64_t offset) {
  FileStatus st;
  size_t put = 0;
  while (put < n) {
    long long r = file.Write(buf + put, n - put, offset + put);
    if (r == -EINTR) continue;
    if (r <= 0) {
      st.kind = FileStatus::kIo;
      st.err = r == 0 ? EIO : static_cast<int>(-r);
      st.call = "pwrite";
      st.offset = offset + put;
      return st;
    }
    put += static_cast<size_t>(r);
  }
  return st;
}

namespace {

FileStatus TransportFailure(const TransportStatus& t) {
  FileStatus st;
  st.kind = FileStatus::kTransport;
  st.transport = t;
  st.call = t.call;
  return st;
}

// What the team threads and the calling thread share while a file transfer runs.
class FileJob : public TeamJob {
 public:
  FileJob(StagingTransport& transport, FileIo& file, const FilePlan& plan, const FileShape& shape,
          bool read, FileProgress* progress)
      : transport_(transport),
        file_(file),
        plan_(plan),
        shape_(shape),
        read_(read),
        progress_(progress),
        left_(plan.chunks.size()) {
    for (size_t k = 0; k < plan.chunks.size(); ++k) left_[k] = plan.chunks[k].pieces;
  }

  size_t pieces() const override { return plan_.pieces.size(); }

  void Do(size_t i) override {
    const FilePiece& p = plan_.pieces[i];
    const StagingChunk& c = plan_.chunks[p.chunk];
    if (!Failed()) {
      if (read_)
        ReadPiece(p, c);
      else
        WritePiece(p, c);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--left_[p.chunk] == 0) changed_.notify_all();
  }

  // The calling thread's part: hands chunks to the DMA engine in order.
  void IssueAll() {
    for (size_t k = 0; k < plan_.chunks.size(); ++k) {
      const StagingChunk& c = plan_.chunks[k];
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // A read issues chunk k once it is in the ring; a write once the chunk that last used
        // its ring slot has been written out.
        const long ready = read_ ? static_cast<long>(k) : c.after;
        changed_.wait(lock, [&] { return failed_ || ready < 0 || left_[ready] == 0; });
        if (failed_) return;
      }
      TransportStatus t = transport_.Issue(c);
      if (!t.ok()) return Fail(TransportFailure(t));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        issued_ = static_cast<long>(k) + 1;
      }
      changed_.notify_all();
      if (read_ && progress_) progress_->fetch_add(c.length);
    }
  }

  // Runs everything on the calling thread, chunk by chunk.
  void RunAlone() {
    for (size_t k = 0; k < plan_.chunks.size() && !Failed(); ++k) {
      const StagingChunk& c = plan_.chunks[k];
      const size_t first = c.first_piece, last = c.first_piece + c.pieces;
      if (read_) {
        for (size_t i = first; i < last && !Failed(); ++i) ReadPiece(plan_.pieces[i], c);
        if (Failed()) return;
        TransportStatus t = transport_.Issue(c);
        if (!t.ok()) return Fail(TransportFailure(t));
        issued_ = static_cast<long>(k) + 1;
        if (progress_) progress_->fetch_add(c.length);
      } else {
        TransportStatus t = transport_.Issue(c);
        if (!t.ok()) return Fail(TransportFailure(t));
        issued_ = static_cast<long>(k) + 1;
        for (size_t i = first; i < last && !Failed(); ++i) WritePiece(plan_.pieces[i], c);
      }
    }
  }

  FileStatus status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  void Fail(FileStatus s) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed_) status_ = std::move(s);
      failed_ = true;
    }
    changed_.notify_all();
  }

 private:
  bool Failed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failed_;
  }

  // Waits until chunk k has been issued; false if the transfer failed meanwhile.
  bool AwaitIssued(long k) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return failed_ || issued_ > k; });
    return !failed_;
  }

  void ReadPiece(const FilePiece& p, const StagingChunk& c) {
    // The ring slot is free once the transfer of the chunk that used it before has finished.
    if (c.after >= 0) {
      if (!AwaitIssued(c.after)) return;
      TransportStatus t = transport_.Wait(c.slot);
      if (!t.ok()) return Fail(TransportFailure(t));
    }
    FileStatus st = ReadFully(file_, transport_.ring() + p.ring_offset, p.length, p.need,
                              p.file_offset, shape_.align);
    if (!st.ok()) Fail(st);
  }

  void WritePiece(const FilePiece& p, const StagingChunk& c) {
    if (!AwaitIssued(static_cast<long>(p.chunk))) return;
    TransportStatus t = transport_.Wait(c.slot);
    if (!t.ok()) return Fail(TransportFailure(t));
    FileStatus st = WriteFully(file_, transport_.ring() + p.ring_offset, p.need, p.file_offset);
    if (!st.ok()) return Fail(st);
    if (progress_) progress_->fetch_add(p.need);
  }

  StagingTransport& transport_;
  FileIo& file_;
  const FilePlan& plan_;
  const FileShape shape_;
  const bool read_;
  FileProgress* progress_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<size_t> left_;  // pieces not yet done, per chunk
  long issued_ = 0;           // chunks handed to the DMA engine, in order
  bool failed_ = false;
  FileStatus status_;
};

FileStatus RunFile(CopyTeam* team, StagingTransport& transport, FileIo& file, uint64_t offset,
                   size_t n, const FileShape& shape_in, bool read, FileProgress* progress) {
  const FileShape shape = NormalizeFileShape(read ? shape_in : [&] {
    FileShape s = shape_in;
    s.align = 1;
    return s;
  }());
  const FilePlan plan = PlanFile(offset, n, shape);
  FileJob job(transport, file, plan, shape, read, progress);
  // Without started threads the team would do every piece before the caller issues anything,
  // and a piece that waits for its ring slot would wait for ever.
  if (!team || team->threads() < 2)
    job.RunAlone();
  else
    team->Run(job, [&] { job.IssueAll(); });
  // Nothing may still be moving through the ring when this returns, failure or not.
  TransportStatus t = transport.Finish();
  if (!t.ok()) job.Fail(TransportFailure(t));
  return job.status();
}

// Pieces of a range straight between the file and host memory: no ring, no order.
class HostFileJob : public TeamJob {
 public:
  HostFileJob(FileIo& file, uint64_t offset, size_t n, char* host, size_t piece, bool read,
              FileProgress* progress)
      : file_(file),
        offset_(offset),
        n_(n),
        host_(host),
        piece_(piece ? piece : n),
        read_(read),
        progress_(progress) {}

  size_t pieces() const override { return n_ ? (n_ + piece_ - 1) / piece_ : 0; }

  void Do(size_t i) override {
    if (failed_.load(std::memory_order_relaxed)) return;
    const size_t at = i * piece_, len = std::min(piece_, n_ - at);
    FileStatus st = read_ ? ReadFully(file_, host_ + at, len, len, offset_ + at, 1)
                          : WriteFully(file_, host_ + at, len, offset_ + at);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed_.exchange(true)) status_ = std::move(st);
      return;
    }
    if (progress_) progress_->fetch_add(len);
  }

  FileStatus status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }

 private:
  FileIo& file_;
  const uint64_t offset_;
  const size_t n_;
  char* const host_;
  const size_t piece_;
  const bool read_;
  FileProgress* progress_;
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  FileStatus status_;
};

FileStatus RunHost(CopyTeam* team, FileIo& file, uint64_t offset, size_t n, char* host,
                   size_t piece, bool read, FileProgress* progress) {
  HostFileJob job(file, offset, n, host, piece, read, progress);
  if (team)
    team->Run(job);
  else
    for (size_t i = 0; i < job.pieces(); ++i) job.Do(i);
  return job.status();
}

}  // namespace

FileStatus ReadFileToHost(CopyTeam* team, FileIo& file, uint64_t offset, size_t n, char* host,
                          size_t piece, FileProgress* progress) {
  return RunHost(team, file, offset, n, host, piece, true, progress);
}

FileStatus WriteFileFromHost(CopyTeam* team, FileIo& file, uint64_t offset, size_t n,
                             const char* host, size_t piece, FileProgress* progress) {
  // The job only reads `host` when it writes the file.
  return RunHost(team, file, offset, n, const_cast<char*>(host), piece, false, progress);
}

FileStatus RunFileRead(CopyTeam* team, StagingTransport& transport, FileIo& file, uint64_t offset,
                       size_t n, const FileShape& shape, FileProgress* progress) {
  return RunFile(team, transport, file, offset, n, shape, true, progress);
}

FileStatus RunFileWrite(CopyTeam* team, StagingTransport& transport, FileIo& file, uint64_t offset,
                        size_t n, const FileShape& shape, FileProgress* progress) {
  return RunFile(team, transport, file, offset, n, shape, false, progress);
}

bool PreferDirect(double direct_bytes_per_s, double buffered_bytes_per_s) {
  return direct_bytes_per_s > 0 && direct_bytes_per_s >= 0.95 * buffered_bytes_per_s;
}

std::vector<PageSpan> ResidencySpans(uint64_t pages, uint64_t max_pages, uint64_t window_pages) {
  std::vector<PageSpan> spans;
  if (pages == 0 || window_pages == 0) return spans;
  if (pages <= max_pages) {
    for (uint64_t at = 0; at < pages; at += window_pages)
      spans.push_back({at, std::min(window_pages, pages - at)});
    return spans;
  }
  // pages > max_pages >= count * window_pages, so stride >= window_pages: the spans never overlap.
  const uint64_t count = std::max<uint64_t>(1, max_pages / window_pages);
  const uint64_t stride = pages / count;
  for (uint64_t i = 0; i < count; ++i) spans.push_back({i * stride, window_pages});
  return spans;
}

long long PosixFile::Read(char* buf, size_t n, uint64_t offset) {
  ssize_t r = pread(fd_, buf, n, static_cast<off_t>(offset));
  return r < 0 ? -errno : r;
}

long long PosixFile::Write(const char* buf, size_t n, uint64_t offset) {
  ssize_t r = pwrite(fd_, buf, n, static_cast<off_t>(offset));
  return r < 0 ? -errno : r;
}

TransportStatus HostTransport::Issue(const StagingChunk& c) {
  if (host_) {
    if (read_)
      std::memcpy(host_ + c.offset, ring_ + c.ring_offset, c.length);
    else
      std::memcpy(ring_ + c.ring_offset, host_ + c.offset, c.length);
  }
  return {};
}

}  // namespace cm::core
