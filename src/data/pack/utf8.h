// Strict UTF-8 validation (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF), so a bad input is reported with its exact byte instead of being tokenized.
#pragma once

#include <cstddef>

namespace ftrain::data {

// True when [data, data+size) is valid UTF-8; otherwise *bad_offset is the first bad byte.
bool ValidUtf8(const char* data, size_t size, size_t* bad_offset);

}  // namespace ftrain::data
