#include "core/allocator/group_upstream.h"

namespace cm::core {

template <typename Take>
UpstreamStatus GroupUpstream::Charged(uint64_t bytes, Take take) {
  // A pool backs off in 0.9x steps after an out-of-memory answer; only the last refusal is kept.
  if (!ledger_->Charge(bytes, &refusal_)) {
    refused_ = true;
    return {UpstreamStatus::kOutOfMemory, 2, "group budget"};
  }
  UpstreamStatus st = take();
  if (st.kind != UpstreamStatus::kOk) ledger_->Release(bytes);
  return st;
}

UpstreamStatus GroupUpstream::Allocate(size_t bytes, uint64_t* address) {
  return Charged(bytes, [&] { return inner_->Allocate(bytes, address); });
}

void GroupUpstream::Deallocate(uint64_t address, size_t bytes) noexcept {
  inner_->Deallocate(address, bytes);
  ledger_->Release(bytes);
}

UpstreamStatus GroupUpstream::Map(uint64_t address, uint64_t bytes) {
  return Charged(bytes, [&] { return inner_->Map(address, bytes); });
}

void GroupUpstream::Unmap(uint64_t address, uint64_t bytes) noexcept {
  inner_->Unmap(address, bytes);
  ledger_->Release(bytes);
}

}  // namespace cm::core
