// shm::ProbeRoom, which tells before a program starts whether a ledger could be made: it makes the
// folder as a ledger's creator would, leaves nothing else behind, and refuses a folder another
// user could enter. (A file system too full for the file is tested with a small tmpfs by
// test/cli/run.test.js.) No Node, no GPU.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "core/base/shm.h"
#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

namespace {

int Entries(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  return n;
}

}  // namespace

int main() {
  std::string base = MakeSharedDir("cm-probe-test");
  std::string folder = base + "/cuda-memory-test";
  std::string path = folder + "/cuda-memory-group.probe.simulated";

  // The folder is made (mode 0700), the probe file removed, the name never made.
  shm::ProbeRoom(path, 8480);
  struct stat st;
  CHECK(stat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  CHECK(Entries(folder) == 0);
  CHECK(!Exists(path));
  shm::ProbeRoom(path, 8480);  // again, in the folder that is there now
  CHECK(Entries(folder) == 0);

  // A folder other users may enter: refused, naming it, with nothing made in it.
  CHECK(chmod(folder.c_str(), 0755) == 0);
  CHECK(ErrorCode([&] { shm::ProbeRoom(path, 8480); }) == "ERR_SHM_UNTRUSTED");
  CHECK(ErrorMessage([&] { shm::ProbeRoom(path, 8480); }).find(folder) != std::string::npos);
  CHECK(Entries(folder) == 0);

  CHECK(rmdir(folder.c_str()) == 0);
  CHECK(rmdir(base.c_str()) == 0);
  std::printf("probe tests: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
