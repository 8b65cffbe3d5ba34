// Registers the addon's exports; each concern lives in its own file.
#include <napi.h>

#include "allocator/backend.h"
#include "allocator/bfc.h"
#include "allocator/group.h"
#include "bench/bench.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "binding/promise_worker.h"
#include "device/discovery.h"
#include "device/peers.h"
#include "device/platform.h"
#include "device/stream.h"
#include "memory/buffers.h"
#include "memory/ipc.h"
#include "memory/managed.h"
#include "memory/shared_pinned.h"
#include "transfer/copy.h"
#include "transfer/files.h"
#include "transfer/staging.h"

namespace {

// init: the JS error classes that native code constructs, so every error carries the library's
// types and `code`, the codes of the file errors (lib/base/files.ts's table), and this
// environment's thread id (worker_threads.threadId), which leak reports name.
Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  cm::Instance& inst = cm::GetInstance(env);
  Napi::Object o = info[0].As<Napi::Object>();
  cm::SetErrorClasses(env, o);
  cm::SetFileCodes(env, info[1]);
  if (info[2].IsNumber())
    cm::tally::SetThread(inst.tally_id, info[2].As<Napi::Number>().DoubleValue());
  return env.Undefined();
}

Napi::Object RegisterExports(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData<cm::Instance>(new cm::Instance());
  // The binding's own slots first, so that they go last (slots go in the reverse of the order
  // they were made): every concern's state may use the handle table while it is torn down.
  cm::Handles(env);
  // A worker thread that exits with live buffers frees them here. It runs after the thread's
  // pending asynchronous copies have completed (Node finishes those first), while no JavaScript
  // can run, so it must not throw.
  env.AddCleanupHook([env]() {
    cm::NoThrow("freeing a closing environment's buffers", [env] { cm::ReleaseAllLive(env); });
  });
  cm::Register(env, exports, {{"init", Init}});
  cm::InitDiscovery(env, exports);
  cm::InitMemory(env, exports);
  cm::InitManaged(env, exports);
  cm::InitCopy(env, exports);
  cm::InitStaging(env, exports);
  cm::InitFiles(env, exports);
  cm::InitStreams(env, exports);
  cm::InitAllocator(env, exports);
  cm::InitBfc(env, exports);
  cm::InitGroup(env, exports);
  cm::InitIpc(env, exports);
  cm::InitForeignIpc(env, exports);
  cm::InitPlatform(env, exports);
  cm::InitPeer(env, exports);
  cm::InitSharedHost(env, exports);
  cm::InitBench(env, exports);
  cm::InitAllocBench(env, exports);
  cm::InitBenchDevices(env, exports);
  cm::InitManagedBench(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(cuda_memory, RegisterExports)
