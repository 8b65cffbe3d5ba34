// How much of a file is in the page cache, for fileCache().
#pragma once

#include <cstdint>

namespace cm::files {

// The fraction of the file's pages in the page cache (mincore over a mapping of each span that
// core::ResidencySpans picks: exact up to kResidencyWhole pages, else an estimate from windows
// spread over the file), -1 if unknown. Time and memory are bounded whatever the file's size.
double Resident(int fd, uint64_t size);

}  // namespace cm::files
