// File failures as JavaScript sees them: a CudaMemoryError with `code` (ERR_FILE_...), and the
// path, system call and errno name where there is one; or a CUDA failure. Made from a failed
// system call, a pipeline's status or a replacement's, and coded by errno with lib/base/files.ts's
// table, given at init (the one source of those codes).
#pragma once

#include <napi.h>

#include <cstdint>
#include <map>
#include <string>

#include "binding/errors.h"
#include "core/base/file_replace.h"
#include "core/transfer/file_pipeline.h"

namespace cm::files {

// Control characters in a path are escaped before it reaches a message (and a terminal).
std::string Quote(const std::string& path);

// A failure; false when there is none.
struct FileFailure {
  std::string code;  // empty: none, or a failed system call, coded by `err`
  std::string message;
  std::string path;
  std::string syscall;
  int err = 0;  // a failed system call's errno: coded (FileCodeOf) once on JavaScript's thread
  Error cuda;   // set when the DMA engine failed
  explicit operator bool() const { return !code.empty() || err != 0 || static_cast<bool>(cuda); }
};

FileFailure Fail(const std::string& code, const std::string& path, const std::string& message);
// A failed system call: its errno is coded once on JavaScript's thread (MakeFileError).
FileFailure FromErrno(int e, const char* syscall, const std::string& path,
                      const std::string& where = "");
// A pipeline's failure on the open file `fd`, read or written up to `expected_end`.
FileFailure FromStatus(const core::FileStatus& s, const std::string& path, int fd,
                       uint64_t expected_end);
// A replacement's refusal or failed system call, on the path it names.
FileFailure FromReplace(const core::ReplaceStatus& s);

Napi::Value MakeFileError(Napi::Env env, const FileFailure& f);

// The environment's codes by errno, and the code of an errno not listed.
void UseFileCodes(Napi::Env env, std::map<int, std::string> by_errno, std::string otherwise);

}  // namespace cm::files
