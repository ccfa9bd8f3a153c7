// crc32: see snapshot/crc32.h.
#include "snapshot/crc32.h"

#include <string.h>

namespace retain::shim {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the 8-byte step assumes little-endian loads");

constexpr uint32_t kReflectedPolynomial = 0xedb88320;

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] is the CRC
// of byte b followed by k zero bytes, so eight table lookups advance the CRC
// by eight bytes at once.
struct Tables {
  uint32_t t[8][256];
};

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kReflectedPolynomial : 0);
    tables.t[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t previous = tables.t[k - 1][b];
      tables.t[k][b] = (previous >> 8) ^ tables.t[0][previous & 0xff];
    }
  }
  return tables;
}

// In .rodata: nothing runs at load time (the shim has no initialisers).
constexpr Tables kTables = MakeTables();

}  // namespace

uint32_t Crc32Update(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto& t = kTables.t;
  crc = ~crc;
  while (size >= 8) {
    uint32_t low;
    uint32_t high;
    // Little-endian loads (x86-64, arm64 Linux), unaligned-safe.
    memcpy(&low, p, 4);
    memcpy(&high, p + 4, 4);
    low ^= crc;
    crc = t[7][low & 0xff] ^ t[6][(low >> 8) & 0xff] ^ t[5][(low >> 16) & 0xff] ^ t[4][low >> 24] ^
          t[3][high & 0xff] ^ t[2][(high >> 8) & 0xff] ^ t[1][(high >> 16) & 0xff] ^
          t[0][high >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

}  // namespace retain::shim
