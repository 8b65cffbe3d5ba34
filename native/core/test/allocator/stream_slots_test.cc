// StreamSlots: a context is charged for the most streams it has had live at once, as the driver
// keeps a destroyed stream's memory for the next one. No Node, no GPU.
#include "core/allocator/stream_slots.h"

#include "core/test/check.h"

using namespace cm::core;

int main() {
  {
    StreamSlots s;
    uint64_t charged = 0;
    auto create = [&] {
      uint64_t c = s.ToCharge();
      charged += c;
      s.Created(c, c);
      return c;
    };
    // Three streams: each charged.
    CHECK(create() == kStreamBytes && create() == kStreamBytes && create() == kStreamBytes);
    CHECK(s.live() == 3 && s.kept() == 3 && s.charged() == 3 * kStreamBytes);
    // Two destroyed: the driver keeps their memory, so nothing comes back.
    s.Destroyed();
    s.Destroyed();
    CHECK(s.live() == 1 && s.charged() == 3 * kStreamBytes);
    // Two more take what the destroyed ones kept; a third beyond the most needs a charge.
    CHECK(create() == 0 && create() == 0 && create() == kStreamBytes);
    CHECK(s.live() == 4 && s.kept() == 4 && charged == 4 * kStreamBytes && s.charged() == charged);
    // A destroy of a stream not counted (made before the interposer saw it) cannot go below 0.
    for (int i = 0; i < 6; ++i) s.Destroyed();
    CHECK(s.live() == 0 && s.kept() == 4);
  }
  {
    // A charge that failed open: the slot is kept, nothing is owed back for it.
    StreamSlots s;
    s.Created(s.ToCharge(), 0);
    CHECK(s.kept() == 1 && s.charged() == 0);
    s.Destroyed();
    CHECK(s.ToCharge() == 0);
  }
  {
    // 64 streams, as routes.cu makes them on the H200: 36 MiB charged against NVML's 34.
    StreamSlots s;
    for (int i = 0; i < 64; ++i) s.Created(s.ToCharge(), s.ToCharge());
    CHECK(s.charged() == 36ull << 20);
  }
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
