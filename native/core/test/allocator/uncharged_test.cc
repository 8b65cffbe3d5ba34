// UnchargedRecord: the processes a group's budget does not hold, in files beside its ledger that
// go with their process however it ends. No Node, no GPU.
#include "core/allocator/uncharged.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>

#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

int main() {
  std::string dir = MakeSharedDir("cm-uncharged");
  CHECK(UnchargedRecord::Read(dir, "g", "simulated").empty());
  {
    std::unique_ptr<UnchargedRecord> r(UnchargedRecord::Make(
        dir, "g", "simulated", "ERR_GROUP_LEDGER_CORRUPT", "the ledger is damaged", false));
    r->Count(3 << 20);
    r->Count(1 << 20);
    auto list = UnchargedRecord::Read(dir, "g", "simulated");
    CHECK(list.size() == 1);
    CHECK(list[0].pid == getpid() && list[0].code == "ERR_GROUP_LEDGER_CORRUPT");
    CHECK(list[0].detail == "the ledger is damaged" && !list[0].strict);
    CHECK(list[0].bytes == (4u << 20) && list[0].calls == 2);
    // Another group's, or another device's: not listed.
    CHECK(UnchargedRecord::Read(dir, "other", "simulated").empty());
    CHECK(UnchargedRecord::Read(dir, "g", "GPU-11111111-1111-1111-1111-111111111111").empty());
    // Made again by the same process (a record it replaces): still one.
    std::unique_ptr<UnchargedRecord> again(UnchargedRecord::Make(
        dir, "g2", "simulated", "ERR_SHM_LOCK_TIMEOUT", "the lock was not had", true));
    CHECK(UnchargedRecord::Read(dir, "g2", "simulated").size() == 1);
    CHECK(UnchargedRecord::Read(dir, "g2", "simulated")[0].strict);
    r->Remove();
    CHECK(UnchargedRecord::Read(dir, "g", "simulated").empty());
    CHECK(!Exists(r->path()));
  }
  // Gone with its process, however it ends: the next reader removes its file.
  int up[2];
  CHECK(pipe(up) == 0);
  pid_t child = fork();
  if (child == 0) {
    UnchargedRecord* r =
        UnchargedRecord::Make(dir, "dead", "simulated", "ERR_GROUP_FULL", "full", false);
    (void)r;
    char c = 1;
    (void)!write(up[1], &c, 1);
    pause();
    _exit(0);
  }
  char c;
  CHECK(read(up[0], &c, 1) == 1);
  auto alive = UnchargedRecord::Read(dir, "dead", "simulated");
  CHECK(alive.size() == 1 && alive[0].pid == child);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK(UnchargedRecord::Read(dir, "dead", "simulated").empty());
  CHECK(!Exists(alive[0].path));
  // A file of this pid left by an earlier process (nobody holds it): replaced.
  std::string stale =
      dir + "/" + UnchargedRecord::Prefix("stale", "simulated") + std::to_string(getpid());
  int fd = open(stale.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0600);
  CHECK(fd >= 0);
  close(fd);
  {
    std::unique_ptr<UnchargedRecord> r(
        UnchargedRecord::Make(dir, "stale", "simulated", "ERR_GROUP_NOT_FOUND", "none", false));
    CHECK(UnchargedRecord::Read(dir, "stale", "simulated").size() == 1);
  }
  // Another user's file, or one of the wrong size, is left alone and not listed.
  std::string foreign = dir + "/" + UnchargedRecord::Prefix("f", "simulated") + "1";
  fd = open(foreign.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0600);
  CHECK(fd >= 0 && write(fd, "x", 1) == 1);
  close(fd);
  CHECK(UnchargedRecord::Read(dir, "f", "simulated").empty());
  CHECK(Exists(foreign));
  // Names that cannot be part of a file name.
  CHECK(ErrorCode([&] { UnchargedRecord::Make(dir, "../x", "simulated", "c", "d", false); }) ==
        "ERR_GROUP_NAME");
  CHECK(UnchargedRecord::Read(dir, "../x", "simulated").empty());
  std::string cmd = "rm -rf " + dir;
  (void)!system(cmd.c_str());
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
