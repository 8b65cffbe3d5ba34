#include "transfer/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/handles.h"
#include "binding/instance.h"
#include "binding/promise_worker.h"
#include "core/base/file_replace.h"
#include "device/discovery.h"
#include "transfer/copy.h"
#include "transfer/files/direct.h"
#include "transfer/files/engine.h"
#include "transfer/files/failure.h"
#include "transfer/files/open.h"
#include "transfer/files/page_cache.h"
#include "transfer/files/read.h"
#include "transfer/files/write.h"
#include "transfer/staging.h"

namespace cm::files {

namespace {

// fileReplaceBegin: returns [tmp, target]: a file that writes (fileWrite with a fileOffset) fill
// before fileReplaceCommit renames it over the target; what saveSafetensors assembles a file in.
Napi::Value FileReplaceBegin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  // The temporary file stays, closed when r goes, for writes at a fileOffset to fill.
  core::Replacement r;
  if (FileFailure f = FromReplace(core::BeginReplace(path, 0666, &r)))
    ThrowValue(env, MakeFileError(env, f));
  Napi::Array a = Napi::Array::New(env, 2);
  a.Set(0u, r.tmp);
  a.Set(1u, r.target);
  return a;
}

// fileReplaceCommit: renames tmp over target (see core::CommitNamedReplace); the temporary file is
// removed on failure.
Napi::Value FileReplaceCommit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  core::Replacement r;
  r.path = ReadString(env, info[0], "path");
  r.target = ReadString(env, info[2], "target");
  r.tmp = ReadString(env, info[1], "tmp");
  bool sync = info[3].ToBoolean();
  if (FileFailure f = FromReplace(core::CommitNamedReplace(&r, sync)))
    ThrowValue(env, MakeFileError(env, f));
  return env.Undefined();
}

// A BigUint64Array of at least `count` elements, where the pipeline counts bytes, or null.
std::atomic<uint64_t>* ProgressSlots(Napi::Env env, Napi::Value v, size_t count) {
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
                    std::atomic<uint64_t>::is_always_lock_free,
                "progress counters are read by JavaScript as plain 64-bit integers");
  if (Absent(v)) return nullptr;
  char* data = nullptr;
  size_t len = 0;
  if (!HostView(env, v, &data, &len) || len < count * 8 ||
      reinterpret_cast<uintptr_t>(data) % alignof(std::atomic<uint64_t>))
    ThrowType(env, "progress must be a BigUint64Array of " + std::to_string(count) + " elements");
  return reinterpret_cast<std::atomic<uint64_t>*>(data);
}

DirectMode ReadDirectMode(Napi::Env env, Napi::Value v) {
  int m = Absent(v) ? 0 : ReadInt(env, v, "direct", 0, 2);
  return m == 1 ? DirectMode::kOn : m == 2 ? DirectMode::kOff : DirectMode::kAuto;
}

// The engine and team for memory on `e`'s side: the device's ring and staged team, or, for
// memory the CPU addresses, the host team alone (RunRead makes the host ring if it needs it).
void Attach(Napi::Env env, const Endpoint& e, std::shared_ptr<FileEngine>* engine,
            std::shared_ptr<core::CopyTeam>* team) {
  if (e.where != Endpoint::kDevice) {
    *team = HostTeam();
    return;
  }
  RequireCuda(env);
  Error err;
  *engine = GetEngine(e.device, &err);
  if (!*engine) ThrowCuda(env, err.code, err.call, err.detail);
  *team = GetStagingTeam(GetInstance(env), e.device);
}

// (path, dst, dstOffset, fileOffset, byteLength | -1, direct 0|1|2, progress?, fd?)
ReadRequest ReadReadArgs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadRequest r;
  r.path = ReadString(env, info[0], "path");
  r.dst = ResolveEndpoint(env, info[1], "dst");
  uint64_t dst_off = ReadSize(env, info[2], "dstOffset");
  r.file_offset = ReadSize(env, info[3], "fileOffset");
  if (!(info[4].IsNumber() && info[4].As<Napi::Number>().DoubleValue() == -1))
    r.length = static_cast<int64_t>(ReadSize(env, info[4], "byteLength"));
  r.direct = ReadDirectMode(env, info[5]);
  if (info.Length() > 6) {
    r.progress = ProgressSlots(env, info[6], 2);
    if (r.progress) r.total = r.progress + 1;
  }
  if (info.Length() > 7 && !Absent(info[7])) r.fd = ReadInt(env, info[7], "fd", 0, INT32_MAX);
  if (dst_off > r.dst.length)
    ThrowRange(env, "dstOffset (" + std::to_string(dst_off) + ") is past the end of dst (" +
                        std::to_string(r.dst.length) + " bytes)");
  if (r.length >= 0 && static_cast<uint64_t>(r.length) > r.dst.length - dst_off)
    ThrowRange(env, "dstOffset + byteLength (" + std::to_string(dst_off) + " + " +
                        std::to_string(r.length) + ") runs past the end of dst (" +
                        std::to_string(r.dst.length) + " bytes)");
  if (r.length >= 0 && r.file_offset + static_cast<uint64_t>(r.length) < r.file_offset)
    ThrowRange(env, "fileOffset + byteLength overflows");
  r.dst.ptr += dst_off;
  r.dst.length -= dst_off;
  BeforeUse(r.dst.alloc, nullptr);
  Attach(env, r.dst, &r.engine, &r.team);
  return r;
}

// (path, src, srcOffset, byteLength, fsync, mode, progress?, fileOffset?)
WriteRequest ReadWriteArgs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  WriteRequest w;
  w.path = ReadString(env, info[0], "path");
  w.src = ResolveEndpoint(env, info[1], "src");
  uint64_t off = ReadSize(env, info[2], "srcOffset");
  w.n = ReadSize(env, info[3], "byteLength");
  if (off > w.src.length || w.n > w.src.length - off)
    ThrowRange(env, "srcOffset + byteLength (" + std::to_string(off) + " + " + std::to_string(w.n) +
                        ") runs past the end of src (" + std::to_string(w.src.length) + " bytes)");
  w.src.ptr += off;
  w.src.length = w.n;
  w.fsync = info[4].ToBoolean();
  w.mode = Absent(info[5]) ? 0666 : ReadInt(env, info[5], "mode", 0, 07777);
  if (info.Length() > 6) w.progress = ProgressSlots(env, info[6], 1);
  if (info.Length() > 7 && !Absent(info[7])) {
    w.file_offset = static_cast<int64_t>(ReadSize(env, info[7], "fileOffset"));
    if (static_cast<uint64_t>(w.file_offset) + w.n > (1ull << 53))
      ThrowRange(env, "fileOffset + byteLength is above 2^53");
  }
  BeforeUse(w.src.alloc, nullptr);
  Attach(env, w.src, &w.engine, &w.team);
  return w;
}

Napi::Value ReadResultValue(Napi::Env env, const ReadResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("bytes", static_cast<double>(r.bytes));
  o.Set("direct", r.direct);
  o.Set("directReason", r.why);
  return o;
}

Napi::Value FileRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadRequest r = ReadReadArgs(info);
  ReadResult out;
  if (FileFailure f = RunRead(r, &out)) ThrowValue(env, MakeFileError(env, f));
  return ReadResultValue(env, out);
}

Napi::Value FileWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  WriteRequest w = ReadWriteArgs(info);
  if (FileFailure f = RunWrite(w)) ThrowValue(env, MakeFileError(env, f));
  return Napi::Number::New(env, static_cast<double>(w.n));
}

// Holds what a file transfer off the JS thread uses until it settles: the JS values (views, the
// progress array) and the library buffer, whose free() waits meanwhile.
class FileWorker : public PromiseWorker {
 public:
  FileWorker(Napi::Env env, const char* name, Allocation* alloc,
             const std::vector<Napi::Value>& keep)
      : PromiseWorker(env, name), alloc_(alloc) {
    for (const Napi::Value& v : keep)
      if (v.IsObject()) keep_.push_back(Napi::Persistent(v.As<Napi::Object>()));
    if (alloc_) {
      alloc_->pending++;
      alloc_->refs++;
    }
  }

 protected:
  void Release(Napi::Env env) noexcept override {
    if (!alloc_) return;
    if (--alloc_->pending == 0 && alloc_->free_requested) ReleaseAllocation(env, alloc_);
    DropReference(alloc_);
    alloc_ = nullptr;
  }
  Napi::Value Reject(Napi::Env env, bool* reject) {
    *reject = true;
    return MakeFileError(env, failure_);
  }
  FileFailure failure_;

 private:
  Allocation* alloc_;
  std::vector<Napi::ObjectReference> keep_;
};

class ReadWorker : public FileWorker {
 public:
  ReadWorker(Napi::Env env, ReadRequest r, const std::vector<Napi::Value>& keep)
      : FileWorker(env, "cuda-memory:readFileAsync", r.dst.alloc, keep), r_(std::move(r)) {}

 protected:
  void Work() override { failure_ = RunRead(r_, &out_); }
  Napi::Value Settlement(Napi::Env env, bool* reject) override {
    if (failure_) return Reject(env, reject);
    return ReadResultValue(env, out_);
  }

 private:
  ReadRequest r_;
  ReadResult out_;
};

class WriteWorker : public FileWorker {
 public:
  WriteWorker(Napi::Env env, WriteRequest w, const std::vector<Napi::Value>& keep)
      : FileWorker(env, "cuda-memory:writeFileAsync", w.src.alloc, keep), w_(std::move(w)) {}

 protected:
  void Work() override { failure_ = RunWrite(w_); }
  Napi::Value Settlement(Napi::Env env, bool* reject) override {
    if (failure_) return Reject(env, reject);
    return Napi::Number::New(env, static_cast<double>(w_.n));
  }

 private:
  WriteRequest w_;
};

Napi::Value FileReadAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* w = new ReadWorker(env, ReadReadArgs(info), {info[1], info[6]});
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value FileWriteAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* w = new WriteWorker(env, ReadWriteArgs(info), {info[1], info[6]});
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// fileStorageRead: returns { bytes, seconds, direct, directReason }: the library's read path
// without a GPU (the bytes stop in the ring), the storage's own rate for the file benchmark. Needs
// no CUDA.
Napi::Value FileStorageRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadRequest r;
  r.path = ReadString(env, info[0], "path");
  r.file_offset = ReadSize(env, info[1], "fileOffset");
  if (!(info[2].IsNumber() && info[2].As<Napi::Number>().DoubleValue() == -1))
    r.length = static_cast<int64_t>(ReadSize(env, info[2], "byteLength"));
  r.direct = ReadDirectMode(env, info[3]);
  r.dst.where = Endpoint::kPinned;
  r.dst.length = UINT64_MAX;  // nowhere: never written
  r.team = HostTeam();
  ReadResult out;
  auto t0 = std::chrono::steady_clock::now();
  if (FileFailure f = RunRead(r, &out)) ThrowValue(env, MakeFileError(env, f));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Napi::Object o = ReadResultValue(env, out).As<Napi::Object>();
  o.Set("seconds", s);
  return o;
}

// fileCache: returns { resident, dropped }: how much of the file is in the page cache, after asking
// the kernel to drop it when `drop` (posix_fadvise DONTNEED, after writing back its dirty pages;
// any user may, for a file they can open).
Napi::Value FileCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  bool drop = info[1].ToBoolean();
  Fd fd;
  struct stat st {};
  if (FileFailure f = OpenForRead(path, &fd, &st)) ThrowValue(env, MakeFileError(env, f));
  bool dropped = false;
  if (drop) {
    fdatasync(fd.fd);
    dropped = posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("resident", Resident(fd.fd, static_cast<uint64_t>(st.st_size)));
  o.Set("dropped", dropped);
  return o;
}

// fileDirectChoices: returns [{ device, direct, directRate, bufferedRate, reason }]: what the
// measurements at first use chose per file system.
Napi::Value FileDirectChoices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array a = Napi::Array::New(env);
  uint32_t i = 0;
  for (const auto& [dev, c] : DirectChoicesMade()) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("device", static_cast<double>(dev));
    o.Set("direct", c.direct);
    o.Set("directRate", c.direct_rate);
    o.Set("bufferedRate", c.buffered_rate);
    o.Set("reason", c.reason);
    a.Set(i++, o);
  }
  return a;
}

// fileErrnoError: returns the error a file call whose system call `syscall` failed with `errno`
// throws, coded as every such error is: most errnos (EDQUOT, EROFS, ...) cannot be provoked at
// will, and a test compares these codes with those lib/base/files.ts gives Node's errors.
Napi::Value FileErrnoError(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int err = ReadInt(env, info[0], "errno", 1, INT32_MAX);
  std::string syscall = ReadString(env, info[1], "syscall");
  std::string path = ReadString(env, info[2], "path");
  return MakeFileError(env, FromErrno(err, syscall.c_str(), path));
}

}  // namespace

}  // namespace cm::files

namespace cm {

void SetFileCodes(Napi::Env env, Napi::Value table) {
  if (!table.IsObject()) ThrowType(env, "fileCodes must be an object");
  Napi::Object o = table.As<Napi::Object>();
  Napi::Value list = o.Get("byErrno");
  if (!list.IsArray()) ThrowType(env, "fileCodes.byErrno must be an array");
  std::map<int, std::string> by_errno;
  Napi::Array pairs = list.As<Napi::Array>();
  for (uint32_t i = 0; i < pairs.Length(); ++i) {
    Napi::Value pair = pairs.Get(i);
    if (!pair.IsArray()) ThrowType(env, "fileCodes.byErrno must hold [errno, code] pairs");
    Napi::Array p = pair.As<Napi::Array>();
    by_errno[ReadInt(env, p.Get(0u), "errno", 1, INT32_MAX)] = ReadString(env, p.Get(1u), "code");
  }
  files::UseFileCodes(env, std::move(by_errno),
                      ReadString(env, o.Get("otherwise"), "fileCodes.otherwise"));
}

void InitFiles(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"fileRead", files::FileRead},
               {"fileReadAsync", files::FileReadAsync},
               {"fileWrite", files::FileWrite},
               {"fileWriteAsync", files::FileWriteAsync},
               {"fileStorageRead", files::FileStorageRead},
               {"fileCache", files::FileCache},
               {"fileReplaceBegin", files::FileReplaceBegin},
               {"fileReplaceCommit", files::FileReplaceCommit},
               {"fileDirectChoices", files::FileDirectChoices},
               {"fileErrnoError", files::FileErrnoError},
           });
}

}  // namespace cm
