// Reading arguments from JavaScript: sizes, bounded integers, and the bytes of a view. Each
// throws a TypeError or RangeError naming the argument.
#pragma once

#include <napi.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/base/safe_size.h"

namespace cm {

// The bytes of a TypedArray or DataView (over an ArrayBuffer or a SharedArrayBuffer); false if
// `v` is neither.
bool HostView(Napi::Env env, Napi::Value v, char** data, size_t* length);

// An optional argument left out: undefined or null (one Node-API call).
bool Absent(Napi::Value v);

using core::IsSafeSize;

// Reads a non-negative safe integer (a Number or BigInt) naming `what` in the error.
uint64_t ReadSize(Napi::Env env, Napi::Value v, const char* what);
int ReadInt(Napi::Env env, Napi::Value v, const char* what, int lo, int hi);
std::string ReadString(Napi::Env env, Napi::Value v, const char* what);

}  // namespace cm
