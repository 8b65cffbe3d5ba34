#include "group_upstream.h"

namespace cm::core {

UpstreamStatus GroupUpstream::Allocate(size_t bytes, uint64_t* address) {
  // A pool backs off in 0.9x steps after an out-of-memory answer; only the last refusal is kept.
  if (!ledger_->Charge(bytes, &refusal_)) {
    refused_ = true;
    return {UpstreamStatus::kOutOfMemory, 2, "group budget"};
  }
  UpstreamStatus st = inner_->Allocate(bytes, address);
  if (st.kind != UpstreamStatus::kOk) ledger_->Release(bytes);
  return st;
}

void GroupUpstream::Deallocate(uint64_t address, size_t bytes) noexcept {
  inner_->Deallocate(address, bytes);
  ledger_->Release(bytes);
}

}  // namespace cm::core
