#include "core/allocator/group_upstream.h"

#include <string>

namespace {
thread_local const char* t_charging = nullptr;

// Names the ledger this thread charges while `take` runs.
class Charging {
 public:
  explicit Charging(const std::string& path) : before_(t_charging) {
    size_t slash = path.rfind('/');
    t_charging = path.c_str() + (slash == std::string::npos ? 0 : slash + 1);
  }
  ~Charging() { t_charging = before_; }

 private:
  const char* before_;
};
}  // namespace

namespace cm::core {

template <typename Take>
UpstreamStatus GroupUpstream::Charged(uint64_t bytes, Take take) {
  // A pool backs off in 0.9x steps after an out-of-memory answer; only the last refusal is kept.
  // Only the least region the allocation can use waits for room, once: the larger ones the pool
  // tries first are refused at once, so that it backs off to that one instead of waiting for them.
  bool wait = bytes <= wait_bytes_ && ledger_->terms().wait_ms > 0;
  if (wait) wait_bytes_ = 0;
  if (!(wait ? ledger_->ChargeWaiting(bytes, &refusal_) : ledger_->Charge(bytes, &refusal_))) {
    refused_ = true;
    return {UpstreamStatus::kOutOfMemory, 2, "group budget"};
  }
  UpstreamStatus st;
  {
    Charging charging(ledger_->path());
    st = take();
  }
  if (st.kind != UpstreamStatus::kOk) ledger_->Release(bytes);
  return st;
}

UpstreamStatus GroupUpstream::Allocate(size_t bytes, uint64_t* address) {
  return Charged(inner_->Footprint(bytes), [&] { return inner_->Allocate(bytes, address); });
}

void GroupUpstream::Deallocate(uint64_t address, size_t bytes) noexcept {
  inner_->Deallocate(address, bytes);
  ledger_->Release(inner_->Footprint(bytes));
}

UpstreamStatus GroupUpstream::Map(uint64_t address, uint64_t bytes) {
  return Charged(bytes, [&] { return inner_->Map(address, bytes); });
}

void GroupUpstream::Unmap(uint64_t address, uint64_t bytes) noexcept {
  inner_->Unmap(address, bytes);
  ledger_->Release(bytes);
}

}  // namespace cm::core

extern "C" const char* cuda_memory_charging_ledger() { return t_charging; }
