// What a hostile or broken neighbour can do to the files processes share, with real processes
// (fork): another user's file, one open to others, a planted symbolic link, a ledger cut short
// while a member works, a lock held for ever, charges that would overflow, and members joining
// and leaving at the same moment. Runs as root in CI, so that files can be given to another uid.
// No Node, no GPU.
#include <dirent.h>
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
constexpr off_t kHeaderBytes = 336, kSlotSize = 104;
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
  // An IPC record whose lock is held: opening, counting and freeing time out after the wait
  // given (the JS layer passes the lockTimeoutMs option or CUDA_MEMORY_LOCK_TIMEOUT_MS down;
  // the native layer reads no variable). The environment says otherwise and is not read.
  setenv("CUDA_MEMORY_LOCK_TIMEOUT_MS", "999999", 1);
  IpcDescriptor d;
  d.device = "GPU-test";
  d.bytes = 4096;
  std::unique_ptr<IpcExportRecord> rec(IpcExportRecord::Create(dir, &d, 150));
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
    auto t0 = std::chrono::steady_clock::now();
    std::string code = ErrorCode([&] { delete IpcImportRecord::Open(dir, d, 150); });
    _exit(code == "ERR_SHM_LOCK_TIMEOUT" && MsSince(t0) < 2000 ? 0 : 1);
  }
  int status = 0;
  waitpid(importer, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(ErrorCode([&] { rec->Importers(); }) == "ERR_SHM_LOCK_TIMEOUT");
  CHECK(ErrorCode([&] { rec->Withdraw(false); }) == "ERR_SHM_LOCK_TIMEOUT");
  CHECK(MsSince(t0) < 2000 && Exists(shm::Join(dir, d.record)));  // not removed on a timeout
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  unsetenv("CUDA_MEMORY_LOCK_TIMEOUT_MS");
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
    // state, pid, pool, peak, limit, joined, request, member limit, the three of a wait, in use,
    // and the checksum of all before in use.
    uint64_t slot[13] = {0x4d454d4245523031ull, 4242, 1ull << 63, 1ull << 63};
    slot[12] = shm::Fnv1a(slot, 88);
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

// The folder of this user's shared files: made 0700 whatever the umask; a link, a file, a folder
// open to others or another user's is refused with a sentence saying why and what to do, and no
// file is created or opened in it; so is a folder in a parent that anyone may rename in.
static void TestPrivateFolder() {
  std::string mine = shm::Join(dir, "cuda-memory-1234");
  mode_t old = umask(0077);
  CHECK(!shm::CheckFolder(mine, false) && !Exists(mine));
  CHECK(shm::CheckFolder(mine, true));
  struct stat st;
  CHECK(lstat(mine.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  CHECK(shm::CheckFolder(mine, true) && shm::CheckFolder(mine, false));  // there: used again
  umask(old);
  std::string path = Ledger::PathFor(mine, "inside", "simulated");
  {
    std::unique_ptr<Ledger> a(Ledger::Join(mine, "inside", "simulated", MiB, "limit", 0));
    CHECK(Exists(path));
  }
  // Open to others: refused; the files in it are neither created nor read.
  CHECK(chmod(mine.c_str(), 0755) == 0);
  std::string m = ErrorMessage([&] { Ledger::Join(mine, "inside", "simulated", MiB, "l", 0); });
  CHECK(m.find("the folder " + mine + " was not used: its mode 0755") == 0);
  CHECK(m.find("CUDA_MEMORY_SHM_DIR") != std::string::npos && !Exists(path));
  CHECK(ErrorCode([&] { Ledger::Read(path); }) == "ERR_SHM_UNTRUSTED");
  IpcDescriptor d;
  d.device = "GPU-test";
  d.bytes = 1;
  CHECK(ErrorCode([&] { delete IpcExportRecord::Create(mine, &d); }) == "ERR_SHM_UNTRUSTED");
  CHECK(chmod(mine.c_str(), 0700) == 0);
  // Another user's folder under this user's name (a squatter): refused, and said so.
  if (geteuid() == 0) {
    CHECK(chown(mine.c_str(), kOtherUid, kOtherUid) == 0);
    m = ErrorMessage([&] { Ledger::Join(mine, "inside", "simulated", MiB, "l", 0); });
    CHECK(m.find("owned by uid 2001") != std::string::npos && !Exists(path));
    CHECK(chown(mine.c_str(), 0, 0) == 0);
  }
  CHECK(rmdir(mine.c_str()) == 0);
  // A symbolic link to a folder of the victim's, and a plain file: refused, never followed.
  std::string target = shm::Join(dir, "elsewhere");
  CHECK(mkdir(target.c_str(), 0700) == 0 && symlink(target.c_str(), mine.c_str()) == 0);
  m = ErrorMessage([&] { shm::CheckFolder(mine, true); });
  CHECK(m.find("it is a symbolic link") != std::string::npos);
  CHECK(ErrorCode([&] { Ledger::Join(mine, "inside", "simulated", MiB, "l", 0); }) ==
        "ERR_SHM_UNTRUSTED");
  CHECK(!Exists(Ledger::PathFor(target, "inside", "simulated")));
  CHECK(unlink(mine.c_str()) == 0 && rmdir(target.c_str()) == 0);
  int fd = open(mine.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0);
  close(fd);
  CHECK(ErrorMessage([&] { shm::CheckFolder(mine, true); }).find("not a directory") !=
        std::string::npos);
  CHECK(unlink(mine.c_str()) == 0);
  // A parent that anyone may write and that is not sticky: refused (an entry could be renamed
  // away and replaced between a check and a use).
  std::string open_parent = shm::Join(dir, "open-parent");
  CHECK(mkdir(open_parent.c_str(), 0700) == 0 && chmod(open_parent.c_str(), 0777) == 0);
  std::string inside = shm::Join(open_parent, "cuda-memory-1234");
  CHECK(ErrorMessage([&] { shm::CheckFolder(inside, true); }).find("any user may rename") !=
        std::string::npos);
  CHECK(!Exists(inside));
  CHECK(chmod(open_parent.c_str(), 01777) == 0 && shm::CheckFolder(inside, true));
  CHECK(rmdir(inside.c_str()) == 0 && rmdir(open_parent.c_str()) == 0);
  CHECK(shm::DirName("/dev/shm/x") == "/dev/shm" && shm::DirName("x") == "." &&
        shm::DirName("/x") == "/" && shm::DirName("a//b") == "a");
}

// A planted file name reaches messages with its control characters written out: no escape
// sequence (window title, screen clear, colours) reaches a terminal that prints the message.
static void TestPrintableNames() {
  CHECK(shm::Printable("cuda-memory-group.a.simulated") == "cuda-memory-group.a.simulated");
  CHECK(shm::Printable("a\x1b]0;pwned\x07"
                       "b\x1b[2J\n\x7f") == "a\\x1b]0;pwned\\x07b\\x1b[2J\\x0a\\x7f");
  CHECK(shm::Printable("\xc2\x9b"
                       "31m") == "\\u{009b}31m");  // C1 CSI
  CHECK(shm::Printable("x\xe2\x80\xae"
                       "y\xe2\x81\xa6") == "x\\u{202e}y\\u{2066}");  // bidi
  CHECK(shm::Printable("caf\xc3\xa9") == "caf\xc3\xa9");             // other UTF-8 is kept
  std::string planted = shm::Join(dir, "cuda-memory-group.\x1b]0;owned\x07.simulated");
  int fd = open(planted.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  CHECK(fd >= 0);
  close(fd);
  std::string m = ErrorMessage([&] { Ledger::Read(planted); });
  CHECK(!m.empty() && m.find('\x1b') == std::string::npos && m.find('\x07') == std::string::npos);
  CHECK(m.find("\\x1b]0;owned\\x07") != std::string::npos);
  unlink(planted.c_str());
}

// The thread that writes the in-use figures sleeps while nothing waits, and ends when the last
// member leaves (it used to wake every 2 ms for ever). In a child, where no other member lives.
static int Tasks() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (struct dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

static void TestPublisherSleepsAndStops() {
  pid_t child = fork();
  if (child == 0) {
    int bad = 0;
    int before = Tasks();
    if (Ledger::PublisherStatus().running) bad |= 1;
    std::unique_ptr<Ledger> a(Ledger::Join(dir, "quiet", "simulated", MiB, "limit", 0));
    std::unique_ptr<Ledger> b(Ledger::Join(dir, "quiet", "simulated", 0, "", 0));
    if (!Ledger::PublisherStatus().running || Tasks() != before + 1) bad |= 2;
    uint64_t w0 = Ledger::PublisherStatus().wakeups;
    usleep(300000);  // idle: the old thread woke about 150 times in this
    uint64_t idle = Ledger::PublisherStatus().wakeups - w0;
    if (idle > 0) bad |= 4;
    for (uint64_t i = 1; i <= 10000; ++i) a->PublishInUse(i);  // most within a millisecond
    usleep(50000);
    uint64_t busy = Ledger::PublisherStatus().wakeups - w0;
    if (busy < 1 || busy > 200) bad |= 8;
    GroupSnapshot g = Ledger::Read(Ledger::PathFor(dir, "quiet", "simulated"));
    if (g.members.size() != 2 || g.members[0].bytes_in_use + g.members[1].bytes_in_use != 10000)
      bad |= 16;
    a.reset();
    if (!Ledger::PublisherStatus().running) bad |= 32;  // one member is left
    b.reset();
    for (int i = 0; i < 200 && (Ledger::PublisherStatus().running || Tasks() != before); ++i)
      usleep(5000);
    if (Ledger::PublisherStatus().running || Tasks() != before) bad |= 64;
    // A member joining later starts a thread again, and it writes.
    std::unique_ptr<Ledger> c(Ledger::Join(dir, "quiet", "simulated", MiB, "limit", 0));
    c->PublishInUse(1);
    c->PublishInUse(5);
    usleep(50000);
    if (Ledger::Read(Ledger::PathFor(dir, "quiet", "simulated")).members[0].bytes_in_use != 5)
      bad |= 128;
    if (!Ledger::PublisherStatus().running) bad |= 256;
    c.reset();
    std::fprintf(stderr, "publisher: %llu wake-ups idle for 300 ms, %llu for 10,000 changes\n",
                 static_cast<unsigned long long>(idle), static_cast<unsigned long long>(busy));
    _exit(bad);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (WIFEXITED(status) && WEXITSTATUS(status))
    std::fprintf(stderr, "publisher test bits: %d\n", WEXITSTATUS(status));
}

int main() {
  dir = MakeSharedDir("cuda-memory-shared-files-test");
  TestPrivateFolder();
  TestPrintableNames();
  TestPublisherSleepsAndStops();
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
