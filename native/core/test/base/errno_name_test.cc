// Tests of the errno names that file errors carry: each value reads as Node's name for it, values
// with two names take the one Node gives, and a value nobody lists reads as EUNKNOWN.
#include "core/base/errno_name.h"

#include <cerrno>
#include <cstring>

#include "core/test/check.h"

using cm::core::ErrnoName;

namespace {

bool Is(int e, const char* name) { return std::strcmp(ErrnoName(e), name) == 0; }

}  // namespace

int main() {
  CHECK(Is(ENOENT, "ENOENT"));
  CHECK(Is(EACCES, "EACCES"));
  CHECK(Is(EISDIR, "EISDIR"));
  CHECK(Is(EINVAL, "EINVAL"));
  CHECK(Is(EIO, "EIO"));
  CHECK(Is(ENOSPC, "ENOSPC"));
  CHECK(Is(EMFILE, "EMFILE"));
  CHECK(Is(ENAMETOOLONG, "ENAMETOOLONG"));
  CHECK(Is(ELOOP, "ELOOP"));
  // Two names for one value: the first listed, as Node names it.
  CHECK(Is(EWOULDBLOCK, "EAGAIN"));
  CHECK(Is(EOPNOTSUPP, EOPNOTSUPP == ENOTSUP ? "ENOTSUP" : "EOPNOTSUPP"));
  CHECK(Is(EDEADLOCK, "EDEADLK"));
#if defined(__linux__)
  CHECK(Is(EREMOTEIO, "EREMOTEIO"));
  CHECK(Is(EHWPOISON, "EHWPOISON"));
#endif
  // Not an errno at all.
  CHECK(Is(0, "EUNKNOWN"));
  CHECK(Is(-1, "EUNKNOWN"));
  CHECK(Is(1 << 20, "EUNKNOWN"));
  return failures ? 1 : 0;
}
