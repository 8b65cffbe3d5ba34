// The symbolic name of an errno value, as Node's error codes spell it (EACCES, ENOENT), for
// messages and the `errno` field of errors thrown to JavaScript. No Node, no CUDA.
#pragma once

namespace cm::core {

// The errno's symbolic name ("EUNKNOWN" for one not listed): the POSIX names, and Linux's own on
// Linux. Where two names share a value, the first listed wins: ENOTSUP over EOPNOTSUPP, as Node
// names it (EWOULDBLOCK and EDEADLOCK, EAGAIN's and EDEADLK's other names, are not listed).
const char* ErrnoName(int e);

}  // namespace cm::core
