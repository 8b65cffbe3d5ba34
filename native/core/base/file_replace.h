// Replacing a file whole: the new contents go to a temporary file beside the target (the same
// folder, so the same file system), which is renamed over the target once complete. A write that
// fails part-way leaves the target as it was and no file that looks complete. What writeFile()
// and saveSafetensors write through. No Node, no CUDA: POSIX only.
#pragma once

#include <string>

namespace cm::core {

// How a step of a replacement ended: done; refused, the target being a folder (kIsDirectory) or
// something other than a regular file (kNotRegular: a FIFO, socket or device); or a system call
// `call` on `path` (the path as given, or the temporary file's) failed with errno `err`.
struct ReplaceStatus {
  enum Kind { kOk, kIsDirectory, kNotRegular, kFailed };
  Kind kind = kOk;
  const char* call = "";
  std::string path;
  int err = 0;
  bool ok() const { return kind == kOk; }
};

// A file being replaced. Closes the temporary file, if still open, when it goes (the file stays:
// CommitReplace or AbandonReplace decide its fate).
struct Replacement {
  std::string path;    // as the caller gave it: what errors name
  std::string target;  // `path` with its symbolic links followed
  std::string tmp;     // beside the target
  int fd = -1;         // the temporary file, open to write; -1 once closed
  Replacement() = default;
  Replacement(const Replacement&) = delete;
  Replacement& operator=(const Replacement&) = delete;
  ~Replacement();
};

// The folder part of a path (dirname(3)).
std::string DirectoryOf(const std::string& path);

// The file a path names once its symbolic links are followed (a link is written through to its
// target, as fs.writeFile does; a dangling link's target is created). `path` itself when it is
// no link or does not exist. Fails with "readlink", or "open" and ELOOP past 40 links.
ReplaceStatus FollowLinks(const std::string& path, std::string* out);

// Starts replacing `path`: refuses a folder and anything else that is not a regular file;
// creates the temporary file (O_EXCL, O_NOFOLLOW), open in r->fd, with the mode (and owner and
// group, where permitted) of the file it replaces, else `mode` less the umask. On failure no
// temporary file is left.
ReplaceStatus BeginReplace(const std::string& path, int mode, Replacement* r);

// Ends a replacement: closes the temporary file (some file systems, NFS, report a failed write
// only there), renames it over the target, and with `sync` makes both durable (fsync of the file,
// then of the folder). The temporary file is removed on failure.
ReplaceStatus CommitReplace(Replacement* r, bool sync);

// Ends a replacement whose temporary file is not open here (begun by another call, filled by
// writes since): with `sync` the file is opened again, not following a link, to be synced. Then
// as CommitReplace.
ReplaceStatus CommitNamedReplace(Replacement* r, bool sync);

// Gives a replacement up: closes and removes the temporary file; the target stays as it was.
void AbandonReplace(Replacement* r);

}  // namespace cm::core
