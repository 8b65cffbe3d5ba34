// The native side of the JS error classes (lib/base/errors.ts): CudaError with the failed call and
// code, CudaUnavailableError with its reason; and the error record the off-thread paths return.
#pragma once

#include <napi.h>

#include <string>

#include "base/cuda_api.h"
#include "core/base/shm.h"

namespace cm {

// The JS error classes native code constructs (lib/base/errors.ts): `classes` holds
// CudaMemoryError, CudaError, OutOfMemoryError, CudaUnavailableError and InterprocessError. Until
// they are set, errors are plain Errors with the same message and code.
void SetErrorClasses(Napi::Env env, Napi::Object classes);

// Builds (not throws) the JS error objects, for use in async completions too.
Napi::Value MakeCudaError(Napi::Env env, cudaError_t err, const std::string& call,
                          const std::string& detail = "");
Napi::Value MakeUnavailableError(Napi::Env env, const std::string& reason,
                                 const std::string& message);
[[noreturn]] void ThrowCuda(Napi::Env env, cudaError_t err, const std::string& call,
                            const std::string& detail = "");
// An InterprocessError (group ledgers, IPC handles, shared host memory) with the failure's code
// and file.
Napi::Value MakeInterprocessError(Napi::Env env, const core::ShmError& e);
[[noreturn]] void ThrowInterprocess(Napi::Env env, const core::ShmError& e);
// Runs `step`, a call into core's shared-file code (group ledgers, IPC records, shared host
// memory), and returns what it returns; a core::ShmError it throws becomes that InterprocessError.
// Any other exception passes through unchanged, so a caller's own catches still see it.
template <class Step>
decltype(auto) InterprocessCall(Napi::Env env, Step&& step) {
  try {
    return step();
  } catch (const core::ShmError& e) {
    ThrowInterprocess(env, e);
  }
}
[[noreturn]] void ThrowValue(Napi::Env env, Napi::Value error);
// An OutOfMemoryError from its details (requested, rounded, device, limit, ...; the class's
// constructor argument).
Napi::Value MakeOutOfMemoryError(Napi::Env env, Napi::Object details);
// A CudaMemoryError with `code` (ERR_ALLOCATOR_CLOSED, ERR_DISPOSED, ...), the base class of the
// library's errors; a plain Error with that code before the classes are known.
Napi::Error LibraryError(Napi::Env env, const std::string& code, const std::string& message);
// Argument errors as Node core makes them: TypeError with ERR_INVALID_ARG_TYPE, RangeError with
// ERR_OUT_OF_RANGE.
[[noreturn]] void ThrowType(Napi::Env env, const std::string& message);
[[noreturn]] void ThrowRange(Napi::Env env, const std::string& message);

struct Error {
  cudaError_t code = cudaSuccess;
  std::string call;
  std::string detail;
  explicit operator bool() const { return code != cudaSuccess; }
};

// Sets the calling thread's device, then runs `call`; returns the first failure.
#define CM_TRY(err_var, expr, name)        \
  do {                                     \
    cudaError_t _e = (expr);               \
    if (_e != cudaSuccess) {               \
      err_var = ::cm::Error{_e, name, ""}; \
      (void)cudaGetLastError();            \
    }                                      \
  } while (0)

}  // namespace cm
