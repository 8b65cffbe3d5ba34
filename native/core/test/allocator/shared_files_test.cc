// What a hostile or broken neighbour can do to the files processes share, with real processes
// (fork): another user's file, one open to others, a planted symbolic link, a ledger cut short
// while a member works, a lock held for ever, charges that would overflow, and members joining
// and leaving at the same moment. Runs as root in CI, so that files can be given to another uid.
// No Node, no GPU.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "core/allocator/ledger.h"
#include "core/memory/ipc_record.h"
#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20;
constexpr uid_t kOtherUid = 2001;
static std::string dir;

// The ledger's layout, as a process that writes it by hand sees it (core/allocator/ledger.cc).
constexpr off_t kHeaderBytes = 288, kSlotSize = 64;
constexpr off_t SlotAt(int i) { return kHeaderBytes + i * kSlotSize; }

static double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static void TestUntrustedFiles() {
  std::string path = Ledger::PathFor(dir, "trust", "simulated");
  {
    // Made by this user but left open to everyone (chmod 666): refused, file untouched.
    std::unique_ptr<Ledger> a(Ledger::Join(dir, "trust", "simulated", 10 * MiB, "limit", 0));
    CHECK(chmod(path.c_str(), 0666) == 0);
    std::string m = ErrorMessage([&] { Ledger::Join(dir, "trust", "simulated", 0, "", 0); });
    CHECK(m.find("mode 0666") != std::string::npos && m.find(path) != std::string::npos);
    CHECK(ErrorCode([&] { Ledger::Read(path); }) == "ERR_SHM_UNTRUSTED");
    CHECK(chmod(path.c_str(), 0600) == 0);
    CHECK(Ledger::Read(path).members.size() == 1);
    // Another user's ledger: refused, whatever its mode.
    if (geteuid() == 0) {
      CHECK(chown(path.c_str(), kOtherUid, kOtherUid) == 0);
      m = ErrorMessage([&] { Ledger::Join(dir, "trust", "simulated", 0, "", 0); });
      CHECK(m.find("owned by uid 2001") != std::string::npos);
      CHECK(ErrorCode([&] { Ledger::Read(path); }) == "ERR_SHM_UNTRUSTED");
      CHECK(chown(path.c_str(), 0, 0) == 0);
    }
  }
  CHECK(!Exists(path));  // the last member removed it
  // A symbolic link planted under the name, pointing at a file of the victim's: refused, and the
  // target is neither read nor changed.
  std::string target = dir + "/precious";
  int fd = open(target.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0 && write(fd, "keep", 4) == 4);
  close(fd);
  CHECK(symlink(target.c_str(), path.c_str()) == 0);
  std::string m = ErrorMessage([&] { Ledger::Join(dir, "trust", "simulated", 10 * MiB, "l", 0); });
  CHECK(m.find("symbolic link") != std::string::npos);
  struct stat st;
  CHECK(stat(target.c_str(), &st) == 0 && st.st_size == 4);
  unlink(path.c_str());
  unlink(target.c_str());
  // Not a regular file (a folder, a FIFO).
  CHECK(mkfifo(path.c_str(), 0600) == 0);
  CHECK(ErrorMessage([&] { Ledger::Read(path); }).find("not a regular file") != std::string::npos);
  unlink(path.c_str());
  // Files this library creates are 0600 whatever the umask.
  mode_t old = umask(0);
  {
    std::unique_ptr<Ledger> a(Ledger::Join(dir, "trust", "simulated", 10 * MiB, "limit", 0));
    CHECK(stat(path.c_str(), &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_uid == geteuid());
  }
  umask(old);
}

// A process that may write the ledger cuts it short and grows it back, again and again, while a
// member charges, releases and publishes: the member sees a damaged ledger, never a signal.
static void TestShrinkingLedger() {
  std::unique_ptr<Ledger> a(Ledger::Join(dir, "shrink", "simulated", 1 << 30, "limit", 0));
  std::string path = Ledger::PathFor(dir, "shrink", "simulated");
  pid_t cutter = fork();
  if (cutter == 0) {
    int fd = open(path.c_str(), O_RDWR);
    for (int i = 0; i < 20000; ++i) {
      if (ftruncate(fd, i % 2 ? 100 : 0) != 0) _exit(2);
      if (ftruncate(fd, kHeaderBytes + 128 * kSlotSize) != 0) _exit(2);
    }
    _exit(0);
  }
  int corrupt = 0, other = 0;
  for (int i = 0; i < 20000; ++i) {
    a->PublishInUse(static_cast<uint64_t>(i));
    std::string code = ErrorCode([&] {
      if (a->Charge(MiB, nullptr)) a->Release(MiB);
    });
    // Cut to nothing and grown back, the file reads as zeros: not a ledger any more.
    if (code == "ERR_GROUP_LEDGER_CORRUPT" || code == "ERR_GROUP_LEDGER_FOREIGN")
      ++corrupt;
    else if (!code.empty())
      ++other;
  }
  int status = 0;
  waitpid(cutter, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(other == 0);
  CHECK(corrupt > 0);  // found damaged, reported, and from then on left alone
  a.reset();           // leaving a damaged ledger: no signal either
  unlink(path.c_str());
}

// Holds the file's mutex byte from another open file description (as a stopped member would).
struct HeldMutex {
  explicit HeldMutex(const std::string& path) : fd(open(path.c_str(), O_RDWR)) {
    CHECK(fd >= 0 && shm::TryLock(fd, shm::kMutexByte) == 0);
  }
  ~HeldMutex() { close(fd); }
  int fd;
};

static void TestBoundedLockWaits() {
  std::unique_ptr<Ledger> a(Ledger::Join(dir, "stuck", "simulated", 64 * MiB, "limit", 0, 200));
  std::string path = Ledger::PathFor(dir, "stuck", "simulated");
  {
    HeldMutex held(path);
    auto t0 = std::chrono::steady_clock::now();
    std::string m = ErrorMessage([&] { Ledger::Join(dir, "stuck", "simulated", 0, "", 0, 200); });
    double ms = MsSince(t0);
    CHECK(m.find("waited 200 ms for the lock of " + path + " while joining group 'stuck'") == 0);
    CHECK(ms >= 190 && ms < 2000);
    CHECK(ErrorCode([&] { Ledger::Read(path, 100); }) == "ERR_SHM_LOCK_TIMEOUT");
    CHECK(ErrorCode([&] { a->Charge(MiB, nullptr); }) == "ERR_SHM_LOCK_TIMEOUT");
    CHECK(ErrorCode([&] { a->Snapshot(); }) == "ERR_SHM_LOCK_TIMEOUT");
    t0 = std::chrono::steady_clock::now();
    a->Release(MiB);  // never throws; bounded too
    CHECK(MsSince(t0) < 2000);
  }
  // Free again: everything works, and nothing was charged by the refused calls.
  CHECK(a->Charge(MiB, nullptr));
  a->Release(MiB);
  CHECK(Ledger::Read(path).charged == 0);
  // Leaving while the lock is held is bounded, and the slot is cleared by the next reader.
  {
    HeldMutex held(path);
    auto t0 = std::chrono::steady_clock::now();
    a.reset();
    CHECK(MsSince(t0) < 2000);
  }
  GroupSnapshot g = Ledger::Read(path);
  CHECK(g.members.empty() && g.reaped == 1);
  unlink(path.c_str());
  // An IPC record whose lock is held: opening it times out (the default wait, set short here).
  setenv("CUDA_MEMORY_LOCK_TIMEOUT_MS", "150", 1);
  IpcDescriptor d;
  d.device = "GPU-test";
  d.bytes = 4096;
  std::unique_ptr<IpcExportRecord> rec(IpcExportRecord::Create(dir, &d));
  pid_t child = fork();
  if (child == 0) {
    HeldMutex held(shm::Join(dir, d.record));
    sleep(5);
    _exit(0);
  }
  usleep(200000);
  pid_t importer = fork();
  if (importer == 0) {
    // Another process (an exporter cannot import its own record).
    std::string code = ErrorCode([&] { delete IpcImportRecord::Open(dir, d); });
    _exit(code == "ERR_SHM_LOCK_TIMEOUT" ? 0 : 1);
  }
  int status = 0;
  waitpid(importer, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  unsetenv("CUDA_MEMORY_LOCK_TIMEOUT_MS");
  CHECK(shm::DefaultLockTimeoutMs() == shm::kDefaultLockTimeoutMs);
}

// A member that is leaving has cleared its slot but may still hold the slot's lock for a moment:
// a process joining then takes another slot, and does not take the cleared slot for damage.
static void TestJoinBesideLeaver() {
  std::unique_ptr<Ledger> a(Ledger::Join(dir, "leaver", "simulated", 64 * MiB, "limit", 0));
  std::string path = Ledger::PathFor(dir, "leaver", "simulated");
  int fd = open(path.c_str(), O_RDWR);
  CHECK(shm::TryLock(fd, shm::kSlotBytes + 1) == 0);  // slot 1: free, its lock still held
  std::unique_ptr<Ledger> b;
  CHECK(ErrorCode([&] { b.reset(Ledger::Join(dir, "leaver", "simulated", 0, "", 0)); }) == "");
  CHECK(b && Ledger::Read(path).members.size() == 2);
  close(fd);
}

// Two processes join and leave 20,000 times each beside a third member that stays, then the same
// with no member staying (the file is removed and made again under them): never a refusal.
static void TestJoinLeaveRace() {
  for (bool stay : {true, false}) {
    std::string name = stay ? "race" : "race-empty";
    std::unique_ptr<Ledger> keeper;
    if (stay) keeper.reset(Ledger::Join(dir, name, "simulated", 64 * MiB, "limit", 0));
    const int kRounds = stay ? 20000 : 5000;
    pid_t kids[2];
    for (pid_t& k : kids) {
      k = fork();
      if (k == 0) {
        int refused = 0;
        for (int i = 0; i < kRounds; ++i) {
          std::string message;
          std::string code = ErrorCode([&] {
            try {
              std::unique_ptr<Ledger> l(Ledger::Join(dir, name, "simulated", 64 * MiB, "limit", 0));
              if (i % 8 == 0 && l->Charge(MiB, nullptr)) l->Release(MiB);
            } catch (const ShmError& e) {
              message = e.what();
              throw;
            }
          });
          if (!code.empty()) {
            if (refused++ == 0) std::fprintf(stderr, "join refused: %s\n", message.c_str());
          }
        }
        _exit(refused == 0 ? 0 : 1);
      }
    }
    int clean = 0;
    for (pid_t k : kids) {
      int status = 0;
      waitpid(k, &status, 0);
      clean += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(clean == 2);
    if (stay) {
      GroupSnapshot g = keeper->Snapshot();
      CHECK(g.members.size() == 1 && g.charged == 0);
    }
    keeper.reset();
    CHECK(!Exists(Ledger::PathFor(dir, name, "simulated")));
  }
}

// A writer that gives two live slots charges which sum past 2^64, with valid checksums: the sum
// is checked for overflow, so the ledger is damaged, not a budget with room to spare.
static void TestChargesOverflow() {
  std::unique_ptr<Ledger> a(Ledger::Join(dir, "overflow", "simulated", 64 * MiB, "limit", 0));
  std::string path = Ledger::PathFor(dir, "overflow", "simulated");
  int fd = open(path.c_str(), O_RDWR);
  for (int i : {5, 6}) {
    uint64_t slot[8] = {0x4d454d4245523031ull, 4242, 1ull << 63, 1ull << 63, 0, 0, 0, 0};
    slot[7] = shm::Fnv1a(slot, 48);
    CHECK(pwrite(fd, slot, sizeof slot, SlotAt(i)) == static_cast<ssize_t>(sizeof slot));
    CHECK(shm::TryLock(fd, shm::kSlotBytes + i) == 0);  // held, as a live member holds its slot
  }
  std::string m = ErrorMessage([&] { a->Charge(MiB, nullptr); });
  CHECK(m.find("overflow") != std::string::npos);
  close(fd);
  a.reset();
  unlink(path.c_str());
}

// A member publishes its in-use figure thousands of times a second, then stops: within a few
// milliseconds another process reads the last figure (the thread that writes what the calling
// thread left waiting), though the calling thread writes at most once a millisecond.
static void TestPublishedInUseSettles() {
  std::unique_ptr<Ledger> keeper(Ledger::Join(dir, "publish", "simulated", 64 * MiB, "limit", 0));
  std::string path = Ledger::PathFor(dir, "publish", "simulated");
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<Ledger> l(Ledger::Join(dir, "publish", "simulated", 0, "", 0));
    for (uint64_t i = 1; i <= 100000; ++i) l->PublishInUse(i);
    l->PublishInUse(777);
    usleep(50000);
    char done = 1;
    (void)!write(ready[1], &done, 1);
    usleep(500000);  // stays a member while the parent reads
    _exit(0);
  }
  char done = 0;
  CHECK(read(ready[0], &done, 1) == 1);
  GroupSnapshot g = Ledger::Read(path);
  bool seen = false;
  for (const GroupMember& m : g.members) seen = seen || (m.pid == child && m.bytes_in_use == 777);
  CHECK(seen);
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);
  close(ready[1]);
}

// IPC records: an importer refuses a record it may not trust; the sweep of stale records leaves
// other users' files alone and says how many it skipped.
static void TestIpcRecordTrust() {
  IpcDescriptor d;
  d.device = "GPU-test";
  d.bytes = 4096;
  std::unique_ptr<IpcExportRecord> rec(IpcExportRecord::Create(dir, &d));
  std::string path = shm::Join(dir, d.record);
  CHECK(chmod(path.c_str(), 0644) == 0);
  pid_t importer = fork();
  if (importer == 0)
    _exit(ErrorCode([&] { delete IpcImportRecord::Open(dir, d); }) == "ERR_SHM_UNTRUSTED" ? 0 : 1);
  int status = 0;
  waitpid(importer, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  rec.reset();
  if (geteuid() != 0) return;
  // A stale record (its exporter gone) of another user, and one of ours: the sweep removes ours.
  std::string theirs = shm::Join(dir, "cuda-memory-ipc.99999.0123456789abcdef");
  std::string ours = shm::Join(dir, "cuda-memory-ipc.99998.0123456789abcdef");
  for (const std::string& p : {theirs, ours}) {
    int fd = open(p.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0 && ftruncate(fd, kIpcRecordBytes) == 0);
    close(fd);
  }
  CHECK(chown(theirs.c_str(), kOtherUid, kOtherUid) == 0);
  CHECK(SweepStaleIpcRecords(dir) == 1);
  CHECK(Exists(theirs) && !Exists(ours));
  unlink(theirs.c_str());
}

int main() {
  dir = MakeSharedDir("cuda-memory-shared-files-test");
  TestUntrustedFiles();
  TestShrinkingLedger();
  TestBoundedLockWaits();
  TestJoinBesideLeaver();
  TestJoinLeaveRace();
  TestChargesOverflow();
  TestPublishedInUseSettles();
  TestIpcRecordTrust();
  rmdir(dir.c_str());
  std::printf("shared files tests: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures,
              failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
