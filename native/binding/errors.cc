#include "binding/errors.h"

#include "binding/instance.h"

namespace cm {

Napi::Value MakeCudaError(Napi::Env env, cudaError_t err, const std::string& call,
                          const std::string& detail) {
  Instance& inst = GetInstance(env);
  std::string name = cudaGetErrorName(err);
  std::string message = call + " failed: " + name + " (" + cudaGetErrorString(err) + ")";
  if (!detail.empty()) message += "; " + detail;
  Napi::Object props = Napi::Object::New(env);
  props.Set("code", name);
  props.Set("cudaCode", static_cast<double>(err));
  props.Set("call", call);
  if (inst.cuda_error.IsEmpty()) return Napi::Error::New(env, message).Value();
  return inst.cuda_error.New({Napi::String::New(env, message), props});
}

Napi::Value MakeUnavailableError(Napi::Env env, const std::string& reason,
                                 const std::string& message) {
  Instance& inst = GetInstance(env);
  if (inst.unavailable_error.IsEmpty()) return Napi::Error::New(env, message).Value();
  return inst.unavailable_error.New(
      {Napi::String::New(env, reason), Napi::String::New(env, message)});
}

Napi::Value MakeInterprocessError(Napi::Env env, const core::ShmError& e) {
  Instance& inst = GetInstance(env);
  Napi::Object props = Napi::Object::New(env);
  props.Set("code", e.code);
  props.Set("path", e.path);
  if (inst.interprocess_error.IsEmpty()) {
    Napi::Error err = Napi::Error::New(env, e.what());
    err.Set("code", e.code);
    return err.Value();
  }
  return inst.interprocess_error.New({Napi::String::New(env, e.what()), props});
}

void ThrowInterprocess(Napi::Env env, const core::ShmError& e) {
  ThrowValue(env, MakeInterprocessError(env, e));
}

void ThrowValue(Napi::Env env, Napi::Value error) { throw Napi::Error(env, error); }

void ThrowCuda(Napi::Env env, cudaError_t err, const std::string& call, const std::string& detail) {
  ThrowValue(env, MakeCudaError(env, err, call, detail));
}

Napi::Error LibraryError(Napi::Env env, const std::string& code, const std::string& message) {
  Instance& inst = GetInstance(env);
  if (inst.library_error.IsEmpty()) {
    Napi::Error e = Napi::Error::New(env, message);
    e.Set("code", code);
    return e;
  }
  return Napi::Error(
      env, inst.library_error.New({Napi::String::New(env, message), Napi::String::New(env, code)}));
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
