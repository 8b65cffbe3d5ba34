#include "allocator/group.h"

#include <fcntl.h>
#include <unistd.h>

#include <limits>
#include <map>
#include <vector>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "core/allocator/uncharged.h"
#include "device/discovery.h"
#include "device/nvml.h"

namespace cm {

namespace {

// A process's command line from /proc/<pid>/cmdline, its arguments joined by spaces (the first
// 4 KiB); empty where it cannot be read (gone, another user's under hidepid, a kernel thread).
// It is the process's own text: whoever prints it escapes its control characters.
std::string CommandOf(int64_t pid) {
  if (pid <= 0) return "";
  std::string path = "/proc/" + std::to_string(pid) + "/cmdline";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[4096];
  ssize_t n = 0, got;
  while (n < static_cast<ssize_t>(sizeof buf) && (got = read(fd, buf + n, sizeof buf - n)) > 0)
    n += got;
  close(fd);
  std::string cmd(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  return cmd;
}

// The processes recorded as not held to a group's budget (core/allocator/uncharged.h).
Napi::Array UnchargedArray(Napi::Env env, const std::vector<core::UnchargedProcess>& list) {
  Napi::Array out = Napi::Array::New(env, list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const core::UnchargedProcess& p = list[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("pid", static_cast<double>(p.pid));
    o.Set("since", static_cast<double>(p.since_unix_ms));
    o.Set("code", p.code);
    o.Set("detail", p.detail);
    o.Set("strict", p.strict);
    o.Set("unchargedBytes", static_cast<double>(p.bytes));
    o.Set("unchargedAllocations", static_cast<double>(p.calls));
    std::string command = CommandOf(p.pid);
    o.Set("command", command.empty() ? env.Null() : Napi::String::New(env, command));
    out.Set(i, o);
  }
  return out;
}

}  // namespace

Napi::Object GroupObject(Napi::Env env, const core::GroupSnapshot& g) {
  // What the driver says each process uses on a GPU (not on a simulated device).
  std::map<int64_t, int64_t> used;
  std::vector<GpuProcess> procs;
  if (g.device.rfind("GPU-", 0) == 0 && NvmlProcesses(g.device, &procs))
    for (const GpuProcess& p : procs) used[p.pid] = p.used_bytes;
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", g.name);
  o.Set("device", g.device);
  o.Set("path", g.path);
  o.Set("budgetBytes", static_cast<double>(g.budget));
  o.Set("budgetSource", g.budget_source);
  o.Set("chargedBytes", static_cast<double>(g.charged));
  o.Set("freeBytes", static_cast<double>(g.budget - std::min(g.budget, g.charged)));
  o.Set("reapedMembers", static_cast<double>(g.reaped));
  o.Set("reservedBytes", static_cast<double>(g.reserved));
  o.Set("waits", static_cast<double>(g.waits));
  o.Set("waitsGranted", static_cast<double>(g.waits_granted));
  o.Set("waitMsTotal", static_cast<double>(g.wait_ms_total));
  Napi::Array members = Napi::Array::New(env, g.members.size());
  for (size_t i = 0; i < g.members.size(); ++i) {
    const core::GroupMember& m = g.members[i];
    Napi::Object mo = Napi::Object::New(env);
    mo.Set("pid", static_cast<double>(m.pid));
    mo.Set("poolBytes", static_cast<double>(m.pool_bytes));
    mo.Set("bytesInUse", static_cast<double>(m.bytes_in_use));
    mo.Set("peakPoolBytes", static_cast<double>(m.peak_pool_bytes));
    mo.Set("limitBytes", static_cast<double>(m.limit));
    mo.Set("joinedAt", static_cast<double>(m.joined_unix_ms));
    mo.Set("requestBytes", static_cast<double>(m.request));
    mo.Set("memberLimitBytes", static_cast<double>(m.member_limit));
    mo.Set("waitingBytes", static_cast<double>(m.waiting_bytes));
    mo.Set("waitingSince", m.waiting_bytes
                               ? Napi::Number::New(env, static_cast<double>(m.waiting_since_ms))
                               : env.Null());
    mo.Set("self", m.self);
    std::string command = CommandOf(m.pid);
    mo.Set("command", command.empty() ? env.Null() : Napi::String::New(env, command));
    auto u = used.find(m.pid);
    mo.Set("nvmlUsedBytes", u == used.end() || u->second < 0
                                ? env.Null()
                                : Napi::Number::New(env, static_cast<double>(u->second)));
    members.Set(i, mo);
  }
  o.Set("members", members);
  std::vector<core::UnchargedProcess> uncharged;
  try {
    uncharged = core::UnchargedRecord::Read(core::shm::DirName(g.path), g.name, g.device);
  } catch (const core::ShmError&) {
    // The folder held the ledger just now: nothing to say that the read did not.
  }
  o.Set("uncharged", UnchargedArray(env, uncharged));
  return o;
}

namespace {

// groupPath: returns the ledger file of a group
Napi::Value GroupPath(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Napi::String::New(
      env, core::Ledger::PathFor(ReadString(env, info[0], "dir"), ReadString(env, info[1], "name"),
                                 ReadString(env, info[2], "device")));
}

// groupRead: returns the group object (dead members' slots cleared on the way)
Napi::Value GroupRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  int timeout = ReadInt(env, info[1], "lockTimeoutMs", 0, 86400000);
  return InterprocessCall(env, [&] { return GroupObject(env, core::Ledger::Read(path, timeout)); });
}

// setGroupBudget: changes a live group's budget (Ledger::SetBudget); returns the group after it
Napi::Value SetGroupBudget(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  uint64_t budget = ReadSize(env, info[1], "bytes");
  std::string source = ReadString(env, info[2], "source");
  int timeout = ReadInt(env, info[3], "lockTimeoutMs", 0, 86400000);
  return InterprocessCall(env, [&] {
    return GroupObject(env, core::Ledger::SetBudget(path, budget, source, timeout));
  });
}

// setGroupRequest: changes member pid's request (Ledger::SetRequest); returns the group after it
Napi::Value SetGroupRequest(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  int pid = ReadInt(env, info[1], "pid", 1, std::numeric_limits<int>::max());
  uint64_t request = ReadSize(env, info[2], "bytes");
  int timeout = ReadInt(env, info[3], "lockTimeoutMs", 0, 86400000);
  return InterprocessCall(
      env, [&] { return GroupObject(env, core::Ledger::SetRequest(path, pid, request, timeout)); });
}

// groupFormat: the ledger's slot count (the most members a group has) and its file's size
Napi::Value GroupFormat(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("slots", static_cast<double>(core::Ledger::kSlots));
  o.Set("fileBytes", static_cast<double>(core::Ledger::FileBytes()));
  return o;
}

// groupProbe: whether a ledger could be made at path now (its folder checked, or made, and a file
// of a ledger's size made beside it and removed); throws the InterprocessError making one would
Napi::Value GroupProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  InterprocessCall(env, [&] { core::shm::ProbeRoom(path, core::Ledger::FileBytes()); });
  return env.Undefined();
}

// groupUncharged: the processes recorded beside group `name`'s ledger on `device` as not held to
// its budget (core/allocator/uncharged.h), the records of those gone removed on the way
Napi::Value GroupUncharged(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string dir = ReadString(env, info[0], "dir"), name = ReadString(env, info[1], "name"),
              device = ReadString(env, info[2], "device");
  return UnchargedArray(
      env, InterprocessCall(env, [&] { return core::UnchargedRecord::Read(dir, name, device); }));
}

}  // namespace

void InitGroup(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"groupPath", GroupPath},
               {"groupRead", GroupRead},
               {"setGroupBudget", SetGroupBudget},
               {"setGroupRequest", SetGroupRequest},
               {"groupFormat", GroupFormat},
               {"groupProbe", GroupProbe},
               {"groupUncharged", GroupUncharged},
           });
}

}  // namespace cm
