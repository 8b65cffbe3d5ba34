#include "core/allocator/tenant_view.h"

#include <algorithm>

namespace cm::core {

TenantMemory TenantFigures(MemInfo group) {
  uint64_t free = std::min(group.free, group.total);
  return {group.total, free, group.total - free};
}

}  // namespace cm::core
