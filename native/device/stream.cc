#include "device/stream.h"

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "device/discovery.h"

namespace cm {

namespace {

constexpr napi_type_tag kStreamTag = {0x2b7e151628aed2a6ull, 0xabf7158809cf4f3cull};
constexpr napi_type_tag kEventTag = {0x9e3779b97f4a7c15ull, 0xf39cc0605cedc834ull};

struct EventRec {
  cudaEvent_t event = nullptr;
  int device = 0;
  bool timing = true;
  bool recorded = false;
};

bool Live(const StreamRec* r) { return !r->disposed; }

void DestroyStream(StreamRec* r) noexcept {
  if (!r->stream) return;
  cudaStreamDestroy(r->stream);  // CUDA lets work already queued there finish first
  (void)cudaGetLastError();
  r->stream = nullptr;
}
bool Live(const EventRec* r) { return r->event != nullptr; }

template <typename T>
T* Unwrap(Napi::Env env, Napi::Value v, const napi_type_tag* tag, const char* what,
          bool allow_destroyed = false) {
  if (!v.IsExternal() || !v.As<Napi::Object>().CheckTypeTag(tag))
    ThrowType(env, std::string(what) + " must be a " + what + " handle of this library");
  T* r = v.As<Napi::External<T>>().Data();
  if (!allow_destroyed && !Live(r)) {
    throw LibraryError(env, "ERR_DISPOSED", std::string("the ") + what + " was disposed");
  }
  return r;
}

Napi::Value StreamCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int device = ReadInt(env, info[0], "device", 0, 1 << 20);
  CheckDevice(env, device);
  auto* r = new StreamRec{nullptr, device};
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess)
    err = cudaStreamCreateWithFlags(&r->stream, info[1].ToBoolean() ? cudaStreamNonBlocking : 0);
  if (err != cudaSuccess) {
    delete r;
    ThrowCuda(env, err, "cudaStreamCreateWithFlags");
  }
  auto ext = Napi::External<StreamRec>::New(env, r, [](Napi::Env, StreamRec* s) {
    // Work holding the record keeps its JS handle reachable, but an environment torn down with
    // work in flight collects everything: the last user then deletes the record.
    s->disposed = s->handle_gone = true;
    if (s->users > 0) return;
    DestroyStream(s);
    delete s;
  });
  ext.TypeTag(&kStreamTag);
  return ext;
}

Napi::Value StreamSynchronize(const Napi::CallbackInfo& info) {
  StreamRec* s = Unwrap<StreamRec>(info.Env(), info[0], &kStreamTag, "stream");
  cudaError_t err = cudaStreamSynchronize(s->stream);
  if (err != cudaSuccess) ThrowCuda(info.Env(), err, "cudaStreamSynchronize");
  return info.Env().Undefined();
}

// What a query (cudaStreamQuery, cudaEventQuery, named `call`) answered: true when the work is
// done, false (the error cleared) while it is not; any other error is its CudaError.
Napi::Value QueryResult(Napi::Env env, cudaError_t err, const char* call) {
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return Napi::Boolean::New(env, false);
  }
  if (err != cudaSuccess) ThrowCuda(env, err, call);
  return Napi::Boolean::New(env, true);
}

Napi::Value StreamQuery(const Napi::CallbackInfo& info) {
  StreamRec* s = Unwrap<StreamRec>(info.Env(), info[0], &kStreamTag, "stream");
  return QueryResult(info.Env(), cudaStreamQuery(s->stream), "cudaStreamQuery");
}

Napi::Value StreamDestroy(const Napi::CallbackInfo& info) {
  StreamRec* s = Unwrap<StreamRec>(info.Env(), info[0], &kStreamTag, "stream", true);
  if (s->disposed) return Napi::Boolean::New(info.Env(), false);
  s->disposed = true;
  if (s->users == 0) {  // nothing queued holds it
    cudaStreamSynchronize(s->stream);
    DestroyStream(s);
  }
  return Napi::Boolean::New(info.Env(), true);
}

Napi::Value EventCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int device = ReadInt(env, info[0], "device", 0, 1 << 20);
  CheckDevice(env, device);
  bool timing = info[1].IsUndefined() || info[1].ToBoolean();
  auto* r = new EventRec{nullptr, device, timing, false};
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess)
    err = cudaEventCreateWithFlags(&r->event, timing ? cudaEventDefault : cudaEventDisableTiming);
  if (err != cudaSuccess) {
    delete r;
    ThrowCuda(env, err, "cudaEventCreateWithFlags");
  }
  auto ext = Napi::External<EventRec>::New(env, r, [](Napi::Env, EventRec* e) {
    if (e->event) cudaEventDestroy(e->event);
    (void)cudaGetLastError();
    delete e;
  });
  ext.TypeTag(&kEventTag);
  return ext;
}

Napi::Value EventRecord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EventRec* e = Unwrap<EventRec>(env, info[0], &kEventTag, "event");
  cudaStream_t stream = Absent(info[1]) ? nullptr : UnwrapStream(env, info[1]);
  cudaError_t err = cudaSetDevice(e->device);
  if (err == cudaSuccess) err = cudaEventRecord(e->event, stream);
  if (err != cudaSuccess) ThrowCuda(env, err, "cudaEventRecord");
  e->recorded = true;
  return env.Undefined();
}

Napi::Value EventSynchronize(const Napi::CallbackInfo& info) {
  EventRec* e = Unwrap<EventRec>(info.Env(), info[0], &kEventTag, "event");
  cudaError_t err = cudaEventSynchronize(e->event);
  if (err != cudaSuccess) ThrowCuda(info.Env(), err, "cudaEventSynchronize");
  return info.Env().Undefined();
}

Napi::Value EventQuery(const Napi::CallbackInfo& info) {
  EventRec* e = Unwrap<EventRec>(info.Env(), info[0], &kEventTag, "event");
  return QueryResult(info.Env(), cudaEventQuery(e->event), "cudaEventQuery");
}

// eventElapsed: returns milliseconds
Napi::Value EventElapsed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EventRec* a = Unwrap<EventRec>(env, info[0], &kEventTag, "event");
  EventRec* b = Unwrap<EventRec>(env, info[1], &kEventTag, "event");
  if (!a->timing || !b->timing)
    ThrowRange(env, "elapsedTime needs events created with timing enabled");
  if (!a->recorded || !b->recorded)
    ThrowRange(env, "elapsedTime needs both events to have been recorded");
  float ms = 0;
  cudaError_t err = cudaEventElapsedTime(&ms, a->event, b->event);
  if (err != cudaSuccess) ThrowCuda(env, err, "cudaEventElapsedTime");
  return Napi::Number::New(env, ms);
}

Napi::Value EventDestroy(const Napi::CallbackInfo& info) {
  EventRec* e = Unwrap<EventRec>(info.Env(), info[0], &kEventTag, "event", true);
  if (!e->event) return Napi::Boolean::New(info.Env(), false);
  cudaEventDestroy(e->event);
  (void)cudaGetLastError();
  e->event = nullptr;
  return Napi::Boolean::New(info.Env(), true);
}

}  // namespace

void HoldStream(StreamRec* r) noexcept { ++r->users; }

void DropStream(StreamRec* r) noexcept {
  if (--r->users > 0 || !r->disposed) return;
  DestroyStream(r);  // disposed while work held it: that work is done now
  if (r->handle_gone) delete r;
}

cudaStream_t UnwrapStream(Napi::Env env, Napi::Value v) { return UnwrapStreamRec(env, v)->stream; }

StreamRec* UnwrapStreamRec(Napi::Env env, Napi::Value v) {
  return Unwrap<StreamRec>(env, v, &kStreamTag, "stream");
}

void InitStreams(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"streamCreate", StreamCreate},
               {"streamSynchronize", StreamSynchronize},
               {"streamQuery", StreamQuery},
               {"streamDestroy", StreamDestroy},
               {"eventCreate", EventCreate},
               {"eventRecord", EventRecord},
               {"eventSynchronize", EventSynchronize},
               {"eventQuery", EventQuery},
               {"eventElapsed", EventElapsed},
               {"eventDestroy", EventDestroy},
           });
}

}  // namespace cm
