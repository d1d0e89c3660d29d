// `ftrain report RUN_DIR [--svg FILE]`: flags only; see src/train/report.h.
#include <iostream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "train/report.h"

namespace ftrain::cli {

namespace po = boost::program_options;

int RunReport(int argc, char** argv) {
  const std::string program = "ftrain report";
  po::options_description opts("ftrain report RUN_DIR [--svg FILE]");
  std::string run_dir, svg;
  opts.add_options()("help,h", "show this help")("run-dir", po::value<std::string>(&run_dir),
                                                 "the run directory")(
      "svg", po::value<std::string>(&svg), "also write a self-contained SVG timeline here");
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  if (run_dir.empty()) return Fail(program, Status::InvalidArgument("give the run directory"));
  s = train::PrintReport(run_dir, std::cout);
  if (s.ok() && !svg.empty()) {
    s = train::WriteReportSvg(run_dir, svg);
    if (s.ok()) std::cout << "timeline written to " << svg << "\n";
  }
  return s.ok() ? kExitOk : Fail(program, s);
}

}  // namespace ftrain::cli
