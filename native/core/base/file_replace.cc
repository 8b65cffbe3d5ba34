#include "core/base/file_replace.h"

#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <random>
#include <vector>

namespace cm::core {

namespace {

ReplaceStatus Failed(int err, const char* call, const std::string& path) {
  ReplaceStatus s;
  s.kind = ReplaceStatus::kFailed;
  s.call = call;
  s.path = path;
  s.err = err;
  return s;
}

ReplaceStatus Refused(ReplaceStatus::Kind kind, const std::string& path) {
  ReplaceStatus s;
  s.kind = kind;
  s.path = path;
  return s;
}

}  // namespace

Replacement::~Replacement() {
  if (fd >= 0) close(fd);
}

std::string DirectoryOf(const std::string& path) {
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  return dirname(buf.data());
}

ReplaceStatus FollowLinks(const std::string& path, std::string* out) {
  std::string p = path;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      *out = p;
      return {};
    }
    std::vector<char> buf(PATH_MAX);
    ssize_t n = readlink(p.c_str(), buf.data(), buf.size());
    if (n < 0) return Failed(errno, "readlink", path);
    std::string link(buf.data(), static_cast<size_t>(n));
    p = link[0] == '/' ? link : DirectoryOf(p) + "/" + link;
  }
  return Failed(ELOOP, "open", path);
}

ReplaceStatus BeginReplace(const std::string& path, int mode, Replacement* r) {
  r->path = path;
  if (ReplaceStatus s = FollowLinks(path, &r->target); !s.ok()) return s;
  struct stat st {};
  const bool exists = stat(r->target.c_str(), &st) == 0;
  if (exists) {
    if (S_ISDIR(st.st_mode)) return Refused(ReplaceStatus::kIsDirectory, path);
    if (!S_ISREG(st.st_mode)) return Refused(ReplaceStatus::kNotRegular, path);
  } else if (errno != ENOENT) {
    return Failed(errno, "stat", path);
  }
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && r->fd < 0; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".tmp-%08x", rd());
    r->tmp = r->target + suffix;
    // 0600 until the replaced file's mode is copied: never more open than either file.
    r->fd = open(r->tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                 exists ? 0600 : mode);
    if (r->fd < 0 && errno != EEXIST) return Failed(errno, "open", r->tmp);
  }
  if (r->fd < 0) return Failed(EEXIST, "open", r->tmp);
  if (exists) {
    // The owner changes only for a privileged caller, the group to one of the caller's groups;
    // otherwise the file is the caller's, as any new file would be.
    if (st.st_uid != geteuid() || st.st_gid != getegid()) {
      int ignored = fchown(r->fd, st.st_uid, st.st_gid);
      if (ignored != 0) ignored = fchown(r->fd, static_cast<uid_t>(-1), st.st_gid);
      (void)ignored;
    }
    if (fchmod(r->fd, st.st_mode & 07777) != 0) {
      ReplaceStatus s = Failed(errno, "fchmod", r->tmp);
      AbandonReplace(r);
      return s;
    }
  }
  return {};
}

ReplaceStatus CommitReplace(Replacement* r, bool sync) {
  ReplaceStatus s;
  if (sync && r->fd >= 0 && fsync(r->fd) != 0) s = Failed(errno, "fsync", r->path);
  if (r->fd >= 0) {
    int c = close(r->fd);
    r->fd = -1;
    if (c != 0 && s.ok()) s = Failed(errno, "close", r->path);
  }
  if (s.ok() && rename(r->tmp.c_str(), r->target.c_str()) != 0)
    s = Failed(errno, "rename", r->path);
  if (!s.ok()) {
    unlink(r->tmp.c_str());
    return s;
  }
  if (sync) {
    // The rename is durable once the folder is.
    int dir = open(DirectoryOf(r->target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      const bool failed = fsync(dir) != 0 && errno != EINVAL;
      const int err = errno;
      close(dir);
      if (failed) return Failed(err, "fsync (directory)", r->path);
    }
  }
  return {};
}

ReplaceStatus CommitNamedReplace(Replacement* r, bool sync) {
  if (sync && r->fd < 0) {
    r->fd = open(r->tmp.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (r->fd < 0) {
      ReplaceStatus s = Failed(errno, "open", r->tmp);
      unlink(r->tmp.c_str());
      return s;
    }
  }
  return CommitReplace(r, sync);
}

void AbandonReplace(Replacement* r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
  unlink(r->tmp.c_str());
}

}  // namespace cm::core
