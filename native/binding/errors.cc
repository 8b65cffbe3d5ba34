#include "binding/errors.h"

#include "binding/instance.h"

namespace cm {

namespace {
struct ErrorClasses : InstanceState {
  Napi::FunctionReference library, cuda, oom, unavailable, interprocess;
};
ErrorClasses& Classes(Napi::Env env) { return GetInstance(env).State<ErrorClasses>(); }
}  // namespace

void SetErrorClasses(Napi::Env env, Napi::Object o) {
  ErrorClasses& c = Classes(env);
  c.library = Napi::Persistent(o.Get("CudaMemoryError").As<Napi::Function>());
  c.cuda = Napi::Persistent(o.Get("CudaError").As<Napi::Function>());
  c.oom = Napi::Persistent(o.Get("OutOfMemoryError").As<Napi::Function>());
  c.unavailable = Napi::Persistent(o.Get("CudaUnavailableError").As<Napi::Function>());
  c.interprocess = Napi::Persistent(o.Get("InterprocessError").As<Napi::Function>());
}

Napi::Value MakeCudaError(Napi::Env env, cudaError_t err, const std::string& call,
                          const std::string& detail) {
  ErrorClasses& classes = Classes(env);
  std::string name = cudaGetErrorName(err);
  std::string message = call + " failed: " + name + " (" + cudaGetErrorString(err) + ")";
  if (!detail.empty()) message += "; " + detail;
  Napi::Object props = Napi::Object::New(env);
  props.Set("code", name);
  props.Set("cudaCode", static_cast<double>(err));
  props.Set("call", call);
  if (classes.cuda.IsEmpty()) return Napi::Error::New(env, message).Value();
  return classes.cuda.New({Napi::String::New(env, message), props});
}

Napi::Value MakeUnavailableError(Napi::Env env, const std::string& reason,
                                 const std::string& message) {
  ErrorClasses& classes = Classes(env);
  if (classes.unavailable.IsEmpty()) return Napi::Error::New(env, message).Value();
  return classes.unavailable.New({Napi::String::New(env, reason), Napi::String::New(env, message)});
}

Napi::Value MakeInterprocessError(Napi::Env env, const core::ShmError& e) {
  ErrorClasses& classes = Classes(env);
  Napi::Object props = Napi::Object::New(env);
  props.Set("code", e.code);
  props.Set("path", e.path);
  if (classes.interprocess.IsEmpty()) {
    Napi::Error err = Napi::Error::New(env, e.what());
    err.Set("code", e.code);
    return err.Value();
  }
  return classes.interprocess.New({Napi::String::New(env, e.what()), props});
}

void ThrowInterprocess(Napi::Env env, const core::ShmError& e) {
  ThrowValue(env, MakeInterprocessError(env, e));
}

void ThrowValue(Napi::Env env, Napi::Value error) { throw Napi::Error(env, error); }

Napi::Value MakeOutOfMemoryError(Napi::Env env, Napi::Object details) {
  ErrorClasses& classes = Classes(env);
  if (classes.oom.IsEmpty()) return Napi::Error::New(env, "out of memory").Value();
  return classes.oom.New({details});
}

void ThrowCuda(Napi::Env env, cudaError_t err, const std::string& call, const std::string& detail) {
  ThrowValue(env, MakeCudaError(env, err, call, detail));
}

Napi::Error LibraryError(Napi::Env env, const std::string& code, const std::string& message) {
  ErrorClasses& classes = Classes(env);
  if (classes.library.IsEmpty()) {
    Napi::Error e = Napi::Error::New(env, message);
    e.Set("code", code);
    return e;
  }
  return Napi::Error(
      env, classes.library.New({Napi::String::New(env, message), Napi::String::New(env, code)}));
}

void ThrowType(Napi::Env env, const std::string& message) {
  Napi::TypeError e = Napi::TypeError::New(env, message);
  e.Set("code", "ERR_INVALID_ARG_TYPE");
  throw e;
}

void ThrowRange(Napi::Env env, const std::string& message) {
  Napi::RangeError e = Napi::RangeError::New(env, message);
  e.Set("code", "ERR_OUT_OF_RANGE");
  throw e;
}

}  // namespace cm
