// Helpers shared by the thin CLI mains: exit codes from Status, one-line errors,
// Boost.Program_options parsing with errors turned into usage Status values.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "records/exit_codes.h"

namespace ftrain::cli {

// kExitOk, kExitBad (the checked thing is bad), kExitUsage: records/exit_codes.h.
using ftrain::kExitBad;
using ftrain::kExitOk;
using ftrain::kExitUsage;

// 2 for usage/environment problems, 1 for bad data, 0 for OK.
int ExitCodeFor(const Status& s);

// Prints "<program>: <message>" on stderr and returns ExitCodeFor(s).
int Fail(const std::string& program, const Status& s);

// Start-up logging level for every main (ftrain, ckptctl, ckptd, ftrain-data): first
// $FTRAIN_LOG_LEVEL, then a `--log-level LEVEL` or `--log-level=LEVEL` anywhere in argv[1..]
// before a "--". The flag is removed from argv (subcommands never see it) and exported as
// FTRAIN_LOG_LEVEL, so the processes this one starts (launched ranks, ftrain-data) log at the
// same level. A bad value or a missing one is InvalidArgument naming its source.
Status InitLogLevel(int* argc, char** argv);

// Whether any of argv[1..] is --help or -h.
bool WantsHelp(int argc, char** argv);

// Parses argv with the given options (and positional spec, may be empty). Unknown flags,
// missing values and bad numbers become InvalidArgument naming the flag.
Status ParseFlags(const std::string& program, int argc, char** argv,
                  const boost::program_options::options_description& options,
                  const boost::program_options::positional_options_description& positional,
                  boost::program_options::variables_map* vm);

}  // namespace ftrain::cli
