// The code version ("0.1.0+<git describe>") that checkpoints pin and `--version` prints.
// Generated at build time (cmake/version.cmake) so that a new commit recompiles one file.
#pragma once

namespace ftrain {
const char* CodeVersion();
}  // namespace ftrain
