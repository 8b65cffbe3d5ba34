#include "allocator/group.h"

#include "binding/exports.h"
#include "binding/instance.h"

namespace cm {

Napi::Object GroupObject(Napi::Env env, const core::GroupSnapshot& g) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", g.name);
  o.Set("device", g.device);
  o.Set("path", g.path);
  o.Set("budgetBytes", static_cast<double>(g.budget));
  o.Set("budgetSource", g.budget_source);
  o.Set("chargedBytes", static_cast<double>(g.charged));
  o.Set("freeBytes", static_cast<double>(g.budget - std::min(g.budget, g.charged)));
  o.Set("reapedMembers", static_cast<double>(g.reaped));
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
    mo.Set("self", m.self);
    members.Set(i, mo);
  }
  o.Set("members", members);
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
  try {
    return GroupObject(env, core::Ledger::Read(path, timeout));
  } catch (const core::ShmError& e) {
    ThrowInterprocess(env, e);
  }
}

}  // namespace

void InitGroup(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"groupPath", GroupPath},
               {"groupRead", GroupRead},
           });
}

}  // namespace cm
