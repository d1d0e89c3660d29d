// CLI helpers: exit code policy and flag parsing.
#include "cli/cli_util.h"

#include <iostream>

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
      return kExitBad;
    case C::kInvalidArgument:
    case C::kFailedPrecondition:
    case C::kDeadlineExceeded:
    case C::kIOError:
      return kExitUsage;
  }
  return kExitBad;
}

int Fail(const std::string& program, const Status& s) {
  std::cerr << program << ": " << s.message() << std::endl;
  return ExitCodeFor(s);
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

}  // namespace ftrain::cli
