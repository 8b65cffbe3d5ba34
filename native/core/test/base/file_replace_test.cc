// Tests of replacing a file whole, on real files in a fresh folder: the new contents reach the
// target only at the commit, a replacement given up or failed midway leaves the target as it was
// and no temporary file, the replaced file's mode is kept, symbolic links are written through,
// and what is refused or fails says which call on which path.
#include "core/base/file_replace.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/test/check.h"

using cm::core::AbandonReplace;
using cm::core::BeginReplace;
using cm::core::CommitNamedReplace;
using cm::core::CommitReplace;
using cm::core::DirectoryOf;
using cm::core::Replacement;
using cm::core::ReplaceStatus;

namespace {

std::string MakeDir() {
  std::string d = "/tmp/cm-file-replace-XXXXXX";
  return mkdtemp(&d[0]);
}

// The names in a folder, sorted.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.push_back(e->d_name);
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

void Put(const std::string& path, const std::string& text, mode_t mode = 0644) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  CHECK(fd >= 0);
  CHECK(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
}

std::string Get(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return "<none>";
  char buf[256];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

void Write(const Replacement& r, const std::string& text) {
  CHECK(write(r.fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  CHECK(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

bool IsLink(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// The temporary file's name: the target's, then ".tmp-" and eight hex digits.
bool TmpNameOf(const Replacement& r) {
  const std::string& t = r.tmp;
  if (t.size() != r.target.size() + 13 || t.compare(0, r.target.size(), r.target) != 0)
    return false;
  if (t.compare(r.target.size(), 5, ".tmp-") != 0) return false;
  return t.find_first_not_of("0123456789abcdef", r.target.size() + 5) == std::string::npos;
}

// Whether a step failed in the system call `call` with `err`, naming `path`.
bool FailedAs(const ReplaceStatus& s, const char* call, int err, const std::string& path) {
  return s.kind == ReplaceStatus::kFailed && std::string(s.call) == call && s.err == err &&
         s.path == path;
}

// `path` holding `before`, and a replacement of it begun, `after` written to it.
void Begun(Replacement* r, const std::string& path, const std::string& before,
           const std::string& after) {
  Put(path, before);
  CHECK(BeginReplace(path, 0666, r).ok());
  Write(*r, after);
}

void NewFile(const std::string& dir) {
  const std::string path = dir + "/new.bin";
  Replacement r;
  CHECK(BeginReplace(path, 0640, &r).ok());
  CHECK(r.path == path);
  CHECK(r.target == path);
  CHECK(TmpNameOf(r));
  CHECK(r.fd >= 0);
  // Nothing reaches the target before the commit.
  Write(r, "new contents");
  CHECK(Get(path) == "<none>");
  CHECK(Get(r.tmp) == "new contents");
  CHECK(CommitReplace(&r, false).ok());
  CHECK(r.fd == -1);
  CHECK(Get(path) == "new contents");
  // The mode asked for, less the umask (022 here).
  CHECK(ModeOf(path) == 0640);
  CHECK(Names(dir) == std::vector<std::string>{"new.bin"});
  unlink(path.c_str());
}

void ExistingFile(const std::string& dir, bool sync) {
  const std::string path = dir + "/old.bin";
  Put(path, "old contents", 0604);
  chmod(path.c_str(), 0604);
  struct stat before {};
  stat(path.c_str(), &before);
  Replacement r;
  CHECK(BeginReplace(path, 0666, &r).ok());
  // The replaced file's mode, not the one asked for.
  CHECK(ModeOf(r.tmp) == 0604);
  Write(r, "replaced");
  CHECK(Get(path) == "old contents");
  CHECK(CommitReplace(&r, sync).ok());
  CHECK(Get(path) == "replaced");
  CHECK(ModeOf(path) == 0604);
  struct stat after {};
  stat(path.c_str(), &after);
  CHECK(after.st_ino != before.st_ino);  // a new file renamed over the old one
  CHECK(Names(dir) == std::vector<std::string>{"old.bin"});
  unlink(path.c_str());
}

// Given up after half of the new contents: the target keeps its own, and no temporary file stays.
void AbandonedMidway(const std::string& dir) {
  Replacement r;
  Begun(&r, dir + "/kept.bin", "as it was", "half of the ne");
  AbandonReplace(&r);
  CHECK(r.fd == -1);
  CHECK(Get(r.path) == "as it was" && Names(dir) == std::vector<std::string>{"kept.bin"});
  unlink(r.path.c_str());
}

// The rename fails (the target became a folder meanwhile): the folder stays, the temporary
// file goes, and the failure names the call and the path as given.
void RenameFails(const std::string& dir) {
  const std::string path = dir + "/turned.bin";
  Replacement r;
  Begun(&r, path, "x", "never lands");
  unlink(path.c_str());
  CHECK(mkdir(path.c_str(), 0755) == 0);
  ReplaceStatus s = CommitReplace(&r, true);
  CHECK(FailedAs(s, "rename", EISDIR, path));
  CHECK(r.fd == -1);
  CHECK(Names(dir) == std::vector<std::string>{"turned.bin"});
  struct stat st {};
  CHECK(stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  rmdir(path.c_str());
}

// A link is written through to the file it names, relative links from the link's own folder;
// the link stays a link.
void Links(const std::string& dir) {
  const std::string real = dir + "/real.bin", sub = dir + "/sub", link = dir + "/sub/link";
  Put(real, "before", 0600);
  mkdir(sub.c_str(), 0755);
  CHECK(symlink("../real.bin", link.c_str()) == 0);
  Replacement r;
  CHECK(BeginReplace(link, 0666, &r).ok());
  CHECK(r.path == link);
  CHECK(r.target == sub + "/../real.bin");
  CHECK(DirectoryOf(r.tmp) == sub + "/..");
  Write(r, "through the link");
  CHECK(CommitReplace(&r, false).ok());
  CHECK(IsLink(link));
  CHECK(Get(real) == "through the link");
  CHECK(ModeOf(real) == 0600);
  CHECK(Names(dir) == (std::vector<std::string>{"real.bin", "sub"}));
  CHECK(Names(sub) == std::vector<std::string>{"link"});

  // An absolute link to a link: followed to the end.
  const std::string hop = dir + "/hop";
  CHECK(symlink(link.c_str(), hop.c_str()) == 0);
  std::string out;
  CHECK(cm::core::FollowLinks(hop, &out).ok());
  CHECK(out == sub + "/../real.bin");

  // A dangling link: its target is created.
  const std::string dangling = dir + "/dangling", made = dir + "/made.bin";
  CHECK(symlink("made.bin", dangling.c_str()) == 0);
  Replacement d;
  CHECK(BeginReplace(dangling, 0644, &d).ok());
  CHECK(d.target == dir + "/made.bin");
  Write(d, "made");
  CHECK(CommitReplace(&d, false).ok());
  CHECK(IsLink(dangling));
  CHECK(Get(made) == "made");

  // A circle of links: ELOOP, as open(2) would say, on the path as given.
  const std::string a = dir + "/a", b = dir + "/b";
  CHECK(symlink("b", a.c_str()) == 0);
  CHECK(symlink("a", b.c_str()) == 0);
  Replacement c;
  ReplaceStatus s = BeginReplace(a, 0666, &c);
  CHECK(FailedAs(s, "open", ELOOP, a));
  CHECK(c.fd == -1);
  for (const std::string& p : {link, hop, dangling, made, real, a, b}) unlink(p.c_str());
  rmdir(sub.c_str());
}

// A folder, a link to one, and a FIFO are refused before any temporary file is made.
void Refusals(const std::string& dir) {
  const std::string folder = dir + "/folder", to_folder = dir + "/to-folder", fifo = dir + "/fifo";
  mkdir(folder.c_str(), 0755);
  CHECK(symlink("folder", to_folder.c_str()) == 0);
  CHECK(mkfifo(fifo.c_str(), 0644) == 0);
  for (const std::string& p : {folder, to_folder}) {
    Replacement r;
    ReplaceStatus s = BeginReplace(p, 0666, &r);
    CHECK(s.kind == ReplaceStatus::kIsDirectory);
    CHECK(s.path == p);
    CHECK(r.fd == -1);
  }
  Replacement f;
  ReplaceStatus s = BeginReplace(fifo, 0666, &f);
  CHECK(s.kind == ReplaceStatus::kNotRegular);
  CHECK(s.path == fifo);
  CHECK(Names(dir) == (std::vector<std::string>{"fifo", "folder", "to-folder"}));
  CHECK(Names(folder).empty());
  for (const std::string& p : {to_folder, fifo}) unlink(p.c_str());
  rmdir(folder.c_str());
}

// System calls that fail name themselves and the path they were given.
void Failures(const std::string& dir) {
  // stat: a file where a folder should be.
  const std::string file = dir + "/plain";
  Put(file, "p");
  Replacement a;
  ReplaceStatus s = BeginReplace(file + "/child", 0666, &a);
  CHECK(FailedAs(s, "stat", ENOTDIR, file + "/child"));
  // open: no such folder; the temporary file's path is named.
  const std::string missing = dir + "/no-such-folder/x.bin";
  Replacement b;
  s = BeginReplace(missing, 0666, &b);
  CHECK(FailedAs(s, "open", ENOENT, b.tmp));
  CHECK(TmpNameOf(b));
  CHECK(Names(dir) == std::vector<std::string>{"plain"});
  unlink(file.c_str());
}

// A replacement begun in one call and committed in another (as fileReplaceBegin and
// fileReplaceCommit do): the temporary file outlives its first Replacement, closed.
void Named(const std::string& dir) {
  const std::string path = dir + "/named.bin";
  std::string target, tmp;
  {
    Replacement r;
    Begun(&r, path, "first", "second");
    target = r.target;
    tmp = r.tmp;
  }
  CHECK(Get(tmp) == "second");
  CHECK(Get(path) == "first");
  for (bool sync : {true, false}) {
    Replacement r;
    r.path = path;
    r.target = target;
    r.tmp = tmp;
    if (!sync) {
      Replacement again;
      CHECK(BeginReplace(path, 0666, &again).ok());
      Write(again, "third");
      r.tmp = again.tmp;
    }
    CHECK(CommitNamedReplace(&r, sync).ok());
    CHECK(r.fd == -1);
    CHECK(Get(path) == (sync ? "second" : "third"));
    CHECK(Names(dir) == std::vector<std::string>{"named.bin"});
  }
  // Gone meanwhile: with sync the reopening fails on the temporary file's path, without it the
  // rename, on the path as given.
  for (bool sync : {true, false}) {
    Replacement r;
    r.path = path;
    r.target = target;
    r.tmp = target + ".tmp-00000000";
    ReplaceStatus s = CommitNamedReplace(&r, sync);
    CHECK(FailedAs(s, sync ? "open" : "rename", ENOENT, sync ? r.tmp : path));
    CHECK(Get(path) == "third");
  }
  // A link in the temporary file's place is not followed when it is reopened: removed instead.
  const std::string elsewhere = dir + "/elsewhere";
  Put(elsewhere, "untouched");
  Replacement r;
  r.path = path;
  r.target = target;
  r.tmp = target + ".tmp-11111111";
  CHECK(symlink(elsewhere.c_str(), r.tmp.c_str()) == 0);
  ReplaceStatus s = CommitNamedReplace(&r, true);
  CHECK(FailedAs(s, "open", ELOOP, r.tmp));
  CHECK(Get(elsewhere) == "untouched");
  CHECK(Get(path) == "third");
  CHECK(Names(dir) == (std::vector<std::string>{"elsewhere", "named.bin"}));
  unlink(elsewhere.c_str());
  unlink(path.c_str());
}

}  // namespace

int main() {
  umask(022);
  CHECK(DirectoryOf("a/b") == "a");
  CHECK(DirectoryOf("b") == ".");
  CHECK(DirectoryOf("/b") == "/");
  const std::string dir = MakeDir();
  NewFile(dir);
  ExistingFile(dir, false);
  ExistingFile(dir, true);
  AbandonedMidway(dir);
  RenameFails(dir);
  Links(dir);
  Refusals(dir);
  Failures(dir);
  Named(dir);
  CHECK(Names(dir).empty());
  rmdir(dir.c_str());
  return failures ? 1 : 0;
}
