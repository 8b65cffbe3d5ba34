// Files to device memory and back, without CUDA or Node: how a file range is cut into chunks (one
// DMA transfer each, through one slot of a pinned ring) and pieces (one pread or pwrite each, run
// by the copy team's threads in parallel), and the jobs that run them so the file I/O and the DMA
// engine overlap.
//
// Reads: team threads read the pieces of chunk k into ring slot k % slots (first waiting for the
// transfer that last used that slot), and the thread that asked for the read hands each chunk to
// the DMA engine, in order, the moment its last piece is in. Writes run the other way: the caller
// issues chunk k from the device into the ring once chunk k - slots has been written out, and the
// team writes its pieces to the file once it has arrived.
//
// With `align` above 1 (O_DIRECT, whose file offsets, lengths and memory addresses must be
// multiples of the logical block size), chunk boundaries sit at aligned file offsets: only the
// first chunk may start, and only the last end, inside a block; each reads its whole blocks into
// the ring and the DMA transfer takes the bytes asked for from within them. The bytes before the
// range and after it in those blocks are read but never reach the device, so the destination is
// never written outside the range.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/transfer/copy_team.h"
#include "core/transfer/staging_pipeline.h"

namespace cm::core {

// The file side. Each call moves up to n bytes at `offset` and returns how many (a read returns 0
// at the end of the file), or -errno. Called from several threads at once.
class FileIo {
 public:
  virtual ~FileIo() = default;
  virtual long long Read(char* buf, size_t n, uint64_t offset) = 0;
  virtual long long Write(const char* buf, size_t n, uint64_t offset) = 0;
};

struct FileShape {
  size_t chunk = 8u << 20;  // bytes of one ring slot, the largest chunk; a multiple of align
  int slots = 4;
  size_t piece = 1u << 20;  // bytes of one pread/pwrite; a multiple of align
  size_t align = 1;         // 1, or a power of two (O_DIRECT: 4096)
};

// The shape made valid: align a power of two (else 1), piece and chunk multiples of it, piece no
// larger than chunk, at least 2 slots.
FileShape NormalizeFileShape(FileShape s);
// Bytes of the ring: slots x chunk. Ring slot k starts at k x chunk, so with the ring itself
// aligned every I/O address is too.
inline size_t FileRingBytes(const FileShape& s) { return static_cast<size_t>(s.slots) * s.chunk; }

struct FilePiece {
  size_t chunk = 0;
  uint64_t file_offset = 0;  // where the I/O starts in the file (aligned)
  size_t length = 0;         // bytes of the I/O (a multiple of align, except a buffered tail)
  size_t need = 0;           // bytes of it that must be there: a read that ends sooner failed
  size_t ring_offset = 0;    // where in the ring
};

struct FilePlan {
  std::vector<StagingChunk> chunks;  // offset/length: the bytes of the range (device side)
  std::vector<FilePiece> pieces;
};

// Cuts the file range [offset, offset + n) into chunks and pieces for `shape` (normalised).
FilePlan PlanFile(uint64_t offset, size_t n, const FileShape& shape);

// How a file transfer ended. kIo: a read or write failed with errno `err`; kShrunk: the file
// ended at `offset` before the range did (it shrank, or was shorter than it said); kTransport: the
// DMA engine failed (`transport`).
struct FileStatus {
  enum Kind { kOk, kIo, kShrunk, kTransport } kind = kOk;
  int err = 0;
  uint64_t offset = 0;  // the file offset of the failing I/O
  std::string call;     // "pread", "pwrite", or the transport's call
  TransportStatus transport;
  bool ok() const { return kind == kOk; }
};

// Reads `need` bytes (and up to `length`) at `offset` into buf, retrying after EINTR and after a
// partial read; a read of 0, or with align > 1 a count that is not a multiple of it (O_DIRECT's
// end of file), before `need` is the end of the file.
FileStatus ReadFully(FileIo& file, char* buf, size_t length, size_t need, uint64_t offset,
                     size_t align);
// Writes all of buf at offset, retrying after EINTR and a partial write (a write of 0 is EIO).
FileStatus WriteFully(FileIo& file, const char* buf, size_t n, uint64_t offset);

// Bytes done so far, for progress: a read counts a chunk once it is handed to the DMA engine,
// a write once it is in the file. May be null.
using FileProgress = std::atomic<uint64_t>;

// Reads the file range into the device behind `transport` (whose ring() has FileRingBytes(shape)
// bytes, aligned to shape.align) on `team`, or on the calling thread alone when the team has no
// started threads or is null. Returns when the data has arrived or after the first failure, with
// no transfer in flight either way.
FileStatus RunFileRead(CopyTeam* team, StagingTransport& transport, FileIo& file, uint64_t offset,
                       size_t n, const FileShape& shape, FileProgress* progress = nullptr);
// Writes n bytes from the device behind `transport` to the file at `offset` (align is not used:
// writes are buffered).
FileStatus RunFileWrite(CopyTeam* team, StagingTransport& transport, FileIo& file, uint64_t offset,
                        size_t n, const FileShape& shape, FileProgress* progress = nullptr);

// Memory the CPU can address (pinned, registered, managed or plain host memory) needs no ring:
// the team reads the range straight into `host`, or writes it straight from there, in pieces of
// `piece` bytes, so each byte is copied once (by the kernel) instead of twice. Buffered I/O only:
// O_DIRECT's whole blocks would run past the ends of `host`, so O_DIRECT reads take the ring.
// Failures as RunFileRead/RunFileWrite report them; progress counts each piece once done.
FileStatus ReadFileToHost(CopyTeam* team, FileIo& file, uint64_t offset, size_t n, char* host,
                          size_t piece, FileProgress* progress = nullptr);
FileStatus WriteFileFromHost(CopyTeam* team, FileIo& file, uint64_t offset, size_t n,
                             const char* host, size_t piece, FileProgress* progress = nullptr);

// Whether reads on a file system should bypass the page cache (O_DIRECT), from the read rates
// measured both ways on the same file, cold: direct when it reads at least as fast, within 5%.
// Buffered reads cost a copy from the page cache per byte and evict other data; O_DIRECT gains
// nothing where the cache is what makes the storage fast (network file systems, tmpfs refuses it).
bool PreferDirect(double direct_bytes_per_s, double buffered_bytes_per_s);

// Which pages of a file of `pages` pages to ask about when measuring how much of it is in the page
// cache (mincore over a mapping of each span): the whole file, in spans of at most `window_pages`,
// when it has at most `max_pages`; else max_pages / window_pages spans of window_pages spread
// evenly over it, an estimate whose time and memory do not grow with the file (a sparse file of
// terabytes would otherwise take a mincore byte per page and minutes).
struct PageSpan {
  uint64_t first = 0;  // in pages
  uint64_t count = 0;
};
std::vector<PageSpan> ResidencySpans(uint64_t pages, uint64_t max_pages, uint64_t window_pages);

// FileIo over a file descriptor (pread/pwrite); the descriptor stays the caller's.
class PosixFile : public FileIo {
 public:
  explicit PosixFile(int fd) : fd_(fd) {}
  long long Read(char* buf, size_t n, uint64_t offset) override;
  long long Write(const char* buf, size_t n, uint64_t offset) override;

 private:
  int fd_;
};

// A "DMA engine" that is the CPU: Issue copies between the ring and host memory at once (for a
// destination the CPU can address: pinned or managed memory), or with no host memory moves
// nothing (the storage's own rate, the file benchmark's baseline). Issue's direction: `to_host`
// copies ring -> host (a file read), else host -> ring (a file write).
class HostTransport : public StagingTransport {
 public:
  HostTransport(char* ring, char* host, bool file_read)
      : ring_(ring), host_(host), read_(file_read) {}
  char* ring() override { return ring_; }
  TransportStatus Issue(const StagingChunk& c) override;
  TransportStatus Wait(int) override { return {}; }
  TransportStatus Finish() override { return {}; }

 private:
  char* ring_;
  char* host_;
  bool read_;
};

}  // namespace cm::core
