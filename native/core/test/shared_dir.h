// Helpers of the tests of what processes share: a fresh folder for their files, the code of the
// ShmError a call throws, and whether a file exists.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <functional>
#include <string>

#include "core/base/shm.h"

inline std::string MakeSharedDir(const char* name) {
  std::string shm = std::string("/dev/shm/") + name + "-XXXXXX";
  std::string tmp = std::string("/tmp/") + name + "-XXXXXX";
  if (char* d = mkdtemp(&shm[0])) return d;
  return mkdtemp(&tmp[0]);
}

inline std::string ErrorCode(const std::function<void()>& f) {
  try {
    f();
  } catch (const cm::core::ShmError& e) {
    return e.code;
  }
  return "";
}

inline std::string ErrorMessage(const std::function<void()>& f) {
  try {
    f();
  } catch (const cm::core::ShmError& e) {
    return e.what();
  }
  return "";
}

inline bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}
