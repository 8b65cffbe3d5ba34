#include "binding/instance.h"

#include <cstdio>
#include <cstdlib>
#include <unordered_map>

namespace cm {

namespace tally {
namespace {
struct Entry {
  double thread = 0;
  bool gated = false;
  std::vector<Row> rows;
};
struct Table {
  std::mutex mutex;
  uint64_t next = 1;
  std::unordered_map<uint64_t, Entry> entries;
};
// Made once and never destroyed: an environment may tear down after static destructors ran.
Table& TheTable() {
  static Table* table = new Table();
  return *table;
}
}  // namespace

uint64_t Enter() {
  Table& t = TheTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  uint64_t id = t.next++;
  t.entries.emplace(id, Entry{});
  return id;
}

void Leave(uint64_t id) noexcept {
  Table& t = TheTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.entries.erase(id);
}

void SetThread(uint64_t id, double thread_id) noexcept {
  Table& t = TheTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto e = t.entries.find(id);
  if (e != t.entries.end()) e->second.thread = thread_id;
}

void SetGated(uint64_t id) noexcept {
  Table& t = TheTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto e = t.entries.find(id);
  if (e != t.entries.end()) e->second.gated = true;
}

void Change(uint64_t id, const char* kind, int device, bool simulated, double count,
            double bytes) noexcept {
  Table& t = TheTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto e = t.entries.find(id);
  if (e == t.entries.end()) return;
  for (Row& r : e->second.rows)
    if (r.device == device && r.simulated == simulated && r.kind == kind) {
      r.count += count;
      r.bytes += bytes;
      return;
    }
  e->second.rows.push_back(Row{0, kind, device, simulated, count, bytes});
}

std::vector<Row> Others(uint64_t self) {
  Table& t = TheTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<Row> out;
  for (const auto& [id, e] : t.entries) {
    if (id == self || e.gated) continue;
    for (const Row& r : e.rows)
      if (r.count > 0) {
        out.push_back(r);
        out.back().thread = e.thread;
      }
  }
  return out;
}
}  // namespace tally

Instance::Instance() = default;

Instance::~Instance() {
  tally::Leave(tally_id);  // what its states release as they go is no one's any more
  while (!made_.empty()) made_.pop_back();
}

size_t Instance::NewStateKey() {
  static std::atomic<size_t> next{0};
  size_t key = next.fetch_add(1);
  if (key >= kMaxStates) {
    // A build-time limit, reached only by adding a concern: raise kMaxStates.
    std::fprintf(stderr, "cuda-memory: more than %zu kinds of per-environment state\n", kMaxStates);
    std::abort();
  }
  return key;
}

InstanceState* Instance::Install(size_t key, std::unique_ptr<InstanceState> (*make)()) {
  std::lock_guard<std::recursive_mutex> lock(slots_mutex_);
  InstanceState* s = slots_[key].load(std::memory_order_relaxed);
  if (s) return s;
  made_.push_back(make());
  s = made_.back().get();
  slots_[key].store(s, std::memory_order_release);
  return s;
}

Instance& GetInstance(Napi::Env env) { return *env.GetInstanceData<Instance>(); }

}  // namespace cm
