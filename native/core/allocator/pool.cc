#include "core/allocator/pool.h"

#include <algorithm>
#include <cstdio>

namespace cm::core {

struct Pool::Chunk {
  uint64_t address = 0;
  size_t size = 0;
  size_t requested = 0;  // 0 while free
  bool in_use = false;
  Chunk* prev = nullptr;  // neighbours in address order within one region
  Chunk* next = nullptr;
  uint64_t region = 0;
  uint64_t id = 0;  // while recording
};

const char* ActionName(TraceAction action) {
  switch (action) {
    case TraceAction::kAlloc:
      return "alloc";
    case TraceAction::kFree:
      return "free";
    case TraceAction::kOom:
      return "oom";
    case TraceAction::kRegionAlloc:
      return "region_alloc";
    case TraceAction::kRegionFree:
      return "region_free";
    case TraceAction::kEmptyCache:
      return "empty_cache";
  }
  return "unknown";
}

void Pool::Record(TraceAction action, const Chunk* c, uint64_t requested, uint64_t size) {
  if (c)
    recorder_->Add(action, c->id, requested, size, c->region, c->address - c->region);
  else
    recorder_->Add(action, 0, requested, size, 0, 0);
}

uint64_t Pool::BlockId(const Chunk* block) { return block->id; }
uint64_t Pool::RegionOf(const Chunk* block) { return block->region; }

bool Pool::BySizeThenAddress::operator()(const Chunk* a, const Chunk* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  char out[64];
  if (bytes < 1024) {
    std::snprintf(out, sizeof out, "%llu bytes", static_cast<unsigned long long>(bytes));
    return out;
  }
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  std::snprintf(out, sizeof out, "%.2f %s", v, kUnits[unit]);
  return out;
}

std::string FormatSizeAsPyTorch(uint64_t bytes) {
  char out[64];
  if (bytes <= 1024)
    std::snprintf(out, sizeof out, "%llu bytes", static_cast<unsigned long long>(bytes));
  else if (bytes <= (1ull << 20))
    std::snprintf(out, sizeof out, "%.2f KiB", static_cast<double>(bytes) / 1024.0);
  else if (bytes <= (1ull << 30))
    std::snprintf(out, sizeof out, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  else
    std::snprintf(out, sizeof out, "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  return out;
}

std::string OomInfo::Message() const {
  // PyTorch's sentence first, its sizes written as PyTorch writes them, so that what services
  // grep logs for matches here too; then what this library knows besides, in its own units: the
  // limit and where it came from, the pool's free blocks.
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", fragmentation * 100);
  uint64_t reserved_free = pool_bytes > bytes_in_use ? pool_bytes - bytes_in_use : 0;
  std::string m = "CUDA out of memory. Tried to allocate " + FormatSizeAsPyTorch(requested) + ". " +
                  (simulated ? "Simulated GPU " : "GPU ") + std::to_string(device) +
                  " has a total capacity of " + FormatSizeAsPyTorch(device_total) + " of which " +
                  FormatSizeAsPyTorch(device_free) + " is free. Of the allocated memory " +
                  FormatSizeAsPyTorch(bytes_in_use) + " is allocated by this allocator, and " +
                  FormatSizeAsPyTorch(reserved_free) + " is reserved by it but unallocated.";
  m += " The allocator's limit is " + FormatBytes(limit) + " (" + limit_source + ")";
  if (rounded != requested) m += "; the request rounds to " + FormatBytes(rounded);
  if (alignment > kMinBlock) m += ", aligned to " + FormatBytes(alignment);
  m += "; the pool holds " + FormatBytes(pool_bytes) + ", whose largest free block is " +
       FormatBytes(largest_free_block) + " (fragmentation " + frag + ").";
  if (!group_sentence.empty())
    m += " " + group_sentence +
         " Other members must free memory or empty their caches (their pools count against the"
         " group), or the group needs a larger budget.";
  else if (bytes_in_use <= limit && rounded <= limit - bytes_in_use)
    m += " The limit would allow it: free memory on the device or fragmentation stopped it;"
         " emptyCache() or freeing buffers may help.";
  else
    m += " Free buffers you no longer need, or raise memoryFraction/memoryLimit.";
  return m;
}

void PoolCounters::ResetPeak() {
  for (Counter* c : {&allocated_bytes, &requested_bytes, &allocations, &reserved_bytes, &segments})
    c->ResetPeak();
}

void PoolCounters::ResetAccumulated() {
  for (Counter* c : {&allocated_bytes, &requested_bytes, &allocations, &reserved_bytes, &segments})
    c->ResetAccumulated();
  num_ooms = num_alloc_retries = gc_released_bytes = 0;
}

void PoolStats::FromCounters() {
  bytes_in_use = counters.allocated_bytes.current;
  peak_bytes_in_use = counters.allocated_bytes.peak;
  requested_bytes_in_use = counters.requested_bytes.current;
  pool_bytes = counters.reserved_bytes.current;
  peak_pool_bytes = counters.reserved_bytes.peak;
  num_allocs = counters.allocations.allocated;
  num_frees = counters.allocations.freed;
  num_ooms = counters.num_ooms;
  largest_alloc_size = counters.largest_alloc_size;
  regions = counters.segments.current;
  num_region_allocs = counters.segments.allocated;
  gc_released_bytes = counters.gc_released_bytes;
}

Pool::Pool(Upstream* upstream, PoolOptions options)
    : upstream_(upstream), options_(std::move(options)) {
  spare_nodes_.reserve(kSpareNodes);
  // The limit arrives in whole blocks (ResolveLimit rounds it and says so in the source).
  options_.limit = options_.limit / kMinBlock * kMinBlock;
  // TensorFlow starts growth at min(limit, 2 MiB); without growth the first region is the limit.
  next_region_size_ = options_.allow_growth
                          ? RoundBytes(std::min<uint64_t>(options_.limit, kFirstGrowthRegion))
                          : options_.limit;
  next_region_size_ = std::max(next_region_size_, kMinBlock);
  if (options_.expandable) {
    options_.allow_growth = true;
    granule_ = upstream_->Granularity();
    if (granule_ == 0 || granule_ % kMinBlock)
      throw UpstreamError{{UpstreamStatus::kError, 801, "granularity"}};
    uint64_t range = std::max<uint64_t>(upstream_->GetMemInfo().total, options_.limit);
    range = (range + granule_ - 1) / granule_ * granule_;
    UpstreamStatus st = upstream_->Reserve(range, &seg_base_);
    if (st.kind != UpstreamStatus::kOk) throw UpstreamError{st};
    seg_reserved_ = range;
    if (options_.initial_bytes > 0 && !GrowSegment(options_.initial_bytes)) {
      upstream_->Unreserve(seg_base_, seg_reserved_);
      seg_reserved_ = 0;
      OomInfo oom;
      FillOom(options_.initial_bytes, options_.initial_bytes, &oom);
      throw oom;
    }
    return;
  }
  uint64_t first = options_.allow_growth ? options_.initial_bytes : options_.limit;
  if (first > 0 && !AddRegion(first, first)) {
    OomInfo oom;
    FillOom(first, first, &oom);
    throw oom;
  }
}

Pool::~Pool() {
  ReleaseAll();
  if (seg_reserved_) upstream_->Unreserve(seg_base_, seg_reserved_);
  for (Chunk* c : spare_) delete c;
}

int Pool::BinFor(size_t size) {
  // floor(log2(size / kMinBlock)), the last bin holding everything above it.
  uint64_t units = size / kMinBlock;
  if (units <= 1) return 0;
  return std::min(63 - __builtin_clzll(units), kNumBins - 1);
}

Pool::Chunk* Pool::NewChunk() {
  if (spare_.empty()) return new Chunk();
  Chunk* c = spare_.back();
  spare_.pop_back();
  *c = Chunk();
  return c;
}

void Pool::DeleteChunk(Chunk* c) { spare_.push_back(c); }

void Pool::InsertFree(Chunk* c) {
  int b = BinFor(c->size);
  if (spare_nodes_.empty()) {
    bins_[b].insert(c);
  } else {
    Bin::node_type node = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    node.value() = c;
    bins_[b].insert(std::move(node));
  }
  nonempty_bins_ |= 1u << b;
}

void Pool::RemoveFree(Chunk* c) {
  int b = BinFor(c->size);
  Bin::node_type node = bins_[b].extract(c);
  if (node && spare_nodes_.size() < spare_nodes_.capacity())
    spare_nodes_.push_back(std::move(node));
  if (bins_[b].empty()) nonempty_bins_ &= ~(1u << b);
}

Pool::Chunk* Pool::FindFree(size_t rounded) {
  // Bins are ordered by size, and each bin by (size, address): the first fit found walking up
  // from the request's bin is the best fit, lowest address first among equals.
  Chunk probe;
  probe.size = rounded;
  probe.address = 0;
  // Only bins with free chunks are looked at, lowest first.
  for (uint32_t left = nonempty_bins_ & (~0u << BinFor(rounded)); left; left &= left - 1) {
    int b = __builtin_ctz(left);
    auto it = bins_[b].lower_bound(&probe);
    if (it != bins_[b].end()) return *it;
  }
  return nullptr;
}

size_t BackoffStep(size_t bytes, size_t rounded) {
  // 0.9x rounded up to a block can give back the same size (any size up to 2,304 bytes does):
  // each step takes at least one block off, so the loop ends, and the last try is the request
  // itself. TensorFlow's BFC test ExtendTerminatesWhenSubAllocatorAlwaysFails covers the same.
  size_t next = std::min(RoundBytes(static_cast<size_t>(bytes * 0.9)), bytes - kMinBlock);
  return std::max(next, rounded);
}

bool Pool::Extend(size_t rounded) {
  if (options_.expandable) return GrowSegment(rounded);
  // The growth rule of TensorFlow's BFCAllocator::Extend.
  uint64_t held = counters_.reserved_bytes.current;
  uint64_t available = held < options_.limit ? (options_.limit - held) / kMinBlock * kMinBlock : 0;
  if (rounded > available) return false;
  bool increased = false;
  while (rounded > next_region_size_) {
    next_region_size_ *= 2;
    increased = true;
  }
  size_t bytes = std::min<uint64_t>(next_region_size_, available);
  if (!AddRegion(bytes, rounded)) return false;
  // Doubling stops once the step reaches the limit: regions are cut to the limit anyway, and an
  // unbounded step would overflow after enough release-and-regrow cycles.
  if (!increased && next_region_size_ < options_.limit) next_region_size_ *= 2;
  return true;
}

bool Pool::AddRegion(size_t bytes, size_t at_least) {
  uint64_t address = 0;
  UpstreamStatus st = upstream_->Allocate(bytes, &address);
  // Back off in 0.9x steps when the device cannot give the full region, never below the request.
  while (st.kind == UpstreamStatus::kOutOfMemory && bytes > at_least) {
    bytes = BackoffStep(bytes, at_least);
    st = upstream_->Allocate(bytes, &address);
  }
  if (st.kind == UpstreamStatus::kError) throw UpstreamError{st};
  if (st.kind != UpstreamStatus::kOk) return false;
  Chunk* c = NewChunk();
  c->address = address;
  c->size = bytes;
  c->region = address;
  c->id = 0;
  regions_[address] = Region{address, bytes, c};
  counters_.reserved_bytes.Add(bytes);
  counters_.segments.Add(1);
  if (recorder_) recorder_->Add(TraceAction::kRegionAlloc, 0, bytes, bytes, address, 0);
  InsertFree(c);
  return true;
}

Pool::Chunk* Pool::SegmentTail() const {
  auto it = regions_.find(seg_base_);
  if (it == regions_.end()) return nullptr;
  Chunk* c = it->second.first;
  while (c->next) c = c->next;
  return c;
}

bool Pool::GrowSegment(size_t rounded) {
  Chunk* tail = SegmentTail();
  uint64_t tail_free = tail && !tail->in_use ? tail->size : 0;
  uint64_t need = rounded > tail_free ? rounded - tail_free : granule_;
  uint64_t bytes = (need + granule_ - 1) / granule_ * granule_;
  uint64_t held = counters_.reserved_bytes.current;
  if (bytes > seg_reserved_ - seg_mapped_ || held > options_.limit || bytes > options_.limit - held)
    return false;
  uint64_t at = seg_base_ + seg_mapped_;
  UpstreamStatus st = upstream_->Map(at, bytes);
  if (st.kind == UpstreamStatus::kError) throw UpstreamError{st};
  if (st.kind != UpstreamStatus::kOk) return false;
  if (!tail) {
    Chunk* c = NewChunk();
    c->address = seg_base_;
    c->size = bytes;
    c->region = seg_base_;
    regions_[seg_base_] = Region{seg_base_, bytes, c};
    counters_.segments.Add(1);
    InsertFree(c);
  } else if (!tail->in_use) {
    RemoveFree(tail);
    tail->size += bytes;
    InsertFree(tail);
    regions_[seg_base_].size += bytes;
  } else {
    Chunk* c = NewChunk();
    c->address = at;
    c->size = bytes;
    c->region = seg_base_;
    c->prev = tail;
    tail->next = c;
    regions_[seg_base_].size += bytes;
    InsertFree(c);
  }
  seg_mapped_ += bytes;
  counters_.reserved_bytes.Add(bytes);
  if (recorder_)
    recorder_->Add(TraceAction::kRegionAlloc, 0, bytes, bytes, seg_base_, at - seg_base_);
  return true;
}

uint64_t Pool::ShrinkSegment() noexcept {
  Chunk* tail = SegmentTail();
  if (!tail || tail->in_use) return 0;
  uint64_t from = (tail->address - seg_base_ + granule_ - 1) / granule_ * granule_;
  if (from >= seg_mapped_) return 0;
  uint64_t bytes = seg_mapped_ - from;
  upstream_->Unmap(seg_base_ + from, bytes);
  if (recorder_) recorder_->Add(TraceAction::kRegionFree, 0, bytes, bytes, seg_base_, from);
  RemoveFree(tail);
  if (tail->address == seg_base_ + from) {
    if (tail->prev) {
      tail->prev->next = nullptr;
      regions_[seg_base_].size -= bytes;
    } else {
      regions_.erase(seg_base_);
      counters_.segments.Sub(1);
    }
    DeleteChunk(tail);
  } else {
    tail->size -= bytes;
    regions_[seg_base_].size -= bytes;
    InsertFree(tail);
  }
  seg_mapped_ = from;
  counters_.reserved_bytes.Sub(bytes);
  return bytes;
}

uint64_t Pool::ReleaseFreeRegions() noexcept {
  if (options_.expandable) return ShrinkSegment();
  uint64_t released = 0;
  for (auto it = regions_.begin(); it != regions_.end();) {
    Chunk* c = it->second.first;
    if (!c->in_use && c->next == nullptr && c->size == it->second.size) {
      RemoveFree(c);
      upstream_->Deallocate(it->second.address, it->second.size);
      if (recorder_)
        recorder_->Add(TraceAction::kRegionFree, 0, it->second.size, it->second.size,
                       it->second.address, 0);
      released += it->second.size;
      counters_.reserved_bytes.Sub(it->second.size);
      counters_.segments.Sub(1);
      DeleteChunk(c);
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

uint64_t Pool::CollectFor(size_t rounded) noexcept {
  // One segment grows by its free end already: giving that end back cannot make room.
  if (options_.expandable) return 0;
  uint64_t free_regions = 0;
  for (const auto& [address, region] : regions_) {
    const Chunk* c = region.first;
    if (!c->in_use && c->next == nullptr) free_regions += region.size;
  }
  if (free_regions == 0) return 0;
  // TensorFlow's estimate: after giving them back, would the limit leave room for the request?
  // If not, the regions stay (they serve later, smaller requests) and the request fails.
  uint64_t kept = counters_.reserved_bytes.current - free_regions;
  if (kept >= options_.limit || rounded > options_.limit - kept) return 0;
  return ReleaseFreeRegions();
}

uint64_t Pool::Address(const Chunk* block) { return block->address; }
size_t Pool::BlockSize(const Chunk* block) { return block->size; }

Pool::Chunk* Pool::FindFreeAligned(size_t rounded, size_t alignment) {
  Chunk probe;
  probe.size = rounded;
  probe.address = 0;
  for (uint32_t left = nonempty_bins_ & (~0u << BinFor(rounded)); left; left &= left - 1) {
    int b = __builtin_ctz(left);
    for (auto it = bins_[b].lower_bound(&probe); it != bins_[b].end(); ++it) {
      Chunk* c = *it;
      uint64_t pad = (alignment - c->address % alignment) % alignment;
      if (c->size >= pad && c->size - pad >= rounded) return c;
    }
  }
  return nullptr;
}

Pool::Chunk* Pool::Allocate(size_t bytes, OomInfo* oom, size_t alignment) {
  size_t rounded = RoundBytes(bytes);
  bool aligned = alignment > kMinBlock;
  // A region large enough for the block wherever its start falls.
  size_t need = rounded;
  if (aligned)
    need = rounded && rounded <= SIZE_MAX - alignment ? rounded + alignment - kMinBlock : 0;
  auto find = [&]() { return aligned ? FindFreeAligned(rounded, alignment) : FindFree(rounded); };
  Chunk* c = need ? find() : nullptr;
  if (!c && need) {
    if (Extend(need)) {
      c = find();
    } else if (options_.garbage_collection) {
      uint64_t released = CollectFor(need);
      if (released > 0) {
        counters_.gc_released_bytes += released;
        ++counters_.num_alloc_retries;
        if (Extend(need)) c = find();
      }
    }
  }
  if (!c) {
    ++counters_.num_ooms;
    if (recorder_) Record(TraceAction::kOom, nullptr, bytes, rounded);
    FillOom(bytes, rounded, oom, alignment);
    return nullptr;
  }
  RemoveFree(c);
  if (aligned && c->address % alignment) {
    // The start moves up to the alignment; what is skipped stays a free block of its own.
    uint64_t pad = alignment - c->address % alignment;
    Chunk* front = NewChunk();
    front->address = c->address;
    front->size = pad;
    front->region = c->region;
    front->prev = c->prev;
    front->next = c;
    if (c->prev)
      c->prev->next = front;
    else
      regions_[c->region].first = front;
    c->prev = front;
    c->address += pad;
    c->size -= pad;
    InsertFree(front);
  }
  if (c->size >= rounded * 2 || c->size - rounded >= kMaxInternalFragmentation ||
      (options_.expandable && c->size - rounded >= kExpandableSplit)) {
    Chunk* rest = NewChunk();
    rest->address = c->address + rounded;
    rest->size = c->size - rounded;
    rest->region = c->region;
    rest->id = 0;
    rest->prev = c;
    rest->next = c->next;
    if (c->next) c->next->prev = rest;
    c->next = rest;
    c->size = rounded;
    InsertFree(rest);
  }
  c->in_use = true;
  c->requested = bytes;
  counters_.allocations.Add(1);
  counters_.allocated_bytes.Add(c->size);
  counters_.requested_bytes.Add(bytes);
  if (c->size > counters_.largest_alloc_size) counters_.largest_alloc_size = c->size;
  if (recorder_) {
    c->id = ++next_id_;
    Record(TraceAction::kAlloc, c, bytes, c->size);
  } else {
    c->id = 0;
  }
  return c;
}

void Pool::Free(Chunk* c) noexcept {
  if (recorder_ && c->id) Record(TraceAction::kFree, c, c->requested, c->size);
  c->id = 0;
  counters_.allocations.Sub(1);
  counters_.allocated_bytes.Sub(c->size);
  counters_.requested_bytes.Sub(c->requested);
  c->in_use = false;
  c->requested = 0;
  if (c->next && !c->next->in_use) {
    Chunk* n = c->next;
    RemoveFree(n);
    c->size += n->size;
    c->next = n->next;
    if (n->next) n->next->prev = c;
    DeleteChunk(n);
  }
  if (c->prev && !c->prev->in_use) {
    Chunk* p = c->prev;
    RemoveFree(p);
    p->size += c->size;
    p->next = c->next;
    if (c->next) c->next->prev = p;
    DeleteChunk(c);
    c = p;
  }
  InsertFree(c);
}

uint64_t Pool::EmptyCache() noexcept {
  uint64_t released = ReleaseFreeRegions();
  if (recorder_) recorder_->Add(TraceAction::kEmptyCache, 0, 0, released, 0, 0);
  return released;
}

void Pool::ReleaseAll() noexcept {
  for (auto& [address, region] : regions_) {
    for (Chunk* c = region.first; c;) {
      Chunk* n = c->next;
      DeleteChunk(c);
      c = n;
    }
    if (options_.expandable)
      upstream_->Unmap(address, region.size);
    else
      upstream_->Deallocate(address, region.size);
    if (recorder_)
      recorder_->Add(TraceAction::kRegionFree, 0, region.size, region.size, address, 0);
  }
  // Everything goes back at once: the live blocks count as freed, the regions as released.
  counters_.reserved_bytes.Sub(counters_.reserved_bytes.current);
  counters_.segments.Sub(counters_.segments.current);
  counters_.allocations.Sub(counters_.allocations.current);
  counters_.allocated_bytes.Sub(counters_.allocated_bytes.current);
  counters_.requested_bytes.Sub(counters_.requested_bytes.current);
  regions_.clear();
  seg_mapped_ = 0;
  for (auto& bin : bins_) bin.clear();
  nonempty_bins_ = 0;
}

uint64_t Pool::LargestFreeBlock() const {
  for (int b = kNumBins - 1; b >= 0; --b)
    if (!bins_[b].empty()) return (*bins_[b].rbegin())->size;
  return 0;
}

PoolStats Pool::Stats() const {
  PoolStats s;
  s.counters = counters_;
  s.FromCounters();
  s.bytes_limit = options_.limit;
  s.largest_free_block = LargestFreeBlock();
  s.regions = regions_.size();
  uint64_t free_bytes = s.pool_bytes - s.bytes_in_use;
  s.fragmentation = free_bytes ? 1.0 - static_cast<double>(s.largest_free_block) / free_bytes : 0.0;
  return s;
}

void Pool::ResetPeakStats() { counters_.ResetPeak(); }

void Pool::ResetAccumulatedStats() { counters_.ResetAccumulated(); }

void Pool::SetLimit(uint64_t limit, std::string source) {
  options_.limit = limit / kMinBlock * kMinBlock;
  options_.limit_source = std::move(source);
}

std::vector<BlockInfo> Pool::Blocks(uint64_t address) const {
  std::vector<BlockInfo> out;
  auto it = regions_.find(address);
  if (it == regions_.end()) return out;
  for (const Chunk* c = it->second.first; c; c = c->next)
    out.push_back(BlockInfo{c->address - address, c->size, c->requested, c->id, c->in_use});
  return out;
}

std::vector<RegionInfo> Pool::Regions() const {
  std::vector<RegionInfo> out;
  for (const auto& [address, region] : regions_) {
    RegionInfo info{address, region.size, 0, 0};
    for (const Chunk* c = region.first; c; c = c->next) {
      info.chunks++;
      if (c->in_use) info.bytes_in_use += c->size;
    }
    out.push_back(info);
  }
  return out;
}

void Pool::FillOom(size_t bytes, size_t rounded, OomInfo* oom, size_t alignment) {
  if (!oom) return;
  oom->alignment = alignment;
  PoolStats s = Stats();
  MemInfo mi = upstream_->GetMemInfo();
  oom->requested = bytes;
  oom->rounded = rounded;
  oom->device = upstream_->device();
  oom->limit = options_.limit;
  oom->limit_source = options_.limit_source;
  oom->bytes_in_use = s.bytes_in_use;
  oom->pool_bytes = s.pool_bytes;
  oom->largest_free_block = s.largest_free_block;
  oom->fragmentation = s.fragmentation;
  oom->device_free = mi.free;
  oom->device_total = mi.total;
  oom->simulated = upstream_->simulated();
}

}  // namespace cm::core
