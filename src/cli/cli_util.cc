// CLI helpers: exit code policy and flag parsing.
#include "cli/cli_util.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "core/log.h"

namespace ftrain::cli {

namespace po = boost::program_options;

int ExitCodeFor(const Status& s) {
  using C = Status::Code;
  switch (s.code()) {
    case C::kOk:
      return kExitOk;
    case C::kCorruption:
    case C::kNotFound:
    case C::kUnavailable:
    case C::kAborted:
    case C::kInternal:
    case C::kStorageUnavailable:
      return kExitBad;
    case C::kInvalidArgument:
    case C::kFailedPrecondition:
    case C::kDeadlineExceeded:
    case C::kIOError:
      return kExitUsage;
    case C::kNodeFault:
      return kExitNodeFault;
  }
  return kExitBad;
}

int Fail(const std::string& program, const Status& s) {
  std::cerr << program << ": " << s.message() << std::endl;
  return ExitCodeFor(s);
}

Status InitLogLevel(int* argc, char** argv) {
  FT_RETURN_IF_ERROR(SetLogLevelFromEnv());
  int out = 1;
  std::string value;
  bool given = false;
  for (int i = 1; i < *argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--") == 0) {  // what follows belongs to another program
      for (; i < *argc; ++i) argv[out++] = argv[i];
      break;
    }
    if (std::strcmp(a, "--log-level") == 0) {
      if (i + 1 >= *argc) {
        return Status::InvalidArgument("--log-level needs a value: debug, info, warning, error");
      }
      value = argv[++i];
      given = true;
    } else if (std::strncmp(a, "--log-level=", 12) == 0) {
      value = a + 12;
      given = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;  // argv stays null-terminated for whoever execs with it
  if (!given) return Status::Ok();
  LogLevel level;
  if (!ParseLogLevel(value, &level)) {
    return Status::InvalidArgument("--log-level '" + value +
                                   "' is not one of debug, info, warning, error");
  }
  SetLogLevel(level);
  // Inherited by child processes; setenv fails only without memory, and then they log at info.
  (void)::setenv(kLogLevelEnv, value.c_str(), 1);
  return Status::Ok();
}

Status ParseFlags(const std::string& program, int argc, char** argv,
                  const po::options_description& options,
                  const po::positional_options_description& positional, po::variables_map* vm) {
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(options).positional(positional);
    po::store(parser.run(), *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(std::string(e.what()) + " (see '" + program + " --help')");
  }
  return Status::Ok();
}

bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace ftrain::cli
