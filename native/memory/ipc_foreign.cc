// CUDA IPC with processes that do not use this library (PyTorch, CuPy): a handle is opened from
// its bytes alone, since such a process keeps no record to check it against, so everything the
// driver can say is checked instead: the device, that the pointer is device memory there, and
// that the offset and size lie inside the allocation the handle opened (and, when the exporter
// said how large that allocation is, that it is exactly that large).
#include <array>
#include <string>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "core/memory/ipc_record.h"
#include "device/discovery.h"
#include "memory/ipc.h"

namespace cm {

namespace {

[[noreturn]] void Refuse(Napi::Env env, const std::string& why) {
  ThrowInterprocess(env, core::ShmError("ERR_IPC_HANDLE_INVALID",
                                        "the CUDA IPC descriptor "
                                        "cannot be opened: " +
                                            why));
}

uint64_t ReadU64(Napi::Env env, Napi::Value v, const char* what) {
  double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!IsSafeSize(x)) Refuse(env, std::string(what) + " must be a non-negative integer");
  return static_cast<uint64_t>(x);
}

// ipcImportForeign: returns [buffer handle, device, allocation bytes]
Napi::Value IpcImportForeign(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::array<uint8_t, 64> bytes{};
  if (!core::FromHex(ReadString(env, info[0], "handle"), bytes.data(), bytes.size()))
    Refuse(env, "handle must be 128 hex digits (the 64 bytes of cudaIpcMemHandle_t)");
  uint64_t offset = ReadU64(env, info[1], "offset");
  uint64_t length = ReadU64(env, info[2], "byteLength");
  if (length == 0) Refuse(env, "byteLength must be at least 1");
  std::string uuid = ReadString(env, info[3], "device");
  int wanted = ReadInt(env, info[4], "device", -1, 1 << 20);
  // -1 when the exporter did not say; anything else is checked before it is cast.
  double expected_d = info[5].IsNumber() ? info[5].As<Napi::Number>().DoubleValue() : -2;
  if (expected_d != -1 && (!IsSafeSize(expected_d) || expected_d < 1))
    Refuse(env, "allocationBytes must be a positive integer when given");
  const bool expected_known = expected_d != -1;
  const uint64_t expected = expected_known ? static_cast<uint64_t>(expected_d) : 0;
  core::IpcOpening opening{bytes, offset, length, ""};
  RefuseIfOpen(env, opening);
  RequireCuda(env);
  int device = -1;
  int count = GetStatus(env).device_count;
  for (int i = 0; i < count && device < 0; ++i)
    if (DeviceUuid(i) == uuid) device = i;
  if (device < 0)
    ThrowInterprocess(
        env, core::ShmError("ERR_IPC_WRONG_DEVICE", "the CUDA IPC descriptor is for " + uuid +
                                                        ", which this process does not see "
                                                        "(CUDA_VISIBLE_DEVICES?)"));
  if (wanted >= 0 && device != wanted)
    ThrowInterprocess(
        env, core::ShmError("ERR_IPC_WRONG_DEVICE", "the CUDA IPC descriptor is for " + uuid +
                                                        ", not device " + std::to_string(wanted) +
                                                        " (" + DeviceUuid(wanted) + ")"));
  void* base = OpenIpcHandle(env, bytes.data(), device);
  auto close_and_refuse = [&](const std::string& why) {
    cudaIpcCloseMemHandle(base);
    (void)cudaGetLastError();
    Refuse(env, why);
  };
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, base) != cudaSuccess) {
    (void)cudaGetLastError();
    close_and_refuse("cudaPointerGetAttributes could not say what the handle opened");
  }
  if (attr.type != cudaMemoryTypeDevice || attr.device != device)
    close_and_refuse("the handle did not open device memory of device " + std::to_string(device));
  uint64_t allocation = 0;
  if (!AllocationBytes(base, &allocation))
    close_and_refuse(
        "its size could not be checked against the allocation it opens (cuMemGetAddressRange "
        "is unavailable)");
  if (offset > allocation || length > allocation - offset)
    close_and_refuse("its range (offset " + std::to_string(offset) + ", " + std::to_string(length) +
                     " bytes) runs past the allocation it opens (" + std::to_string(allocation) +
                     " bytes)");
  if (expected_known && expected != allocation)
    close_and_refuse("the exporter's allocation was " + std::to_string(expected) +
                     " bytes, but the handle opened one of " + std::to_string(allocation) +
                     " bytes (a stale or mistaken handle)");
  Allocation* a = NewIpcImport(device, base, std::move(opening));
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(0u, WrapAllocation(env, a));
  out.Set(1u, device);
  out.Set(2u, static_cast<double>(allocation));
  return out;
}

// allocationBytesFrom: returns bytes from the buffer's start to the end of the CUDA allocation
// holding it, or -1 when the driver cannot say.
Napi::Value AllocationBytesFrom(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer");
  uint64_t bytes = 0;
  if (a->simulated || !AllocationBytes(a->ptr, &bytes)) return Napi::Number::New(env, -1);
  return Napi::Number::New(env, static_cast<double>(bytes));
}

}  // namespace

void InitForeignIpc(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"ipcImportForeign", IpcImportForeign},
               {"allocationBytesFrom", AllocationBytesFrom},
           });
}

}  // namespace cm
