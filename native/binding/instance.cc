#include "binding/instance.h"

#include <cstdio>
#include <cstdlib>

namespace cm {

Instance::Instance() = default;

Instance::~Instance() {
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
