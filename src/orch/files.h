// orch/files.h - small file operations the controller and the agents share: private files
// (0600, made beside and renamed into place, never through a symbolic link), checked reads of
// files others could have planted, and plain text reads. What must survive a crash goes
// through core/env.h (WriteFileDurably) instead.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/status.h"

namespace ftrain::orch {

// Creates or replaces `path` with `data`, mode 0600: a private temp file beside it, fsync,
// rename (which replaces a link named `path`, never its target).
Status WritePrivate(const std::string& path, const std::string& data);
// `path` must be this user's, not a link, of `type` (S_IFREG, S_IFDIR) and without group or
// other bits; FailedPrecondition names what is wrong.
Status CheckPrivate(const std::string& path, mode_t type, const char* what);
// A checked private file's contents.
StatusOr<std::string> ReadPrivate(const std::string& path);
// The contents of a small file ("" with NotFound when it does not exist).
StatusOr<std::string> ReadText(const std::string& path);
// The contents of a small file, or `def` when it cannot be read.
std::string ReadTextOr(const std::string& path, const std::string& def = "");
// The last complete line of a file ("" when none).
std::string LastLine(const std::string& path);

}  // namespace ftrain::orch
