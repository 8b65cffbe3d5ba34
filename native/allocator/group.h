// The JS side of group budgets (core/allocator/ledger.h): reading a group's ledger, and the object
// that describes a group in groupStats(), `cuda-memory top` and an OutOfMemoryError.
#pragma once

#include <napi.h>

#include "core/allocator/ledger.h"

namespace cm {

Napi::Object GroupObject(Napi::Env env, const core::GroupSnapshot& g);
void InitGroup(Napi::Env env, Napi::Object exports);

}  // namespace cm
