// A best-fit, coalescing pool over regions taken from an Upstream: the memory policy of
// TensorFlow's BFC allocator (preallocation, allow_growth, a byte limit, garbage collection of
// free regions), with statistics named after PyTorch's. See DESIGN.md, "Allocation policies".
//
// Not thread-safe: one pool belongs to one JavaScript environment and is used from its thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/allocator/trace.h"
#include "core/allocator/upstream.h"

namespace cm::core {

constexpr size_t kMinBlock = 256;  // every request rounds up to this, as cudaMalloc aligns
constexpr size_t kFirstGrowthRegion = 2u << 20;
// TensorFlow splits a free chunk only when it is at least twice the request or the remainder
// is at least this much; below that the whole chunk is handed out (bfc_allocator.cc,
// max_internal_fragmentation_bytes).
constexpr size_t kMaxInternalFragmentation = 128u << 20;
constexpr int kNumBins = 21;
// In an expandable segment a block's free remainder of at least this much is split off too
// (PyTorch's rule for large blocks), since mapped memory at the end would otherwise be handed
// out whole with a request that does not need it.
constexpr size_t kExpandableSplit = 1u << 20;

// Rounds up to kMinBlock; returns 0 when that would overflow.
inline size_t RoundBytes(size_t n) {
  if (n > SIZE_MAX - (kMinBlock - 1)) return 0;
  return (n + kMinBlock - 1) / kMinBlock * kMinBlock;
}

// The next region size to try after the upstream refused `bytes`: 0.9x, rounded to a block, at
// least one block smaller, and never below `rounded` (the request). Starting from any size above
// the request, repeated steps reach the request in a bounded number of tries.
size_t BackoffStep(size_t bytes, size_t rounded);

// The largest per-allocation alignment a pool accepts (a power of two; 256 and below cost nothing,
// as every block is 256-aligned).
constexpr size_t kMaxAlignment = size_t{1} << 30;

struct PoolOptions {
  uint64_t limit = 0;              // bytes the pool may take from the upstream, in all
  std::string limit_source;        // how the limit was chosen, for messages
  bool allow_growth = false;       // false: the whole limit is taken at creation
  bool garbage_collection = true;  // release free regions before reporting out of memory
  // With allow_growth: a first region of exactly this many bytes (a multiple of kMinBlock, at
  // most the limit) is taken at creation, RMM's initial_pool_size; growth past it follows the
  // usual rule. 0: none.
  uint64_t initial_bytes = 0;
  // Expandable segments (PyTorch's expandable_segments, TensorFlow's GpuVirtualMemAllocator): one
  // address range is reserved (the device's total memory, or the limit if larger) and memory is
  // mapped at its end in the upstream's granules as the pool grows, so that the pool is one
  // segment and free neighbours coalesce across what would have been region boundaries. The
  // free end is unmapped by EmptyCache. Implies growth; the upstream must have Granularity().
  bool expandable = false;
};

// One statistic as RMM and PyTorch keep it: the value now, its high-water mark since the last
// peak reset, and what was added (RMM's total, PyTorch's allocated) and taken away (freed) since
// the last reset of the accumulated figures.
struct Counter {
  uint64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void Add(uint64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void Sub(uint64_t n) {
    current -= n;
    freed += n;
  }
  // Takes back an Add that did not become real (neither a free nor a new total); the peak stays.
  void Cancel(uint64_t n) {
    current -= n;
    allocated -= n;
  }
  void ResetPeak() { peak = current; }
  void ResetAccumulated() { allocated = freed = 0; }
};

// What the pool has done, in PyTorch's terms (memory_stats()):
struct PoolCounters {
  Counter allocated_bytes;  // blocks handed out (requests rounded, or whole unsplit chunks)
  Counter requested_bytes;  // what the callers asked for
  Counter allocations;      // live blocks (a count)
  Counter reserved_bytes;   // memory held from the upstream
  Counter segments;         // regions held (a count)
  uint64_t num_ooms = 0;
  uint64_t num_alloc_retries = 0;  // garbage collection released regions and the pool retried
  uint64_t gc_released_bytes = 0;  // given back by garbage collection before an allocation
  uint64_t largest_alloc_size = 0;
  void ResetPeak();
  void ResetAccumulated();
};

struct PoolStats {
  PoolCounters counters;
  // The figures above under the names the library has always reported.
  uint64_t bytes_in_use = 0, peak_bytes_in_use = 0, requested_bytes_in_use = 0;
  uint64_t pool_bytes = 0, peak_pool_bytes = 0, bytes_limit = 0;
  uint64_t num_allocs = 0, num_frees = 0, num_ooms = 0;
  uint64_t largest_alloc_size = 0, largest_free_block = 0;
  uint64_t regions = 0;
  double fragmentation = 0;        // 1 - largest free block / free bytes in the pool
  uint64_t num_region_allocs = 0;  // regions taken from the upstream (cudaMalloc calls)
  uint64_t gc_released_bytes = 0;  // given back by garbage collection before an allocation
  // Fills the named figures from `counters`.
  void FromCounters();
};

// One block of a region, for snapshots.
struct BlockInfo {
  uint64_t offset, size, requested, id;
  bool in_use;
};

struct RegionInfo {
  uint64_t address, size, bytes_in_use;
  uint32_t chunks;
};

// Everything an out-of-memory report says (PyTorch-style), as data and as a sentence.
struct OomInfo {
  uint64_t requested = 0, rounded = 0;
  int device = 0;
  uint64_t limit = 0;
  std::string limit_source;
  uint64_t bytes_in_use = 0, pool_bytes = 0, largest_free_block = 0;
  uint64_t alignment = 0;  // when a request asked for more than the 256 every block has
  double fragmentation = 0;
  uint64_t device_free = 0, device_total = 0;
  bool simulated = false;
  // Set when a group budget (GroupUpstream) refused the region: GroupRefusal::Sentence().
  std::string group_sentence;
  std::string Message() const;
};

// Formats bytes with binary units ("1.50 GiB"), as every user-facing size is printed.
std::string FormatBytes(uint64_t bytes);
// Formats bytes as PyTorch's out-of-memory sentence does (format_size in its CUDA caching
// allocator): bytes up to 1024, then KiB up to 1 MiB, MiB up to 1 GiB, each boundary included,
// and GiB above, never TiB; two decimals. 1 GiB reads "1024.00 MiB".
std::string FormatSizeAsPyTorch(uint64_t bytes);

// A failure of the upstream that is not out of memory (a CUDA error, say): the pool's state is
// unchanged when it is thrown.
struct UpstreamError {
  UpstreamStatus status;
};

class Pool {
 public:
  struct Chunk;
  // Takes the whole limit at once when growth is off; throws OomInfo if that fails.
  Pool(Upstream* upstream, PoolOptions options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Returns the block, or nullptr with *oom filled when the request cannot be met within the
  // limit; the pool is then unchanged apart from num_ooms and released free regions.
  // `bytes` must be at least 1; `alignment` a power of two up to kMaxAlignment (the block's
  // address is a multiple of it). The block stays valid until Free or ReleaseAll.
  Chunk* Allocate(size_t bytes, OomInfo* oom, size_t alignment = kMinBlock);
  // Returns a block. The caller hands each block back once (the bindings guarantee it).
  void Free(Chunk* block) noexcept;
  static uint64_t Address(const Chunk* block);
  // Size handed out (the rounded request or, unsplit, the whole chunk).
  static size_t BlockSize(const Chunk* block);

  uint64_t EmptyCache() noexcept;  // releases every wholly free region; returns bytes released
  // Expandable segments: the granule, and the reserved range (0 for a pool of regions).
  uint64_t granularity() const { return granule_; }
  uint64_t reserved_range() const { return seg_reserved_; }
  void ReleaseAll() noexcept;  // returns every region, live blocks included (forced close)

  PoolStats Stats() const;
  void ResetPeakStats();         // every peak to its current value
  void ResetAccumulatedStats();  // allocated/freed totals, OOMs, retries, gc bytes to 0
  // A new limit for a live pool (setMemoryFraction): later regions are charged against it.
  // Lowering it below what the pool holds frees nothing; the pool takes no new region until it
  // holds less than the limit again, and its free blocks are still handed out.
  void SetLimit(uint64_t limit, std::string source);
  std::vector<RegionInfo> Regions() const;
  // The blocks of the region at `address`, in address order.
  std::vector<BlockInfo> Blocks(uint64_t address) const;
  // Recording: every event from now on goes to `recorder` (null stops it); blocks allocated
  // while recording get ids, counted from 1 for the pool's lifetime.
  void SetRecorder(Recorder* recorder) { recorder_ = recorder; }
  // The id of the block (0 if it was allocated while not recording).
  static uint64_t BlockId(const Chunk* block);
  uint64_t live_blocks() const { return counters_.allocations.current; }
  uint64_t bytes_in_use() const { return counters_.allocated_bytes.current; }
  // The address of the region the block was carved from.
  static uint64_t RegionOf(const Chunk* block);
  const PoolOptions& options() const { return options_; }
  Upstream* upstream() const { return upstream_; }

 private:
  struct Region {
    uint64_t address;
    size_t size;
    Chunk* first;
  };
  struct BySizeThenAddress {
    bool operator()(const Chunk* a, const Chunk* b) const;
  };

  static int BinFor(size_t size);
  Chunk* FindFree(size_t rounded);
  // The best fit whose address can be raised to a multiple of `alignment` (above kMinBlock).
  Chunk* FindFreeAligned(size_t rounded, size_t alignment);
  bool Extend(size_t rounded);
  // Takes one region of `bytes` from the upstream, backing off to no less than `at_least`.
  bool AddRegion(size_t bytes, size_t at_least);
  // TensorFlow's DeallocateFreeRegions: wholly free regions go back only when that can make
  // room for `rounded` under the limit. Returns the bytes released.
  uint64_t CollectFor(size_t rounded) noexcept;
  // Expandable segments: maps granules at the end of the segment until its free end holds
  // `rounded` bytes; unmaps the whole granules of the free end. Both keep the segment one region.
  bool GrowSegment(size_t rounded);
  uint64_t ShrinkSegment() noexcept;
  Chunk* SegmentTail() const;
  uint64_t ReleaseFreeRegions() noexcept;
  void InsertFree(Chunk* c);
  void RemoveFree(Chunk* c);
  Chunk* NewChunk();
  void DeleteChunk(Chunk* c);
  uint64_t LargestFreeBlock() const;
  void FillOom(size_t bytes, size_t rounded, OomInfo* oom, size_t alignment = kMinBlock);

  Upstream* upstream_;
  PoolOptions options_;
  size_t next_region_size_;
  std::map<uint64_t, Region> regions_;
  using Bin = std::set<Chunk*, BySizeThenAddress>;
  std::array<Bin, kNumBins> bins_;
  uint32_t nonempty_bins_ = 0;  // bit b set when bins_[b] holds a chunk
  static_assert(kNumBins <= 32, "nonempty_bins_ has a bit per bin");
  // Tree nodes taken out of the bins, reused by the next insert into any bin: an alloc+free pair
  // that splits a chunk and merges it back moves chunks between bins four times, and a heap
  // allocation or free for each was a fifth of a pooled pair from JavaScript. At most
  // kSpareNodes are kept; the vector's room is reserved up front, so RemoveFree never allocates.
  static constexpr size_t kSpareNodes = 64;
  std::vector<Bin::node_type> spare_nodes_;
  std::vector<Chunk*> spare_;
  PoolCounters counters_;
  uint64_t granule_ = 0, seg_base_ = 0, seg_reserved_ = 0, seg_mapped_ = 0;
  Recorder* recorder_ = nullptr;
  uint64_t next_id_ = 0;
  void Record(TraceAction action, const Chunk* c, uint64_t requested, uint64_t size);
};

}  // namespace cm::core
