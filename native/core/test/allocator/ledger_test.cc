// Tests of what processes share, with real processes (fork). The group ledger: charges within the
// budget, refusals that list the members, a SIGKILLed member's charge coming back, concurrent
// members never passing the budget, damaged or foreign files refused. IPC records: importers
// counted, forged handles and gone exporters refused. No Node, no GPU.
#include "core/allocator/ledger.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/allocator/group_upstream.h"
#include "core/allocator/pool.h"
#include "core/memory/ipc_record.h"
#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20;
static std::string dir;

static void TestJoinChargeRelease() {
  std::unique_ptr<Ledger> a(Ledger::Join(dir, "basic", "simulated", 100 * MiB, "limit", 0));
  std::string path = Ledger::PathFor(dir, "basic", "simulated");
  CHECK(Exists(path));
  // A second allocator in the same process is a second member (its own descriptor and slot).
  std::unique_ptr<Ledger> b(Ledger::Join(dir, "basic", "simulated", 0, "", 0));
  CHECK(b->budget() == 100 * MiB);
  // What the interposer asks the library's copy of this code: its members, by the ledger's name.
  GroupRefusal r;
  CHECK(a->Charge(60 * MiB, &r));
  CHECK(b->Charge(40 * MiB, &r));
  CHECK(!b->Charge(1, &r));
  CHECK(r.requested == 1 && r.group.charged == 100 * MiB && r.group.members.size() == 2);
  CHECK(r.Sentence().find("pid " + std::to_string(getpid()) + " (this allocator) pool 40.00 MiB") !=
        std::string::npos);
  b->PublishInUse(12345);
  GroupSnapshot g = Ledger::Read(path);
  CHECK(g.charged == 100 * MiB && g.budget == 100 * MiB && g.members.size() == 2);
  CHECK(g.members[1].bytes_in_use == 12345 && g.members[0].peak_pool_bytes == 60 * MiB);
  a->Release(20 * MiB);
  CHECK(b->Charge(20 * MiB, &r));
  CHECK(Ledger::Read(path).members[1].pool_bytes == 60 * MiB);
  // A different budget while members are live is refused; none joins the group's budget.
  CHECK(ErrorCode([&] { delete Ledger::Join(dir, "basic", "simulated", 50 * MiB, "x", 0); }) ==
        "ERR_GROUP_BUDGET_MISMATCH");
  a.reset();
  CHECK(Ledger::Read(path).members.size() == 1 && Ledger::Read(path).charged == 60 * MiB);
  b.reset();
  CHECK(!Exists(path));  // the last member removes the file
  CHECK(ErrorCode([&] { delete Ledger::Join(dir, "basic", "simulated", 0, "", 0); }) ==
        "ERR_GROUP_NOT_FOUND");
  CHECK(ErrorCode([&] { delete Ledger::Join(dir, "../x", "simulated", MiB, "", 0); }) ==
        "ERR_GROUP_NAME");
}

static void TestKilledMemberReturns() {
  std::unique_ptr<Ledger> a(Ledger::Join(dir, "kill", "simulated", 100 * MiB, "limit", 0));
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t child = fork();
  if (child == 0) {
    Ledger* l = Ledger::Join(dir, "kill", "simulated", 0, "", 0);
    bool ok = l->Charge(70 * MiB, nullptr);
    char c = ok ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();  // until SIGKILLed, still holding its 70 MiB
    _exit(0);
  }
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
  GroupRefusal r;
  CHECK(!a->Charge(40 * MiB, &r));
  CHECK(r.group.members.size() == 2 && r.group.charged == 70 * MiB);
  bool listed = false;
  for (const GroupMember& m : r.group.members) listed |= m.pid == child && m.pool_bytes == 70 * MiB;
  CHECK(listed);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  // The next charge finds the dead member's slot unheld and takes its share back.
  CHECK(a->Charge(100 * MiB, &r));
  GroupSnapshot g = a->Snapshot();
  CHECK(g.members.size() == 1 && g.charged == 100 * MiB);
  close(ready[0]);
  close(ready[1]);
}

// One member of the storm below: random charges and releases, checking now and then that the
// group never holds more than its budget and that its own slot says what it holds. Exits 0 when
// every check held.
static int StormMember(int k) {
  std::unique_ptr<Ledger> l(Ledger::Join(dir, "storm", "simulated", 0, "", 0));
  std::string path = Ledger::PathFor(dir, "storm", "simulated");
  constexpr int kSteps = 3000;
  std::mt19937 rng(k + 1);
  uint64_t held = 0;
  int bad = 0;
  for (int i = 0; i < kSteps; ++i) {
    if (held && rng() % 2) {
      uint64_t give = (rng() % held) + 1;
      l->Release(give);
      held -= give;
    } else {
      uint64_t want = (rng() % 8 + 1) * MiB;
      if (l->Charge(want, nullptr)) held += want;
    }
    if (i % 50 == 0) {
      GroupSnapshot g = Ledger::Read(path);
      if (g.charged > g.budget) ++bad;
      for (const GroupMember& m : g.members)
        if (m.pid == getpid() && m.pool_bytes != held) ++bad;
    }
  }
  return bad ? 1 : 0;
}

// The members run as fresh processes of this program (posix_spawn of /proc/self/exe), not as
// forks: this process has a publishing thread by now, and a fork taken while another thread holds
// a lock of the allocator (AddressSanitizer's, here) leaves the child waiting on it for ever.
static void TestConcurrentMembers() {
  std::unique_ptr<Ledger> watcher(Ledger::Join(dir, "storm", "simulated", 64 * MiB, "limit", 0));
  constexpr int kChildren = 4;
  pid_t kids[kChildren];
  for (int k = 0; k < kChildren; ++k) {
    std::string index = std::to_string(k);
    char* args[] = {const_cast<char*>("ledger_test"), const_cast<char*>("--storm-member"),
                    const_cast<char*>(dir.c_str()), const_cast<char*>(index.c_str()), nullptr};
    CHECK(posix_spawn(&kids[k], "/proc/self/exe", nullptr, nullptr, args, environ) == 0);
  }
  int clean = 0;
  for (int k = 0; k < kChildren; ++k) {
    int status = 0;
    waitpid(kids[k], &status, 0);
    clean += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  CHECK(clean == kChildren);
  GroupSnapshot g = watcher->Snapshot();
  CHECK(g.members.size() == 1 && g.charged == 0);  // the children left (their destructors ran)
}

static void TestDamagedFiles() {
  std::string foreign = Ledger::PathFor(dir, "foreign", "simulated");
  int fd = open(foreign.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  const char junk[] = "this is somebody else's file, it must never be trusted";
  CHECK(write(fd, junk, sizeof junk) == static_cast<ssize_t>(sizeof junk));
  close(fd);
  CHECK(ErrorCode([&] { delete Ledger::Join(dir, "foreign", "simulated", MiB, "x", 0); }) ==
        "ERR_GROUP_LEDGER_FOREIGN");
  CHECK(Exists(foreign));  // left untouched
  unlink(foreign.c_str());

  std::unique_ptr<Ledger> a(Ledger::Join(dir, "damaged", "simulated", 10 * MiB, "limit", 0));
  std::string path = Ledger::PathFor(dir, "damaged", "simulated");
  CHECK(a->Charge(MiB, nullptr));
  // Someone scribbles over the budget: the header checksum no longer matches.
  fd = open(path.c_str(), O_RDWR);
  uint64_t huge = 1ull << 50;
  CHECK(pwrite(fd, &huge, sizeof huge, 24) == static_cast<ssize_t>(sizeof huge));
  CHECK(ErrorCode([&] { a->Charge(MiB, nullptr); }) == "ERR_GROUP_LEDGER_CORRUPT");
  CHECK(ErrorCode([&] { Ledger::Read(path); }) == "ERR_GROUP_LEDGER_CORRUPT");
  // A truncated file is refused (it is read with pread, never mapped).
  CHECK(ftruncate(fd, 100) == 0);
  CHECK(ErrorCode([&] { Ledger::Read(path); }) == "ERR_GROUP_LEDGER_CORRUPT");
  close(fd);
  a.reset();
  unlink(path.c_str());
}

static void TestPoolUnderGroup() {
  // Two pools (two processes' worth) growing under one 64 MiB group budget.
  std::unique_ptr<Ledger> la(Ledger::Join(dir, "pools", "simulated", 64 * MiB, "limit", 0));
  std::unique_ptr<Ledger> lb(Ledger::Join(dir, "pools", "simulated", 0, "", 0));
  GroupUpstream ua(std::make_unique<SimulatedUpstream>(80ull << 30, 80ull << 30, 9, 0),
                   std::move(la));
  GroupUpstream ub(std::make_unique<SimulatedUpstream>(80ull << 30, 80ull << 30, 9, 0),
                   std::move(lb));
  Pool a(&ua, {1ull << 30, "memoryLimit", true, true});
  Pool b(&ub, {1ull << 30, "memoryLimit", true, true});
  OomInfo oom;
  Pool::Chunk* a1 = a.Allocate(20 * MiB, &oom);  // a 32 MiB region (growth doubles from 2 MiB)
  CHECK(a1 != nullptr && a.Stats().pool_bytes == 32 * MiB);
  ub.ClearRefusal();
  Pool::Chunk* b1 = b.Allocate(40 * MiB, &oom);
  CHECK(b1 == nullptr && ub.refused());
  oom.group_sentence = ub.refusal().Sentence();
  CHECK(oom.Message().find("The group 'pools' has a budget of 64.00 MiB") != std::string::npos);
  Pool::Chunk* b2 = b.Allocate(20 * MiB, &oom);  // backs off in 0.9x steps into the 32 MiB left
  CHECK(b2 != nullptr);
  CHECK(a.Stats().pool_bytes + b.Stats().pool_bytes <= 64 * MiB);
  a.Free(a1);
  CHECK(a.EmptyCache() > 0);  // the region goes back, and its charge with it
  ub.ClearRefusal();
  b1 = b.Allocate(30 * MiB, &oom);
  CHECK(b1 != nullptr);  // after refusals of the larger regions it first tried
  CHECK(ua.ledger().Snapshot().charged == b.Stats().pool_bytes);
  b.Free(b1);
  b.Free(b2);
}

static IpcDescriptor SampleDescriptor() {
  IpcDescriptor d;
  for (int i = 0; i < 64; ++i) d.handle[i] = static_cast<uint8_t>(i * 7);
  d.device = "GPU-00000000-1111-2222-3333-444444444444";
  d.offset = 4096;
  d.bytes = 1000;
  return d;
}

// Runs `f` in a child process and returns what it wrote (a ShmError code, or "ok").
static std::string InChild(const std::function<std::string()>& f) {
  int p[2];
  if (pipe(p) != 0) return "pipe";
  pid_t child = fork();
  if (child == 0) {
    std::string out;
    try {
      out = f();
    } catch (const ShmError& e) {
      out = e.code;
    }
    (void)!write(p[1], out.data(), out.size());
    _exit(0);
  }
  close(p[1]);
  char buf[256];
  ssize_t n = read(p[0], buf, sizeof buf);
  close(p[0]);
  waitpid(child, nullptr, 0);
  return n > 0 ? std::string(buf, n) : "";
}

static void TestIpcRecords() {
  IpcDescriptor d = SampleDescriptor();
  std::unique_ptr<IpcExportRecord> ex(IpcExportRecord::Create(dir, &d));
  CHECK(ValidRecordName(d.record) && d.pid == getpid());
  CHECK(ex->Importers().empty());
  // The exporter itself cannot open it.
  CHECK(ErrorCode([&] { delete IpcImportRecord::Open(dir, d); }) == "ERR_IPC_SAME_PROCESS");
  // An importer holds a slot while open; the exporter sees its pid, and not after it exits.
  int ready[2], done[2];
  CHECK(pipe(ready) == 0 && pipe(done) == 0);
  pid_t child = fork();
  if (child == 0) {
    char c = 'n';
    try {
      IpcImportRecord* r = IpcImportRecord::Open(dir, d);
      c = 'y';
      (void)!write(ready[1], &c, 1);
      (void)!read(done[0], &c, 1);
      delete r;
    } catch (...) {
      (void)!write(ready[1], &c, 1);
    }
    _exit(0);
  }
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
  std::vector<int64_t> importers = ex->Importers();
  CHECK(importers.size() == 1 && importers[0] == child);
  // Freeing while it is open is refused, and the record stays.
  importers = ex->Withdraw(false);
  CHECK(importers.size() == 1 && importers[0] == child && Exists(shm::Join(dir, d.record)));
  CHECK(write(done[1], "x", 1) == 1);
  waitpid(child, nullptr, 0);
  CHECK(ex->Importers().empty());
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  // A killed importer does not count either.
  child = fork();
  if (child == 0) {
    IpcImportRecord::Open(dir, d);
    pause();
    _exit(0);
  }
  for (int i = 0; i < 200 && ex->Importers().empty(); ++i) usleep(5000);
  CHECK(ex->Importers().size() == 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK(ex->Importers().empty());
  // Forged or altered handles are refused before anything is opened.
  IpcDescriptor forged = d;
  forged.token[3] ^= 1;
  CHECK(InChild([&] { return (delete IpcImportRecord::Open(dir, forged), "ok"); }) ==
        "ERR_IPC_HANDLE_INVALID");
  forged = d;
  forged.bytes = 1u << 30;
  CHECK(InChild([&] { return (delete IpcImportRecord::Open(dir, forged), "ok"); }) ==
        "ERR_IPC_HANDLE_INVALID");
  forged = d;
  forged.record = "../../etc/passwd";
  CHECK(InChild([&] { return (delete IpcImportRecord::Open(dir, forged), "ok"); }) ==
        "ERR_IPC_HANDLE_INVALID");
  CHECK(InChild([&] { return (delete IpcImportRecord::Open(dir, d), "ok"); }) == "ok");
  // Freed by the exporter: gone.
  CHECK(ex->Withdraw(false).empty() && !Exists(shm::Join(dir, d.record)));
  ex.reset();
  CHECK(InChild([&] { return (delete IpcImportRecord::Open(dir, d), "ok"); }) ==
        "ERR_IPC_EXPORT_GONE");
  // An exporter that exited: gone, and its record is swept.
  IpcDescriptor from_child = SampleDescriptor();
  int p[2];
  CHECK(pipe(p) == 0);
  child = fork();
  if (child == 0) {
    IpcDescriptor e = SampleDescriptor();
    IpcExportRecord::Create(dir, &e);  // never removed: the process just exits
    (void)!write(p[1], e.record.data(), e.record.size());
    (void)!write(p[1], e.token.data(), 16);
    _exit(0);
  }
  close(p[1]);
  char buf[128];
  ssize_t n = 0, got;
  while ((got = read(p[0], buf + n, sizeof buf - n)) > 0) n += got;  // until the child exits
  waitpid(child, nullptr, 0);
  close(p[0]);
  CHECK(n > 16);
  from_child.record.assign(buf, n - 16);
  std::memcpy(from_child.token.data(), buf + n - 16, 16);
  from_child.pid = child;
  CHECK(Exists(shm::Join(dir, from_child.record)));
  CHECK(ErrorCode([&] { delete IpcImportRecord::Open(dir, from_child); }) == "ERR_IPC_EXPORT_GONE");
  CHECK(!Exists(shm::Join(dir, from_child.record)));
  uint8_t bytes[2];
  CHECK(FromHex("0aFf", bytes, 2) && bytes[0] == 10 && bytes[1] == 255 &&
        !FromHex("0g00", bytes, 2));
}

// free() of an exported buffer races importers that open it over and over: the count of
// importers and the removal of the record are one step under the record's lock, so no importer
// ever holds a slot of a record that was removed as unused (it used to be able to open it between
// the count and the removal, and then open freed memory).
static void TestWithdrawRacesImporters() {
  constexpr int kRecords = 60;
  std::vector<IpcDescriptor> ds(kRecords);
  std::vector<std::unique_ptr<IpcExportRecord>> records;
  for (IpcDescriptor& d : ds) {
    d = SampleDescriptor();
    records.emplace_back(IpcExportRecord::Create(dir, &d));
  }
  // The importer's first open is held until the exporter has seen a refusal for it, so the race
  // runs on a loaded machine too (a late-scheduled importer used to find every record gone).
  int held[2], seen[2];
  CHECK(pipe(held) == 0 && pipe(seen) == 0);
  pid_t importer = fork();
  if (importer == 0) {
    {
      std::unique_ptr<IpcImportRecord> first(IpcImportRecord::Open(dir, ds[0]));
      char c = 'h';
      if (write(held[1], &c, 1) != 1 || read(seen[0], &c, 1) != 1) _exit(4);
    }
    // Opens each record again and again until it is gone; every time it holds one, it checks
    // that the record still exists (the exporter may remove it only when nobody holds it).
    int held_after_removal = 0;
    for (const IpcDescriptor& d : ds) {
      for (;;) {
        std::unique_ptr<IpcImportRecord> r;
        std::string code = ErrorCode([&] { r.reset(IpcImportRecord::Open(dir, d)); });
        if (code == "ERR_IPC_EXPORT_GONE") break;
        if (!code.empty()) _exit(3);
        usleep(20);  // long enough for a removal that raced the open to have happened
        held_after_removal += !Exists(shm::Join(dir, d.record));
      }
    }
    _exit(held_after_removal ? 1 : 0);
  }
  int refused = 0;
  char c = 0;
  CHECK(read(held[0], &c, 1) == 1 && c == 'h');
  CHECK(!records[0]->Withdraw(false).empty());  // held: refused, and the record stays
  ++refused;
  CHECK(write(seen[1], &c, 1) == 1);
  for (int fd : {held[0], held[1], seen[0], seen[1]}) close(fd);
  for (auto& r : records) {
    while (!r->Withdraw(false).empty()) ++refused;
    r.reset();
  }
  int status = 0;
  waitpid(importer, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(refused > 0);
  std::printf("withdraw race: %d records, %d refusals while an importer held one\n", kRecords,
              refused);
}

// A child after fork lets go of its parent's membership (Abandon): the parent's slot and charge
// stay, and once the parent dies they come back though the child lives on.
static void TestForkedChildAbandons() {
  std::string path = Ledger::PathFor(dir, "forked", "simulated");
  int ready[2], done[2];
  CHECK(pipe(ready) == 0 && pipe(done) == 0);
  pid_t parent = fork();
  if (parent == 0) {
    std::unique_ptr<Ledger> l(Ledger::Join(dir, "forked", "simulated", 64 * MiB, "limit", 0));
    GroupRefusal r;
    bool ok = l->Charge(8 * MiB, &r);
    pid_t child = fork();
    if (child == 0) {
      l->Abandon();
      l.reset();  // the destructor touches nothing either
      // Tell the test, then outlive the parent.
      char c = ok ? 'y' : 'n';
      (void)!write(ready[1], &c, 1);
      (void)!read(done[0], &c, 1);
      _exit(0);
    }
    pause();  // killed by the test
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
  // The child has let go; the parent's charge is still there.
  GroupSnapshot g = Ledger::Read(path);
  CHECK(g.members.size() == 1 && g.charged == 8 * MiB && g.members[0].pid == parent);
  kill(parent, SIGKILL);
  waitpid(parent, nullptr, 0);
  // The child still lives, with the inherited descriptor closed: the dead parent's slot is reaped.
  g = Ledger::Read(path);
  CHECK(g.members.empty() && g.reaped == 1);
  (void)!write(done[1], "x", 1);
  close(done[1]);
  close(ready[0]);
  while (wait(nullptr) > 0) {
  }
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--storm-member") == 0) {
    dir = argv[2];
    return StormMember(std::atoi(argv[3]));
  }
  dir = MakeSharedDir("cuda-memory-ledger-test");
  TestForkedChildAbandons();
  TestJoinChargeRelease();
  TestKilledMemberReturns();
  TestConcurrentMembers();
  TestDamagedFiles();
  TestPoolUnderGroup();
  TestIpcRecords();
  TestWithdrawRacesImporters();
  rmdir(dir.c_str());
  std::printf("interprocess tests: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures,
              failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
