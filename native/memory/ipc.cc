#include "memory/ipc.h"

#include <cstdio>
#include <cstring>

#include "base/cuda_api.h"
#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "core/memory/ipc_record.h"
#include "device/discovery.h"

namespace cm {

namespace {

// An exported buffer's record in shared memory.
struct IpcExportState : BufferExport {
  std::unique_ptr<core::IpcExportRecord> record;
};

// Device memory of another process opened from an IPC handle: the importer's slot in the
// exporter's record, the base the handle opened (CUDA counts the opens of one handle in a
// context; each is closed once), and what was opened, for RefuseIfOpen.
struct IpcImportAllocation : Allocation {
  using Allocation::Allocation;
  std::unique_ptr<core::IpcImportRecord> import;
  void* base = nullptr;
  core::IpcOpening opening;
};

const BufferOps kIpcImportOps{
    /*on_device=*/true,
    /*release=*/
    [](napi_env, Allocation* a) noexcept {
      auto* imp = static_cast<IpcImportAllocation*>(a);
      if (imp->base) {
        cudaSetDevice(a->device);
        cudaIpcCloseMemHandle(imp->base);
        (void)cudaGetLastError();
        imp->base = nullptr;
      }
      imp->import.reset();  // after the close: the exporter may free once no slot is held
    },
    /*before_use=*/nullptr,
    /*export_range=*/
    [](Napi::Env env, Allocation*, void**, uint64_t*) {
      throw LibraryError(env, "ERR_NOT_SUPPORTED",
                         "an imported buffer cannot be exported again; export the original");
    },
    /*free_host=*/nullptr,
    /*managed=*/false,
    /*free_on=*/nullptr,
    /*kind=*/"ipc-import",
};

IpcExportState* ExportOf(Allocation* a) { return static_cast<IpcExportState*>(a->exported.get()); }

[[noreturn]] void NotSupported(Napi::Env env, const std::string& message) {
  throw LibraryError(env, "ERR_NOT_SUPPORTED", message);
}

Napi::Object DescriptorObject(Napi::Env env, const core::IpcDescriptor& d) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("type", "cuda-memory/ipc@1");
  o.Set("record", d.record);
  o.Set("token", core::ToHex(d.token.data(), d.token.size()));
  o.Set("handle", core::ToHex(d.handle.data(), d.handle.size()));
  o.Set("device", d.device);
  o.Set("offset", static_cast<double>(d.offset));
  o.Set("byteLength", static_cast<double>(d.bytes));
  o.Set("pid", static_cast<double>(d.pid));
  return o;
}

[[noreturn]] void Malformed(Napi::Env env, const std::string& why) {
  ThrowInterprocess(
      env, core::ShmError("ERR_IPC_HANDLE_INVALID", "the IPC handle is not valid: " + why));
}

// The JS layer has checked the shape; this checks again, since a handle crosses process lines.
core::IpcDescriptor ReadDescriptor(Napi::Env env, Napi::Value v) {
  if (!v.IsObject()) Malformed(env, "it must be an object");
  Napi::Object o = v.As<Napi::Object>();
  core::IpcDescriptor d;
  auto str = [&](const char* key) {
    Napi::Value s = o.Get(key);
    if (!s.IsString()) Malformed(env, std::string(key) + " must be a string");
    return s.As<Napi::String>().Utf8Value();
  };
  auto num = [&](const char* key) {
    Napi::Value n = o.Get(key);
    double x = n.IsNumber() ? n.As<Napi::Number>().DoubleValue() : -1;
    if (!IsSafeSize(x)) Malformed(env, std::string(key) + " must be a non-negative integer");
    return static_cast<uint64_t>(x);
  };
  d.record = str("record");
  if (!core::FromHex(str("token"), d.token.data(), d.token.size()))
    Malformed(env, "token must be 32 hex digits");
  if (!core::FromHex(str("handle"), d.handle.data(), d.handle.size()))
    Malformed(env, "handle must be 128 hex digits");
  d.device = str("device");
  d.offset = num("offset");
  d.bytes = num("byteLength");
  d.pid = static_cast<int64_t>(num("pid"));
  if (d.bytes == 0) Malformed(env, "byteLength must be at least 1");
  return d;
}

// ipcExport: returns the descriptor. The same buffer exports once; later calls return it again. The
// wait for the record's lock, here and at every later count or free.
Napi::Value IpcExport(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer");
  std::string dir = ReadString(env, info[1], "dir");
  int timeout = ReadInt(env, info[2], "lockTimeoutMs", 0, 86400000);
  if (a->exported) return DescriptorObject(env, ExportOf(a)->record->descriptor());
  if (a->simulated)
    NotSupported(env, "a block of a simulated device has no memory to share with other processes");
  if (!a->ops->export_range)
    ThrowType(env, "only device memory (a DeviceBuffer) can be exported by IPC");
  void* base = nullptr;
  uint64_t offset = 0;
  a->ops->export_range(env, a, &base, &offset);
  RequireCuda(env);
  cudaIpcMemHandle_t h;
  cudaError_t err = cudaSetDevice(a->device);
  if (err == cudaSuccess) err = cudaIpcGetMemHandle(&h, base);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaIpcGetMemHandle");
  }
  core::IpcDescriptor d;
  static_assert(sizeof h == 64, "cudaIpcMemHandle_t is 64 bytes");
  std::memcpy(d.handle.data(), &h, 64);
  d.device = DeviceUuid(a->device);
  d.offset = offset;
  d.bytes = a->bytes;
  auto exported = std::make_unique<IpcExportState>();
  InterprocessCall(
      env, [&] { exported->record.reset(core::IpcExportRecord::Create(dir, &d, timeout)); });
  a->exported = std::move(exported);
  return DescriptorObject(env, d);
}

}  // namespace

void* OpenIpcHandle(Napi::Env env, const uint8_t* handle, int device) {
  cudaIpcMemHandle_t h;
  static_assert(sizeof h == 64, "cudaIpcMemHandle_t is 64 bytes");
  std::memcpy(&h, handle, sizeof h);
  void* base = nullptr;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaIpcOpenMemHandle");
  }
  return base;
}

bool AllocationBytes(void* p, uint64_t* bytes) {
  using GetRange = int (*)(unsigned long long*, size_t*, unsigned long long);
  static const GetRange get_range = DriverEntryPoint<GetRange>("cuMemGetAddressRange");
  unsigned long long base = 0;
  size_t size = 0;
  if (!get_range || get_range(&base, &size, reinterpret_cast<unsigned long long>(p)) != 0)
    return false;
  *bytes = size - (reinterpret_cast<unsigned long long>(p) - base);
  return true;
}

Allocation* NewIpcImport(int device, void* base, core::IpcOpening opening) {
  auto* a = new IpcImportAllocation(&kIpcImportOps);
  a->device = device;
  a->base = base;
  a->ptr = static_cast<char*>(base) + opening.offset;
  a->bytes = opening.bytes;
  a->opening = std::move(opening);
  return a;
}

void RefuseIfOpen(Napi::Env env, const core::IpcOpening& wanted) {
  for (Allocation* open : Handles(env).Live()) {
    // A buffer whose free() waits for a copy is freed as far as its user knows.
    if (open->ops != &kIpcImportOps || open->free_requested) continue;
    const core::IpcOpening& o = static_cast<IpcImportAllocation*>(open)->opening;
    if (!core::SameOpening(o, wanted)) continue;
    char address[32];
    std::snprintf(address, sizeof address, "0x%llx",
                  static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(open->ptr)));
    ThrowInterprocess(
        env, core::ShmError("ERR_IPC_ALREADY_OPEN",
                            "this memory is already open in this thread (" +
                                core::DescribeOpening(o) + ") as the DeviceBuffer at address " +
                                address + ", not yet freed; use that buffer, or free it first"));
  }
}

namespace {

// ipcImport: returns [handle, device]
Napi::Value IpcImport(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  core::IpcDescriptor d = ReadDescriptor(env, info[0]);
  std::string dir = ReadString(env, info[1], "dir");
  int wanted = ReadInt(env, info[2], "device", -1, 1 << 20);
  int timeout = ReadInt(env, info[3], "lockTimeoutMs", 0, 86400000);
  core::IpcOpening opening{d.handle, d.offset, d.bytes, d.record};
  RefuseIfOpen(env, opening);
  // The record first: a forged, stale or foreign handle never reaches the driver.
  std::unique_ptr<core::IpcImportRecord> rec(
      InterprocessCall(env, [&] { return core::IpcImportRecord::Open(dir, d, timeout); }));
  RequireCuda(env);
  int device = -1;
  int count = GetStatus(env).device_count;
  for (int i = 0; i < count && device < 0; ++i)
    if (DeviceUuid(i) == d.device) device = i;
  if (wanted >= 0 && device != wanted)
    ThrowInterprocess(
        env, core::ShmError("ERR_IPC_WRONG_DEVICE", "the IPC handle is for " + d.device +
                                                        ", not device " + std::to_string(wanted) +
                                                        " (" + DeviceUuid(wanted) + ")"));
  if (device < 0)
    ThrowInterprocess(
        env, core::ShmError("ERR_IPC_WRONG_DEVICE", "the IPC handle is for " + d.device +
                                                        ", which this process does not see "
                                                        "(CUDA_VISIBLE_DEVICES?)"));
  void* base = OpenIpcHandle(env, d.handle.data(), device);
  // The record's offset and size against the allocation the driver opened: the record is the
  // exporter's word, and a wrong one would let this process reach past the buffer.
  uint64_t allocation = 0;
  if (!AllocationBytes(base, &allocation) || d.offset > allocation ||
      d.bytes > allocation - d.offset) {
    cudaIpcCloseMemHandle(base);
    (void)cudaGetLastError();
    ThrowInterprocess(
        env, core::ShmError("ERR_IPC_HANDLE_INVALID",
                            allocation == 0
                                ? "the IPC handle's size could not be checked against the "
                                  "allocation it opens (cuMemGetAddressRange is unavailable)"
                                : "the IPC handle's range (offset " + std::to_string(d.offset) +
                                      ", " + std::to_string(d.bytes) +
                                      " bytes) runs past the allocation it opens (" +
                                      std::to_string(allocation) + " bytes)",
                            d.record));
  }
  auto* a = static_cast<IpcImportAllocation*>(NewIpcImport(device, base, std::move(opening)));
  a->import = std::move(rec);
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, WrapAllocation(env, a));
  out.Set(1u, device);
  return out;
}

// ipcImporters: returns pids of the processes that hold the exported buffer open
Napi::Value IpcImportersJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer");
  std::vector<int64_t> pids;
  if (a->exported) pids = InterprocessCall(env, [&] { return ExportOf(a)->record->Importers(); });
  Napi::Array out = Napi::Array::New(env, pids.size());
  for (size_t i = 0; i < pids.size(); ++i) out.Set(i, static_cast<double>(pids[i]));
  return out;
}

// ipcWithdraw: returns the pids that hold the exported buffer open; empty when its record was
// removed (no process can open it any more). One step under the record's lock, so no importer opens
// it between the count and the removal; free() goes on only when it is empty.
Napi::Value IpcWithdraw(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer");
  bool force = info[1].ToBoolean().Value();
  std::vector<int64_t> pids;
  if (a->exported)
    pids = InterprocessCall(env, [&] { return ExportOf(a)->record->Withdraw(force); });
  Napi::Array out = Napi::Array::New(env, pids.size());
  for (size_t i = 0; i < pids.size(); ++i) out.Set(i, static_cast<double>(pids[i]));
  return out;
}

}  // namespace

void InitIpc(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"ipcExport", IpcExport},
               {"ipcImport", IpcImport},
               {"ipcImporters", IpcImportersJs},
               {"ipcWithdraw", IpcWithdraw},
           });
}

}  // namespace cm
