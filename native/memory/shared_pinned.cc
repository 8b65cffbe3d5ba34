#include "memory/shared_pinned.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "core/base/shm.h"
#include "device/discovery.h"
#include "memory/buffers.h"

namespace cm {

namespace {

// A POSIX shared-memory file mapped and registered with CUDA (pinned memory that several
// processes see): the file, and whether this process created it (and removes it when freed).
struct SharedHostAllocation : Allocation {
  using Allocation::Allocation;
  std::string path;
  bool owner = false;
};

const BufferOps kSharedHostOps{
    /*on_device=*/false,
    /*release=*/ReleaseHostMemory,
    /*before_use=*/nullptr,
    /*export_range=*/nullptr,
    /*free_host=*/
    [](Allocation* a) noexcept {
      auto* s = static_cast<SharedHostAllocation*>(a);
      cudaHostUnregister(a->ptr);
      (void)cudaGetLastError();
      munmap(a->ptr, a->bytes);
      if (s->owner) unlink(s->path.c_str());
    },
    /*managed=*/false,
    /*free_on=*/nullptr,
    /*kind=*/"shared-pinned",
};

// Maps the file and registers it; returns [handle, arrayBuffer]. Takes ownership of fd (closed
// here: the mapping keeps the memory).
Napi::Value MapAndRegister(Napi::Env env, int fd, const std::string& path, size_t bytes, int device,
                           bool owner) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_errno = errno;
  close(fd);
  if (p == MAP_FAILED) {
    if (owner) unlink(path.c_str());
    ThrowInterprocess(
        env, core::ShmError("ERR_SHM_MAP",
                            "could not map " + path + ": " + std::strerror(map_errno), path));
  }
  // Portable: pinned for every context of the process, as with cudaHostAllocPortable.
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    munmap(p, bytes);
    if (owner) unlink(path.c_str());
    ThrowCuda(env, err, "cudaHostRegister",
              "could not page-lock the " + std::to_string(bytes) + " shared bytes of " + path);
  }
  auto* a = new SharedHostAllocation(&kSharedHostOps);
  a->device = device;
  a->ptr = p;
  a->bytes = bytes;
  a->flags = cudaHostRegisterPortable;
  a->path = path;
  a->owner = owner;
  return ExposeHostMemory(env, a);
}

// sharedHostCreate: returns [handle, arrayBuffer]
Napi::Value SharedHostCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  uint64_t bytes = ReadSize(env, info[1], "bytes");
  int device = ReadInt(env, info[2], "device", 0, 1 << 20);
  CheckRange(env, "bytes", bytes, uint64_t{1}, UINT64_MAX, "at least 1");
  CheckDevice(env, device);
  // Space is reserved now, so a full /dev/shm is an error here and not a SIGBUS later.
  int fd = InterprocessCall(
      env, [&] { return core::shm::CreateComplete(path, bytes, nullptr, 0, 0600); });
  if (fd < 0)
    ThrowInterprocess(env,
                      core::ShmError("ERR_SHM_EXISTS",
                                     path + " already exists: open it with openSharedPinned(), "
                                            "or remove it with unlinkSharedPinned() if its "
                                            "creator is gone",
                                     path));
  return MapAndRegister(env, fd, path, bytes, device, true);
}

// sharedHostOpen: returns [handle, arrayBuffer]
Napi::Value SharedHostOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  int device = ReadInt(env, info[1], "device", 0, 1 << 20);
  CheckDevice(env, device);
  // Another user's file, a link or a file others may write is refused before it is mapped.
  int fd = InterprocessCall(env, [&] { return core::shm::OpenTrusted(path, 0, "ERR_SHM_OPEN"); });
  if (fd < 0)
    ThrowInterprocess(
        env, core::ShmError("ERR_SHM_NOT_FOUND",
                            "could not open " + path + ": " + std::strerror(ENOENT), path));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    ThrowInterprocess(env, core::ShmError("ERR_SHM_OPEN", path + " is empty", path));
  }
  return MapAndRegister(env, fd, path, static_cast<size_t>(st.st_size), device, false);
}

// sharedHostUnlink: returns whether a file was removed
Napi::Value SharedHostUnlink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  // Only in this user's own folder: never a name in a folder another user controls.
  if (!InterprocessCall(env,
                        [&] { return core::shm::CheckFolder(core::shm::DirName(path), false); }))
    return Napi::Boolean::New(env, false);
  if (unlink(path.c_str()) == 0) return Napi::Boolean::New(env, true);
  if (errno == ENOENT) return Napi::Boolean::New(env, false);
  ThrowInterprocess(env,
                    core::ShmError("ERR_SHM_UNLINK",
                                   "could not remove " + path + ": " + std::strerror(errno), path));
}

}  // namespace

void InitSharedHost(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"sharedHostCreate", SharedHostCreate},
               {"sharedHostOpen", SharedHostOpen},
               {"sharedHostUnlink", SharedHostUnlink},
           });
}

}  // namespace cm
