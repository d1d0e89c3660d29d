// UTF-8 validation by the table in RFC 3629 section 4; ASCII runs take a fast path.
#include "data/pack/utf8.h"

#include <cstdint>

namespace ftrain::data {

bool ValidUtf8(const char* data, size_t size, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const uint8_t*>(data);
  size_t i = 0;
  while (i < size) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;  // no overlongs
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;  // no overlongs
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      *bad_offset = i;
      return false;
    }
    if (i + need >= size) {  // fewer than `need` continuation bytes left
      *bad_offset = i;
      return false;
    }
    if (s[i + 1] < lo || s[i + 1] > hi) {
      *bad_offset = i;
      return false;
    }
    for (size_t k = 2; k <= need; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) {
        *bad_offset = i;
        return false;
      }
    }
    i += need + 1;
  }
  return true;
}

}  // namespace ftrain::data
