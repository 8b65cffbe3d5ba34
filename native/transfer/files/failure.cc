#include "transfer/files/failure.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "binding/instance.h"
#include "core/base/errno_name.h"

namespace cm::files {

namespace {

// The codes of file errors by errno: lib/base/files.ts's table, the one there is, handed over by
// init (SetFileCodes). This file names no code of a failed system call itself, so the two
// languages cannot disagree on one.
struct FileCodes : InstanceState {
  std::map<int, std::string> by_errno;
  std::string otherwise;
};

std::string FileCodeOf(Napi::Env env, int err) {
  const FileCodes& t = GetInstance(env).State<FileCodes>();
  auto it = t.by_errno.find(err);
  return it == t.by_errno.end() ? t.otherwise : it->second;
}

}  // namespace

std::string Quote(const std::string& path) {
  std::string out = "'";
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

FileFailure Fail(const std::string& code, const std::string& path, const std::string& message) {
  FileFailure f;
  f.code = code;
  f.path = path;
  f.message = message;
  return f;
}

FileFailure FromErrno(int e, const char* syscall, const std::string& path,
                      const std::string& where) {
  FileFailure f = Fail("", path,
                       std::string(syscall) + " of " + Quote(path) + where +
                           " failed: " + std::strerror(e) + " (" + core::ErrnoName(e) + ")");
  f.syscall = syscall;
  f.err = e;
  return f;
}

Napi::Value MakeFileError(Napi::Env env, const FileFailure& f) {
  if (f.cuda) return MakeCudaError(env, f.cuda.code, f.cuda.call, f.cuda.detail);
  Napi::Error e = LibraryError(env, f.err ? FileCodeOf(env, f.err) : f.code, f.message);
  e.Set("path", f.path);
  if (!f.syscall.empty()) e.Set("syscall", f.syscall);
  if (f.err) e.Set("errno", core::ErrnoName(f.err));
  return e.Value();
}

FileFailure FromStatus(const core::FileStatus& s, const std::string& path, int fd,
                       uint64_t expected_end) {
  if (s.kind == core::FileStatus::kTransport)
    return FileFailure{
        "", "", path,
        "", 0,  Error{static_cast<cudaError_t>(s.transport.code), s.transport.call, ""}};
  if (s.kind == core::FileStatus::kShrunk) {
    struct stat now {};
    fstat(fd, &now);
    // With several readers the first to find the end may have started past it.
    const uint64_t ended = std::min<uint64_t>(s.offset, static_cast<uint64_t>(now.st_size));
    return Fail("ERR_FILE_SHRUNK", path,
                Quote(path) + " ended at byte " + std::to_string(ended) +
                    " while being read up to byte " + std::to_string(expected_end) + " (it has " +
                    std::to_string(now.st_size) + " bytes now): it shrank, or was being rewritten");
  }
  return FromErrno(s.err, s.call.c_str(), path, " at byte " + std::to_string(s.offset));
}

FileFailure FromReplace(const core::ReplaceStatus& s) {
  switch (s.kind) {
    case core::ReplaceStatus::kOk:
      return {};
    case core::ReplaceStatus::kIsDirectory:
      return Fail("ERR_FILE_IS_DIRECTORY", s.path, Quote(s.path) + " is a directory, not a file");
    case core::ReplaceStatus::kNotRegular:
      return Fail("ERR_FILE_NOT_REGULAR", s.path,
                  Quote(s.path) + " exists and is not a regular file (a FIFO, socket or device); " +
                      "only regular files are replaced");
    case core::ReplaceStatus::kFailed:
      break;
  }
  return FromErrno(s.err, s.call, s.path);
}

void UseFileCodes(Napi::Env env, std::map<int, std::string> by_errno, std::string otherwise) {
  FileCodes& t = GetInstance(env).State<FileCodes>();
  t.by_errno = std::move(by_errno);
  t.otherwise = std::move(otherwise);
}

}  // namespace cm::files
