// Tests of what makes two openings of CUDA IPC memory in one thread the same (SameOpening): the
// handle's 64 bytes and the range, whichever format the descriptor came in, never two exports'
// records; how an opening is named in errors; and which record names the importer accepts.
#include "core/memory/ipc_record.h"

#include <string>

#include "core/test/check.h"

using cm::core::DescribeOpening;
using cm::core::IpcOpening;
using cm::core::SameOpening;
using cm::core::ValidRecordName;

namespace {

IpcOpening Opening(uint8_t first, uint64_t offset, uint64_t bytes, std::string record = "") {
  IpcOpening o;
  for (size_t i = 0; i < o.handle.size(); ++i) o.handle[i] = static_cast<uint8_t>(first + i);
  o.offset = offset;
  o.bytes = bytes;
  o.record = std::move(record);
  return o;
}

const std::string kRecord = "cuda-memory-ipc.4711.0123456789abcdef";

}  // namespace

int main() {
  const IpcOpening open = Opening(1, 4096, 65536);
  // The same memory: the same handle bytes and range, with a record or without (the two formats
  // of one export), and the same record.
  CHECK(SameOpening(open, Opening(1, 4096, 65536)));
  CHECK(SameOpening(open, Opening(1, 4096, 65536, kRecord)));
  CHECK(SameOpening(Opening(1, 4096, 65536, kRecord), open));
  CHECK(SameOpening(Opening(1, 4096, 65536, kRecord), Opening(1, 4096, 65536, kRecord)));
  // Other memory: one handle byte, the offset, the length.
  IpcOpening one_byte = open;
  one_byte.handle[63] ^= 1;
  CHECK(!SameOpening(open, one_byte));
  IpcOpening first_byte = open;
  first_byte.handle[0] ^= 0x80;
  CHECK(!SameOpening(open, first_byte));
  CHECK(!SameOpening(open, Opening(1, 0, 65536)));
  CHECK(!SameOpening(open, Opening(1, 4096, 4096)));
  CHECK(!SameOpening(open, Opening(1, 0, 4096 + 65536)));
  // Two exports of the same range (the first withdrawn by a forced free): two records, two buffers.
  CHECK(!SameOpening(Opening(1, 4096, 65536, kRecord),
                     Opening(1, 4096, 65536, "cuda-memory-ipc.4711.fedcba9876543210")));

  // Named by everything that decides it.
  std::string hex;
  for (int i = 1; i <= 64; ++i) {
    static const char* d = "0123456789abcdef";
    hex += d[i >> 4];
    hex += d[i & 15];
  }
  CHECK(DescribeOpening(open) == "handle " + hex + ", offset 4096, byteLength 65536");
  CHECK(DescribeOpening(Opening(1, 4096, 65536, kRecord)) ==
        "handle " + hex + ", offset 4096, byteLength 65536, record " + kRecord);

  // Record names as the exporter writes them, and nothing else: one spelling per record.
  CHECK(ValidRecordName(kRecord));
  CHECK(ValidRecordName("cuda-memory-ipc.0.0123456789abcdef"));
  CHECK(ValidRecordName("cuda-memory-ipc.4294967295.0123456789abcdef"));
  CHECK(!ValidRecordName("cuda-memory-ipc.4711.0123456789ABCDEF"));
  CHECK(!ValidRecordName("cuda-memory-ipc.04711.0123456789abcdef"));
  CHECK(!ValidRecordName("cuda-memory-ipc.00.0123456789abcdef"));
  CHECK(!ValidRecordName("cuda-memory-ipc..0123456789abcdef"));
  CHECK(!ValidRecordName("cuda-memory-ipc.12345678901.0123456789abcdef"));
  CHECK(!ValidRecordName("cuda-memory-ipc.4711.0123456789abcde"));
  CHECK(!ValidRecordName("cuda-memory-ipc.4711.0123456789abcdef0"));
  CHECK(!ValidRecordName("CUDA-MEMORY-IPC.4711.0123456789abcdef"));
  CHECK(!ValidRecordName("../../etc/passwd"));
  CHECK(!ValidRecordName(""));
  return failures ? 1 : 0;
}
