// What the interposer charged for each live allocation, by its address (or, for cuMemCreate, its
// handle), so that a free gives back exactly that. Sharded, each shard under its own mutex, so
// that threads allocating at once rarely wait for each other. A free of an address not found here
// (memory from before the preload saw it, or on another device) passes through uncharged.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cm::preload {

struct Allocation {
  uint64_t bytes = 0;
  bool charged = false;  // false: it went on uncharged (no group, or the group could not be used)
  void* context = nullptr;  // the CUDA context current when it was made (null: not known)
};

class Allocations {
 public:
  // False if memory ran out (the allocation is then not tracked: its free passes uncharged).
  bool Insert(uint64_t key, Allocation a) noexcept {
    Shard& s = ShardOf(key);
    std::lock_guard<std::mutex> lock(s.mutex);
    try {
      s.map[key] = a;
      return true;
    } catch (...) {
      return false;
    }
  }
  bool Remove(uint64_t key, Allocation* a) noexcept {
    Shard& s = ShardOf(key);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.map.find(key);
    if (it == s.map.end()) return false;
    *a = it->second;
    s.map.erase(it);
    return true;
  }
  // Takes out every allocation made in `context` (a context being destroyed or reset frees them
  // all), with its key. One that memory runs out for on the way stays in the table, charged until
  // the process exits.
  void RemoveContext(void* context, std::vector<std::pair<uint64_t, Allocation>>* out) noexcept {
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mutex);
      for (auto it = s.map.begin(); it != s.map.end();) {
        if (it->second.context != context) {
          ++it;
          continue;
        }
        try {
          out->emplace_back(it->first, it->second);
        } catch (...) {
          ++it;
          continue;
        }
        it = s.map.erase(it);
      }
    }
  }
  // Around fork: every shard held, so that the child's copy is consistent; the child forgets
  // everything (the parent's allocations are not the child's).
  void BeforeFork() {
    for (Shard& s : shards_) s.mutex.lock();
  }
  void AfterForkParent() {
    for (Shard& s : shards_) s.mutex.unlock();
  }
  void AfterForkChild() noexcept {
    for (Shard& s : shards_) {
      s.map.clear();
      s.mutex.unlock();
    }
  }

 private:
  static constexpr int kShards = 16;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<uint64_t, Allocation> map;
  };
  Shard& ShardOf(uint64_t key) {
    // Device addresses are aligned to at least 256 bytes and often far more: mix the high bits in.
    uint64_t h = (key >> 8) ^ (key >> 21) ^ (key >> 33);
    return shards_[h % kShards];
  }
  Shard shards_[kShards];
};

}  // namespace cm::preload
