#include "binding/args.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "binding/errors.h"

namespace cm {

bool HostView(Napi::Env env, Napi::Value v, char** data, size_t* length) {
  void* p = nullptr;
  napi_value ab;
  size_t offset = 0;
  // The data pointers Node-API returns already include the view's offset, and, unlike
  // ArrayBuffer(), these calls accept views over SharedArrayBuffers.
  if (v.IsTypedArray()) {
    napi_typedarray_type type;
    size_t count = 0;
    if (napi_get_typedarray_info(env, v, &type, &count, &p, &ab, &offset) != napi_ok) return false;
    *length = v.As<Napi::TypedArray>().ByteLength();
  } else if (v.IsDataView()) {
    if (napi_get_dataview_info(env, v, length, &p, &ab, &offset) != napi_ok) return false;
  } else {
    return false;
  }
  *data = static_cast<char*>(p);
  return true;
}

bool Absent(Napi::Value v) {
  const napi_valuetype type = v.Type();
  return type == napi_undefined || type == napi_null;
}

uint64_t ReadSize(Napi::Env env, Napi::Value v, const char* what) {
  // One Node-API call for the common case (a number): every copy reads three sizes.
  double d = 0;
  napi_status s = napi_get_value_double(env, v, &d);
  if (s != napi_ok) ThrowType(env, std::string(what) + " must be a number");
  CheckRange(env, what, d, 0.0, 9007199254740991.0, "a non-negative safe integer");
  return static_cast<uint64_t>(d);
}

int ReadInt(Napi::Env env, Napi::Value v, const char* what, int lo, int hi) {
  if (!v.IsNumber()) ThrowType(env, std::string(what) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  CheckRange(env, what, d, lo, hi);
  return static_cast<int>(d);
}

void ThrowOutOfRange(Napi::Env env, const char* what, const std::string& expected,
                     const std::string& value) {
  ThrowRange(env,
             std::string(what) + " must be " + expected + (value.empty() ? "" : ", got " + value));
}

std::string ReadString(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsString()) ThrowType(env, std::string(what) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

std::string NumberText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e21) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The fewest digits that read back as the same double, as JavaScript prints it.
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace cm
