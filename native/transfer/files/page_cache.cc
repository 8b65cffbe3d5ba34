#include "transfer/files/page_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/transfer/file_pipeline.h"

namespace cm::files {

namespace {

constexpr uint64_t kResidencyWhole = 1u << 21, kResidencyWindow = 1u << 14;

}  // namespace

double Resident(int fd, uint64_t size) {
  if (size == 0) return 0;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t pages = (size + page - 1) / page;
  std::vector<unsigned char> vec(kResidencyWindow);
  uint64_t in = 0, looked = 0;
  for (const core::PageSpan& s : core::ResidencySpans(pages, kResidencyWhole, kResidencyWindow)) {
    const uint64_t offset = s.first * page;
    const size_t bytes = static_cast<size_t>(std::min(s.count * page, size - offset));
    void* m = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
    if (m == MAP_FAILED) return -1;
    const bool ok = mincore(m, bytes, vec.data()) == 0;
    munmap(m, bytes);
    if (!ok) return -1;
    const size_t n = (bytes + page - 1) / page;
    for (size_t i = 0; i < n; ++i) in += vec[i] & 1;
    looked += n;
  }
  return looked ? static_cast<double>(in) / looked : 0;
}

}  // namespace cm::files
