// Graph memory nodes (cudaMallocAsync captured into a graph, cuGraphAddMemAllocNode): their memory
// comes from the device's graph reserve, which grows at a graph's upload or first launch and stays
// until cudaDeviceGraphMemTrim, however many graphs are destroyed meanwhile (an H200 showed a
// 256 MiB node reserved from upload to trim). The group's device's reserve is charged as the driver
// reports it (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), and before a graph's first launch (or its
// first since a trim) the most that launch can add, the footprints of its memory nodes on the
// group's device, is charged first: a launch the budget cannot afford returns
// CUDA_ERROR_OUT_OF_MEMORY before anything runs. A graph instantiated where the interposer did not
// see it is charged after its launch; what the budget cannot afford then fails open (said and
// recorded), as memory already in use cannot be refused.
#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/footprint.h"
#include "core/allocator/pool.h"  // FormatBytes
#include "core/allocator/reserve_charge.h"

using namespace cm::preload;

namespace {

struct Exec {
  uint64_t bound = 0;     // the most a launch can add to the group's device's graph reserve
  bool resident = false;  // launched or uploaded since the last trim: its memory is reserved
};

std::mutex g_mutex;
cm::core::ReserveCharge& g_reserve = *new cm::core::ReserveCharge;
uint64_t g_uncharged = 0;  // taken uncharged while failing open (given back first)
uint64_t g_traced = 0;
auto& g_execs = *new std::unordered_map<CUgraphExec, Exec>;

// The group's device as an ordinal: the first whose uuid is the group's (-1: none, or the driver
// cannot say yet).
CUdevice GroupOrdinal() {
  static std::atomic<int> cached{-2};
  int c = cached.load(std::memory_order_relaxed);
  if (c != -2) return c;
  int count = 0;
  if (Call<kDeviceGetCount>(&count) != kCudaSuccess) return -1;
  for (CUdevice d = 0; d < count; ++d) {
    if (!Tracked(d)) continue;
    cached.store(d, std::memory_order_relaxed);
    return d;
  }
  return -1;
}

// With g_mutex held: every take is a quiet try (nothing waits with the lock held), its verdict
// kept in *verdict where given.
cm::core::ReserveOps Ops(const char* api, Member::Verdict* verdict = nullptr) {
  cm::core::ReserveOps ops;
  ops.take = [api, verdict](uint64_t n) {
    Member::Verdict v = Member::Get().Take(n, api, GroupDevice(), nullptr, /*quiet=*/true);
    if (verdict) *verdict = v;
    if (v == Member::Verdict::kRefused || v == Member::Verdict::kNoRoom) return false;
    if (v == Member::Verdict::kUncharged) g_uncharged += n;
    return true;
  };
  ops.give = [](uint64_t n) {
    uint64_t free_ = std::min(n, g_uncharged);
    g_uncharged -= free_;
    if (n > free_) Member::Get().Give(n - free_);
  };
  ops.reserved = [](uint64_t* r) {
    CUdevice dev = GroupOrdinal();
    uint64_t v = 0;
    if (dev < 0 ||
        Call<kDeviceGetGraphMemAttribute>(dev, kGraphMemAttrReservedMemCurrent, &v) != kCudaSuccess)
      return false;
    *r = v;
    return true;
  };
  return ops;
}

void Trace() {
  if (g_reserve.charged() == g_traced) return;
  uint64_t id = static_cast<uint64_t>(GroupOrdinal());
  if (g_traced) Recorder::Get().Free("graph device", id, g_traced);
  if (g_reserve.charged()) Recorder::Get().Alloc("graph device", id, g_reserve.charged());
  g_traced = g_reserve.charged();
}

// The footprints of the memory nodes of `graph` (and of its child graphs) on the group's device.
uint64_t MemoryNodes(CUgraph graph, int depth) {
  size_t n = 0;
  if (depth > 16 ||
      Call<kGraphGetNodes>(graph, static_cast<CUgraphNode*>(nullptr), &n) != kCudaSuccess || !n)
    return 0;
  std::vector<CUgraphNode> nodes;
  try {
    nodes.resize(n);
  } catch (...) {
    return 0;
  }
  if (Call<kGraphGetNodes>(graph, nodes.data(), &n) != kCudaSuccess) return 0;
  uint64_t sum = 0;
  for (size_t i = 0; i < n && i < nodes.size(); ++i) {
    int type = -1;
    if (Call<kGraphNodeGetType>(nodes[i], &type) != kCudaSuccess) continue;
    if (type == kGraphNodeTypeMemAlloc) {
      CUDA_MEM_ALLOC_NODE_PARAMS p = {};
      if (Call<kGraphMemAllocNodeGetParams>(nodes[i], &p) != kCudaSuccess) continue;
      const CUmemLocation& at = p.poolProps.location;
      if (at.type != kMemLocationTypeDevice || !Tracked(at.id)) continue;
      uint64_t page = GroupDevice() == "simulated" ? 1 : DevicePage(at.id);
      uint64_t f = cm::core::DeviceFootprint(p.bytesize, page);
      sum = sum > UINT64_MAX - f ? UINT64_MAX : sum + f;
    } else if (type == kGraphNodeTypeGraph) {
      CUgraph child = nullptr;
      if (Call<kGraphChildGraphNodeGetGraph>(nodes[i], &child) == kCudaSuccess && child) {
        uint64_t f = MemoryNodes(child, depth + 1);
        sum = sum > UINT64_MAX - f ? UINT64_MAX : sum + f;
      }
    }
  }
  return sum;
}

template <typename Forward>
CUresult Instantiate(CUgraphExec* exec, CUgraph graph, Forward forward) {
  CUresult r = forward();
  if (r != kCudaSuccess || !Active() || !exec) return r;
  uint64_t bound = MemoryNodes(graph, 0);
  std::lock_guard<std::mutex> lock(g_mutex);
  try {
    g_execs[*exec] = Exec{bound, false};
  } catch (...) {
  }
  return r;
}

template <typename Forward>
CUresult Launch(CUgraphExec exec, const char* api, Forward forward) {
  if (!Active()) return forward();
  std::unique_lock<std::mutex> lock(g_mutex);
  auto it = g_execs.find(exec);
  bool known = it != g_execs.end();
  if (known && (it->second.resident || it->second.bound == 0)) return forward();
  const uint64_t bound = known ? it->second.bound : 0;
  Member::Verdict verdict = Member::Verdict::kUncharged;
  uint64_t lacked = 0;  // what the last quiet try found no room for
  cm::core::ReserveOps quiet = Ops(api, &verdict);
  quiet.take = [&lacked, take = quiet.take](uint64_t n) { return take(n) || (lacked = n, false); };
  // The most the launch can add, on top of the reserve as it is (a memory node is no live
  // allocation of the reserve: its charge is all reserve).
  auto prepare = [&](const cm::core::ReserveOps& ops) {
    uint64_t c = g_reserve.charged();
    return g_reserve.Prepare(c > UINT64_MAX - bound ? UINT64_MAX : c + bound, 1, 0, ops);
  };
  auto refused = [&] { return verdict == Member::Verdict::kRefused; };
  bool ready = !known || prepare(quiet);
  if (!ready && !refused()) {
    g_reserve.Refresh(quiet);  // the reserve may have been trimmed since it was read
    ready = prepare(quiet);
  }
  if (!ready && refused()) {
    Recorder::Get().Oom(bound);
    return kCudaErrorOutOfMemory;
  }
  if (!ready) {
    Prepaid prepaid;  // what it leaves is given back at the end of this block
    // The trim of the process's pools and the try that may wait run without the lock; what it
    // took is drawn on once the lock is had again.
    if (!prepaid.Take(lock, lacked, api, nullptr) ||
        !prepare(prepaid.Drawing(Ops(api), &g_uncharged))) {
      Recorder::Get().Oom(bound);
      return kCudaErrorOutOfMemory;
    }
  }
  CUresult r = forward();
  cm::core::ReserveOps ops = Ops(api);
  if (!g_reserve.Done(r == kCudaSuccess, 0, ops)) {
    uint64_t reserved = 0;
    ops.reserved(&reserved);
    Member::Get().FailOpen(
        "ERR_PRELOAD_GRAPH",
        "a graph launched with memory nodes left the device's graph reserve at " +
            cm::core::FormatBytes(reserved) + ", past what the group could charge; the rest " +
            "went on uncharged",
        reserved > g_reserve.charged() ? reserved - g_reserve.charged() : 0, GroupDevice());
  }
  Trace();
  if (r == kCudaSuccess) {
    try {
      g_execs[exec].resident = true;
    } catch (...) {
    }
  }
  return r;
}

// After the reserve may have shrunk (a trim, a context's end): every graph must reserve again.
void Shrunk() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_reserve.Refresh(Ops("cuDeviceGraphMemTrim"));
  Trace();
  for (auto& [exec, e] : g_execs) e.resident = false;
}

}  // namespace

namespace cm::preload {

void GraphsAfterContextEnd(int dev) noexcept {
  if (dev != GroupOrdinal()) return;
  try {
    Shrunk();
  } catch (...) {
  }
}

void GraphsBeforeFork() { g_mutex.lock(); }
void GraphsAfterForkParent() { g_mutex.unlock(); }
void GraphsAfterForkChild() {
  new (&g_reserve) cm::core::ReserveCharge();
  g_uncharged = g_traced = 0;
  g_execs.clear();
  g_mutex.unlock();
}

}  // namespace cm::preload

CM_WRAPPER CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                unsigned long long flags) {
  return Instantiate(exec, graph,
                     [&] { return Call<kGraphInstantiateWithFlags>(exec, graph, flags); });
}
CM_WRAPPER CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, void* params) {
  return Instantiate(exec, graph,
                     [&] { return Call<kGraphInstantiateWithParams>(exec, graph, params); });
}
CM_WRAPPER CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                      void* params) {
  return Instantiate(exec, graph,
                     [&] { return Call<kGraphInstantiateWithParamsPtsz>(exec, graph, params); });
}
CM_WRAPPER CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
  return Launch(exec, "cuGraphUpload", [&] { return Call<kGraphUpload>(exec, stream); });
}
CM_WRAPPER CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return Launch(exec, "cuGraphUpload", [&] { return Call<kGraphUploadPtsz>(exec, stream); });
}
CM_WRAPPER CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return Launch(exec, "cuGraphLaunch", [&] { return Call<kGraphLaunch>(exec, stream); });
}
CM_WRAPPER CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return Launch(exec, "cuGraphLaunch", [&] { return Call<kGraphLaunchPtsz>(exec, stream); });
}
CM_WRAPPER CUresult cuGraphExecDestroy(CUgraphExec exec) {
  CUresult r = Call<kGraphExecDestroy>(exec);
  if (r == kCudaSuccess && Active()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_execs.erase(exec);  // its memory stays in the reserve until a trim
  }
  return r;
}
CM_WRAPPER CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  CUresult r = Call<kDeviceGraphMemTrim>(dev);
  if (r == kCudaSuccess && Active() && dev == GroupOrdinal()) Shrunk();
  return r;
}
