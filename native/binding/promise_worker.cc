#include "binding/promise_worker.h"

#include <cstdio>
#include <cstdlib>

namespace cm {

PromiseWorker::PromiseWorker(Napi::Env env, const char* resource_name)
    : Napi::AsyncWorker(env, resource_name) {
  napi_value promise;
  napi_status s = napi_create_promise(env, &deferred_, &promise);
  NAPI_THROW_IF_FAILED_VOID(env, s);
  promise_ = Napi::Promise(env, promise);
}

void PromiseWorker::Execute() {
  try {
    Work();
  } catch (const std::exception& e) {
    exception_ = e.what();
    if (exception_.empty()) exception_ = "native exception";
  } catch (...) {
    exception_ = "native exception";
  }
}

void ReportUnexpected(const char* what, const char* message) noexcept {
  if (std::getenv("CUDA_MEMORY_DEBUG"))
    std::fprintf(stderr, "cuda-memory: %s: %s\n", what, message);
}

void PromiseWorker::OnWorkComplete(Napi::Env env, napi_status status) {
  Release(env);
  napi_handle_scope scope = nullptr;
  if (napi_open_handle_scope(env, &scope) == napi_ok) {
    napi_value value = nullptr;
    bool reject = false;
    try {
      if (status == napi_cancelled) {
        reject = true;
        value = Napi::Error::New(env, "the operation was cancelled").Value();
      } else if (!exception_.empty()) {
        reject = true;
        value = Napi::Error::New(env, exception_).Value();
      } else {
        value = Settlement(env, &reject);
      }
    } catch (const Napi::Error& e) {
      // Either a real error to report, or the environment can no longer make objects; in the
      // second case e is empty and settling fails below, which is fine: nobody is left to wait.
      reject = true;
      value = e.IsEmpty() ? nullptr : static_cast<napi_value>(e.Value());
    } catch (const std::exception& e) {
      reject = true;
      ReportUnexpected("completing an asynchronous operation", e.what());
    } catch (...) {
      reject = true;
    }
    if (value == nullptr) napi_get_undefined(env, &value);
    // Fails with napi_pending_exception (napi_cannot_run_js from Node-API 10) once the
    // environment is being torn down; the promise then dies with it.
    if (reject)
      napi_reject_deferred(env, deferred_, value);
    else
      napi_resolve_deferred(env, deferred_, value);
    // Leave no exception pending behind a callback that returns into a dying environment.
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
      napi_value ignored;
      napi_get_and_clear_last_exception(env, &ignored);
    }
    napi_close_handle_scope(env, scope);
  }
  Destroy();
}

}  // namespace cm
