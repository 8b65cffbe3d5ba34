// Asynchronous work that settles a promise, written for environments that go away while the work
// runs. A worker thread that calls process.exit() or is terminated still waits for its running
// and queued thread-pool work, then completes it while tearing down, when no JavaScript may run:
// creating an error object or settling the promise fails there. node-addon-api's AsyncWorker
// turns such a failure into a C++ exception thrown out of the completion callback, which
// terminates the whole process (every thread with it). This class never lets one out.
#pragma once

#include <napi.h>

#include <string>

namespace cm {

// Reports a failure nobody expects on a path that must not throw; only with CUDA_MEMORY_DEBUG
// set. An environment that can no longer run JavaScript is the ordinary case and stays silent.
void ReportUnexpected(const char* what, const char* message) noexcept;

// Runs `work`, which may throw, on a path that must not (a cleanup hook, a finalizer): false if
// it threw, reported as above.
template <typename F>
bool NoThrow(const char* what, F&& work) noexcept {
  try {
    work();
    return true;
  } catch (const std::exception& e) {
    ReportUnexpected(what, e.what());
  } catch (...) {
    ReportUnexpected(what, "unknown exception");
  }
  return false;
}

class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, const char* resource_name);
  Napi::Promise Promise() const { return promise_; }

 protected:
  // On a libuv thread; no Node-API. An exception is caught and rejects the promise.
  virtual void Work() = 0;
  // On the JS thread, always, before settling, also while the environment is torn down: give
  // back what the work held. Must not call into JavaScript.
  virtual void Release(Napi::Env env) noexcept {}
  // On the JS thread, only while JavaScript can still run: the value to resolve with, or an error
  // to reject with (set *reject). May throw Napi::Error, which rejects the promise.
  virtual Napi::Value Settlement(Napi::Env env, bool* reject) = 0;

 private:
  void Execute() final;
  void OnWorkComplete(Napi::Env env, napi_status status) final;

  napi_deferred deferred_ = nullptr;
  Napi::Promise promise_;
  std::string exception_;  // what Work() threw, if anything
};

}  // namespace cm
