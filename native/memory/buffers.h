// Device memory (cudaMalloc), pinned host memory (cudaHostAlloc) and page-locked Node buffers
// (cudaHostRegister): allocation, explicit and finalizer-driven release.
#pragma once

#include <napi.h>

#include <string>
#include <vector>

#include "binding/handles.h"

namespace cm {
void InitMemory(Napi::Env env, Napi::Object exports);
// Frees every allocation the environment still holds (its cleanup hook).
void ReleaseAllLive(Napi::Env env);
// Enters host memory in the handle table and wraps it in an external ArrayBuffer that keeps the
// record alive; returns [handle, arrayBuffer]. Throws ERR_EXTERNAL_BUFFERS_NOT_ALLOWED (having
// released the memory) where the runtime refuses external buffers.
Napi::Value ExposeHostMemory(Napi::Env env, Allocation* a);
// Throws the OutOfMemoryError of a device allocation `call` refused: what was asked for, and the
// device's free and total memory now.
[[noreturn]] void ThrowDeviceOom(Napi::Env env, uint64_t bytes, int device, const char* call);

// What leak checks count: live resources of one kind on one device (liveSummary(),
// allocatorsLive()), and where each was made where that is known.
struct LiveRow {
  std::string kind;
  int device;
  bool simulated;
  double count, bytes;
  std::vector<std::string> where;
  double thread = -1;  // the worker thread that holds them (its threadId); -1: this environment
};
// Counts one more of `kind` on the device, of `bytes`, in `rows`.
LiveRow& CountLive(std::vector<LiveRow>* rows, const std::string& kind, int device, bool simulated,
                   uint64_t bytes);
// The rows as JavaScript objects { kind, device, simulated, count, bytes, where, thread? }.
Napi::Array LiveRowsValue(Napi::Env env, const std::vector<LiveRow>& rows);
}  // namespace cm
