// The handle table (core/binding/handle_table.h): handles stay safe integers and keep working
// however many alloc/free pairs a slot sees, stale numbers never reach a later buffer, and a full
// table refuses instead of aliasing.
#include "core/binding/handle_table.h"

#include <cstdio>

#include "core/test/check.h"

using cm::core::HandleTable;
using Table = HandleTable<int>;

static void TestBasics() {
  Table t;
  int a = 1, b = 2;
  uint32_t sa, sb;
  double ha = t.Add(&a, &sa), hb = t.Add(&b, &sb);
  bool stale = true;
  CHECK(ha == 0 && hb == 1 && sa == 0 && sb == 1);
  CHECK(t.Find(ha, &stale) == &a && !stale && t.Find(hb, &stale) == &b);
  t.Remove(&a, sa);
  CHECK(t.Find(ha, &stale) == nullptr && stale);
  double ha2 = t.Add(&a, &sa);  // the freed slot, one generation on
  CHECK(sa == 0 && ha2 == Table::kSlotSpan && t.Find(ha, &stale) == nullptr && stale);
  CHECK(t.Find(ha2, &stale) == &a);
  // Not handles: out of range, fractional, negative, NaN, past 2^53, a slot never used.
  for (double bad : {-1.0, 0.5, 1e300, 9007199254740992.0, 5.0, 0.0 / 0.0}) {
    CHECK(t.Find(bad, &stale) == nullptr && !stale);
  }
  t.Remove(&b, sb);
  t.Remove(&b, sb);  // twice: nothing
  t.Remove(&a, Table::kNoSlot);
  CHECK(t.size() == 1);
}

// A slot started two generations before the wrap: the handles reach 2^53 - 2^24 + slot at most,
// then the slot retires and the next buffer gets a fresh one. No number is ever handed out twice.
static void TestGenerationsNeverWrap() {
  const uint32_t last = static_cast<uint32_t>(Table::kGenerations - 1);
  Table t(last - 1);
  int x = 0;
  uint32_t slot;
  double h1 = t.Add(&x, &slot);
  CHECK(slot == 0 && h1 == static_cast<double>(Table::kSlotSpan * (last - 1)));
  t.Remove(&x, slot);
  double h2 = t.Add(&x, &slot);
  CHECK(slot == 0 && h2 == static_cast<double>(Table::kSlotSpan * last));
  CHECK(h2 <= 9007199254740991.0);  // still a safe integer
  bool stale = false;
  CHECK(t.Find(h2, &stale) == &x);
  t.Remove(&x, slot);
  CHECK(t.retired() == 1);
  double h3 = t.Add(&x, &slot);  // slot 0 is used up: a fresh slot
  CHECK(slot == 1 && h3 == static_cast<double>(Table::kSlotSpan * (last - 1) + 1));
  CHECK(t.Find(h3, &stale) == &x);
  for (double old : {h1, h2}) CHECK(t.Find(old, &stale) == nullptr && stale);
  // A long run of pairs over a table started near the wrap: every handle is a safe integer,
  // found while live and stale after, and none repeats.
  Table u(last - 1000);
  double previous = -1;
  int live = 7;
  for (int i = 0; i < 100000; ++i) {
    uint32_t s;
    double h = u.Add(&live, &s);
    if (!(h >= 0 && h <= 9007199254740991.0) || h == previous || u.Find(h, &stale) != &live) {
      CHECK(false);
      break;
    }
    u.Remove(&live, s);
    if (u.Find(h, &stale) != nullptr || !stale) {
      CHECK(false);
      break;
    }
    previous = h;
  }
  CHECK(u.retired() == 100000 / 1001 && u.size() == 0);
}

static void TestFullTableRefuses() {
  Table t(0, 3);
  int v[4];
  uint32_t s[4];
  for (int i = 0; i < 3; ++i) CHECK(t.Add(&v[i], &s[i]) >= 0);
  CHECK(t.Add(&v[3], &s[3]) < 0 && s[3] == Table::kNoSlot);
  t.Remove(&v[1], s[1]);
  CHECK(t.Add(&v[3], &s[3]) >= 0 && s[3] == 1);
}

int main() {
  TestBasics();
  TestGenerationsNeverWrap();
  TestFullTableRefuses();
  std::printf("handle table tests: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures,
              failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
