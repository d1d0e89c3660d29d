// `ftrain report RUN_DIR [--svg FILE] [--json]`: flags only; see src/report/run_report.h.
#include <iostream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/env.h"
#include "report/run_report.h"

namespace ftrain::cli {

namespace po = boost::program_options;

int RunReport(int argc, char** argv) {
  const std::string program = "ftrain report";
  po::options_description opts("ftrain report RUN_DIR [--svg FILE] [--json]");
  std::string run_dir, svg;
  bool json = false;
  opts.add_options()("help,h", "show this help")("run-dir", po::value<std::string>(&run_dir),
                                                 "the run directory (run.dir of a training run)")(
      "svg", po::value<std::string>(&svg), "also write a self-contained SVG timeline here")(
      "json", po::bool_switch(&json), "print one JSON object instead of the text report");
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  if (run_dir.empty()) {
    return Fail(program, Status::InvalidArgument("give the run directory (see --help)"));
  }
  auto summary = report::AnalyzeRun(run_dir, Env::Default());
  if (!summary.ok()) return Fail(program, summary.status());
  if (json) {
    // The text report lists its warnings (skipped torn lines, estimates) at its end; with
    // --json they are in "warnings" and on stderr, so a script's log shows them too.
    for (const auto& w : summary->warnings) std::cerr << program << ": warning: " << w << "\n";
    report::PrintReportJson(*summary, std::cout);
  } else {
    report::PrintReport(*summary, std::cout);
  }
  if (!svg.empty()) {
    s = report::WriteReportSvg(*summary, svg);
    if (!s.ok()) return Fail(program, s);
    (json ? std::cerr : std::cout) << "timeline written to " << svg << "\n";
  }
  return kExitOk;
}

}  // namespace ftrain::cli
