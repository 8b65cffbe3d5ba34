// Per-environment state: each addon instance (main thread or worker) has its own Instance;
// nothing lives in static globals. Each concern keeps its state here, in a slot it makes on first
// use (Instance::State), so that this file names none of them: the binding's handle table
// (binding/handles.h) and JS error classes (binding/errors.h) are slots too.
#pragma once

#include <napi.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/cuda_api.h"

namespace cm {

// The state one concern keeps per environment. It is made on the first Instance::State<T>()
// (default-constructed, on whichever thread asks first) and destroyed when the environment
// tears down, after its buffers were released: the slots go in the reverse of the order they
// were made, so a state made while another existed (and may use it) goes first.
class InstanceState {
 public:
  virtual ~InstanceState() = default;
};

// What every environment of the process holds, by kind and device: each environment (the main
// thread, each worker thread) enters its own changes as its buffers, raw allocations and
// allocators come and go, so that a leak check on one thread sees what the others hold. It is
// the addon's one process-wide table, since no environment may read another's handles (only its
// own thread touches them); it holds counts and names, nothing that could dangle, and an entry
// goes with its environment. Environments are known by a number that is never reused.
namespace tally {
struct Row {
  double thread;  // the environment's thread id, as worker_threads numbers it (0: the main thread)
  std::string kind;
  int device;
  bool simulated;
  double count, bytes;
};
uint64_t Enter();
void Leave(uint64_t id) noexcept;
void SetThread(uint64_t id, double thread_id) noexcept;
// The environment runs a leak gate of its own, which checks what it holds: other gates leave it
// out (the test files a runner runs in worker threads side by side).
void SetGated(uint64_t id) noexcept;
// Adds `count` of `kind` holding `bytes` (both negative to take them away). Nothing for an
// environment that has left.
void Change(uint64_t id, const char* kind, int device, bool simulated, double count,
            double bytes) noexcept;
// What the other environments that run no gate hold, row by row (counts of zero left out).
std::vector<Row> Others(uint64_t self);
}  // namespace tally

class Instance {
 public:
  const uint64_t tally_id = tally::Enter();  // this environment in the process-wide tally

  Instance();
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  // The state of type T, made on first use. Thread-safe; after the first call, one atomic load.
  template <class T>
  T& State() {
    static const size_t key = NewStateKey();
    InstanceState* s = slots_[key].load(std::memory_order_acquire);
    if (!s) s = Install(key, [] { return std::unique_ptr<InstanceState>(new T()); });
    return static_cast<T&>(*s);
  }

 private:
  static constexpr size_t kMaxStates = 16;
  static size_t NewStateKey();
  InstanceState* Install(size_t key, std::unique_ptr<InstanceState> (*make)());
  std::array<std::atomic<InstanceState*>, kMaxStates> slots_{};
  std::recursive_mutex slots_mutex_;                  // a state's constructor may ask for another
  std::vector<std::unique_ptr<InstanceState>> made_;  // in the order they were made
};

Instance& GetInstance(Napi::Env env);

}  // namespace cm
