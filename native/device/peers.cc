#include "device/peers.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "binding/args.h"
#include "binding/exports.h"
#include "core/device/peer_grants.h"
#include "device/discovery.h"
#include "device/nvml.h"

namespace cm {

namespace {
// Peer access per (from, to) pair once tried, per environment.
struct PeerAccessState : InstanceState {
  std::mutex mutex;
  std::map<std::pair<int, int>, bool> enabled;
};

// The pairs turned on in this process, and the hook that follows each.
struct ProcessPeers {
  std::mutex mutex;
  core::PeerGrants on;
  PeerGrantHook grant = nullptr;
};
ProcessPeers& Process() {
  static ProcessPeers* p = new ProcessPeers();  // never destroyed: used until the process ends
  return *p;
}

// Records the pair process-wide, then runs the hook outside the process-wide lock (the hook
// takes the mapping layer's lock, and that layer calls PeersReading). A mapping made meanwhile
// either sees the record or is reached by the hook. A failed grant takes the record back only if
// this call made it: a pair another environment recorded (and granted) stays, as its mappings
// already carry the access and its copies go on using it; this environment counts the pair as off.
bool RecordPeer(int from, int to) {
  ProcessPeers& p = Process();
  PeerGrantHook grant;
  bool recorded;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    recorded = p.on.Grant(from, to);
    grant = p.grant;
  }
  if (!grant || grant(from, to)) return true;
  if (recorded) {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.on.Revoke(from, to);
  }
  return false;
}
}  // namespace

void SetPeerGrantHook(PeerGrantHook grant) {
  ProcessPeers& p = Process();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.grant = grant;
}

std::vector<int> PeersReading(int owner) {
  ProcessPeers& p = Process();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.on.Readers(owner);
}

bool EnablePeer(Instance& inst, int from, int to) {
  PeerAccessState& st = inst.State<PeerAccessState>();
  std::lock_guard<std::mutex> lock(st.mutex);
  auto key = std::make_pair(from, to);
  auto it = st.enabled.find(key);
  if (it != st.enabled.end()) return it->second;
  int can = 0;
  bool on = false;
  if (cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(from);
    cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
    // Peer access belongs to the process's context, so another instance may have enabled it.
    on = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
    cudaSetDevice(current);
    // Memory that expandable segments map on `to` needs its own grant for `from`; without it a
    // peer copy through that memory would fail, so the pair then counts as off (copies go
    // through the host).
    if (on) on = RecordPeer(from, to);
  }
  (void)cudaGetLastError();
  st.enabled[key] = on;
  return on;
}

namespace {

// The NVLinks of every device, read once per call of peerAccess().
std::vector<core::GpuLinks> AllNvLinks(int count, bool* known) {
  std::vector<core::GpuLinks> all(count);
  *known = count > 0;
  for (int d = 0; d < count; ++d) {
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) != cudaSuccess) (void)cudaGetLastError();
    *known = ReadNvLinks(bus, &all[d]) && *known;
  }
  return all;
}

// The generation and per-link rate of a pair's NVLinks (core::NvLinkRateFor): the lower of the
// two GPUs' answers, should their architectures differ.
Napi::Value PairRate(Napi::Env env, const core::PairLinks& pair, int from, int to) {
  core::NvLinkRate rate;
  bool first = true;
  for (int d : {from, to}) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess)
      (void)cudaGetLastError();
    core::NvLinkRate r = core::NvLinkRateFor(pair.version, major, minor);
    if (first || r.gbps_per_link < rate.gbps_per_link) rate = r;
    first = false;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("generation",
        rate.generation.empty() ? env.Null() : Napi::String::New(env, rate.generation));
  o.Set("gbpsPerLink", rate.gbps_per_link);
  o.Set("source", rate.source);
  return o;
}

// peerAccess: returns [{ from, to, canAccess, enabled, performanceRank, nativeAtomics, linkType,
// nvlinks, viaNvSwitch, nvlinkRate }] for every ordered pair of devices. The link comes from NVML
// ('unknown' and null without it).
Napi::Value PeerAccess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  PeerAccessState& st = GetInstance(env).State<PeerAccessState>();
  int count = GetStatus(env).device_count;
  bool links_known = false;
  std::vector<core::GpuLinks> links = AllNvLinks(count, &links_known);
  Napi::Array out = Napi::Array::New(env);
  uint32_t k = 0;
  for (int from = 0; from < count; ++from)
    for (int to = 0; to < count; ++to) {
      if (from == to) continue;
      int can = 0, rank = 0, atomics = 0;
      cudaDeviceCanAccessPeer(&can, from, to);
      cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, from, to);
      cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, from, to);
      (void)cudaGetLastError();
      bool enabled;
      {
        std::lock_guard<std::mutex> lock(st.mutex);
        auto it = st.enabled.find({from, to});
        enabled = it != st.enabled.end() && it->second;
      }
      Napi::Object o = Napi::Object::New(env);
      o.Set("from", from);
      o.Set("to", to);
      o.Set("canAccess", can != 0);
      o.Set("enabled", enabled);
      o.Set("performanceRank", rank);
      o.Set("nativeAtomics", atomics != 0);
      core::PairLinks pair = core::NvLinksBetween(links, from, to);
      o.Set("linkType", !links_known ? "unknown" : pair.links ? "nvlink" : "pcie");
      o.Set("nvlinks", links_known ? Napi::Value(Napi::Number::New(env, pair.links)) : env.Null());
      o.Set("viaNvSwitch", pair.via_switch);
      o.Set("nvlinkRate", pair.links ? PairRate(env, pair, from, to) : env.Null());
      out.Set(k++, o);
    }
  return out;
}

// enablePeerAccess: returns whether access from `from` to `to` is on
Napi::Value EnablePeerJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int from = ReadInt(env, info[0], "from", 0, 1 << 20);
  int to = ReadInt(env, info[1], "to", 0, 1 << 20);
  CheckDevice(env, from);
  CheckDevice(env, to);
  return Napi::Boolean::New(env, from != to && EnablePeer(GetInstance(env), from, to));
}

}  // namespace

void InitPeer(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"peerAccess", PeerAccess},
               {"enablePeerAccess", EnablePeerJs},
           });
}

}  // namespace cm
