// Files to device memory and back: readFile()/writeFile() and their asynchronous forms, and the
// storage-only read the file benchmark measures against. The schedule (chunks, pieces, ordering,
// failures) is core/transfer/file_pipeline.h, the temporary file a write goes through
// core/base/file_replace.h; files/ has the rest, a file a concern: opening (open.h), O_DIRECT's
// choice (direct.h), the pinned ring and DMA stream per device (engine.h), the read and write
// paths (read.h, write.h), the page cache (page_cache.h) and the coded errors (failure.h).
// files.cc holds the calls Node makes.
#pragma once

#include <napi.h>

namespace cm {

void InitFiles(Napi::Env env, Napi::Object exports);

// init's second argument, { byErrno: [[errno, code], ...], otherwise: code }: the codes of the
// file errors whose system call failed, lib/base/files.ts's table (the one source of them).
void SetFileCodes(Napi::Env env, Napi::Value table);

}  // namespace cm
