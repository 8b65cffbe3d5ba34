// The processes a group's budget does not hold, recorded beside the group's ledger so that an
// operator sees them (groupStats(), top, the gauges): a preloaded process that could not join or
// keep its group (a ledger missing, full, damaged, foreign or another user's, a setting that does
// not parse, a lock not had in time) and whose allocations therefore go on uncharged ("fail
// open"), or under CUDA_MEMORY_GROUP_STRICT=1 are refused; or one with memory the interposer
// cannot see (a module loaded into another link-map namespace, graph memory the budget could not
// afford after a launch).
//
// One small file per such process, `cuda-memory-uncharged.<group>.<device>.<pid>` in the group's
// folder, made and checked as every shared file is (mode 0600, this user's, never through a link,
// complete before its name appears) and not inside the ledger, which may be the very thing that
// is broken. The process holds an open-file-description lock on the file for as long as it lives,
// so a reader knows it gone, however it ended, and removes the file: no pid can be mistaken for a
// reused one. No Node, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cm::core {

struct UnchargedProcess {
  int64_t pid = 0;
  uint64_t since_unix_ms = 0;
  std::string code;     // why: the error code (ERR_GROUP_LEDGER_CORRUPT, ERR_PRELOAD_MODULE, ...)
  std::string detail;   // a sentence saying what happened
  bool strict = false;  // refused instead of uncharged (CUDA_MEMORY_GROUP_STRICT=1)
  uint64_t bytes = 0;   // what its allocations asked for since, uncharged (or refused)
  uint64_t calls = 0;   // how many allocations that was
  std::string path;
};

class UnchargedRecord {
 public:
  // Records this process for group `name` on `device` in `dir`, replacing a record left by an
  // earlier process of the same pid. Throws ShmError where it cannot (an untrusted folder, an
  // invalid name, no room).
  static UnchargedRecord* Make(const std::string& dir, const std::string& name,
                               const std::string& device, const std::string& code,
                               const std::string& detail, bool strict);
  // Every process recorded for the group, the files of those gone removed. A file that does not
  // check out (another user's, damaged) is left alone and not listed. Throws ShmError only for an
  // untrusted folder.
  static std::vector<UnchargedProcess> Read(const std::string& dir, const std::string& name,
                                            const std::string& device);
  // The files' common name before the pid.
  static std::string Prefix(const std::string& name, const std::string& device);

  ~UnchargedRecord();  // Remove()
  UnchargedRecord(const UnchargedRecord&) = delete;
  UnchargedRecord& operator=(const UnchargedRecord&) = delete;

  // One more allocation of `bytes` that went on uncharged (or was refused). Never throws.
  void Count(uint64_t bytes) noexcept;
  // Removes the record (the process is charged again, or ends). Never throws.
  void Remove() noexcept;
  // In a child after fork: lets go of the parent's record without removing it.
  void Abandon() noexcept;
  const std::string& path() const { return path_; }

  struct File;

 private:
  UnchargedRecord() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0, calls_ = 0;
};

}  // namespace cm::core
