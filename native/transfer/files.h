// Files to device memory and back: readFile()/writeFile() and their asynchronous forms, and the
// storage-only read the file benchmark measures against. The schedule (chunks, pieces, ordering,
// failures) is core/transfer/file_pipeline.h; here are the file descriptors, O_DIRECT's choice,
// the pinned ring and DMA stream per device, the temporary file a write goes through, and the
// coded errors.
#pragma once

#include <napi.h>

namespace cm {

void InitFiles(Napi::Env env, Napi::Object exports);

// init's second argument, { byErrno: [[errno, code], ...], otherwise: code }: the codes of the
// file errors whose system call failed, lib/base/files.ts's table (the one source of them).
void SetFileCodes(Napi::Env env, Napi::Value table);

}  // namespace cm
