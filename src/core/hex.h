// 64-bit hashes as text: exactly 16 lower-case hex digits ("0123456789abcdef"). Shared by the
// data shards' index and the checkpoint manifests, so both print and parse hashes alike.
#pragma once

#include <cstdint>
#include <string>

namespace ftrain {

std::string Hex64(uint64_t v);
// false unless `text` is exactly 16 lower-case hex digits.
bool ParseHex64(const std::string& text, uint64_t* out);

}  // namespace ftrain
