// The addon's exports, registered from tables. Each concern lists its functions once, under the
// name JavaScript calls them (which is also the function's `name`), in an Init* function that
// addon.cc calls:
//
//   void InitStreams(Napi::Env env, Napi::Object exports) {
//     Register(env, exports, {
//         {"streamCreate", StreamCreate},
//         {"streamQuery", StreamQuery},
//     });
//   }
//
// lib/binding/types.ts declares the same names with their types; test/binding/load.test.js
// checks that the two lists agree.
#pragma once

#include <napi.h>

#include <initializer_list>

namespace cm {

struct Export {
  const char* name;
  Napi::Value (*function)(const Napi::CallbackInfo&);
};

inline void Register(Napi::Env env, Napi::Object exports, std::initializer_list<Export> table) {
  for (const Export& e : table) exports.Set(e.name, Napi::Function::New(env, e.function, e.name));
}

}  // namespace cm
