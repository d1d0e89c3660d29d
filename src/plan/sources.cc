// Reading --data and --calibrate inputs for `ftrain plan`. Run-directory names are the ones the
// trainer writes (metrics.jsonl, config.resolved.cfg, ckpt.root defaulting to RUN/checkpoints),
// as in report/run_report.cc.
#include "plan/sources.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/store.h"
#include "core/config.h"
#include "core/env.h"
#include "core/run_layout.h"
#include "data/read/dataset.h"

namespace ftrain {

StatusOr<DataFacts> ReadDataFacts(const std::string& spec, Env* env) {
  auto ds = data::Dataset::Open(spec, env);
  if (!ds.ok()) {
    // A path that is not there is a usage error of this command (exit 2), not bad data.
    if (ds.status().code() == Status::Code::kNotFound) {
      return Status::InvalidArgument("--data: " + ds.status().message());
    }
    return ds.status().Annotate("--data");
  }
  const data::DatasetIndex& x = (*ds)->index();
  DataFacts f;
  f.path = spec;
  f.rows = x.num_rows;
  f.seq_len = x.seq_len;
  f.token_bytes = x.token_bytes;
  f.text_bytes = x.stats.text_bytes;
  f.stream_tokens = x.stats.stream_tokens;
  return f;
}

StatusOr<CalibrationRun> ReadCalibrationRun(const std::string& run_dir, std::optional<int64_t> gpus,
                                            Env* env) {
  CalibrationRun run;
  run.run_dir = run_dir;
  const std::string metrics = RunLayout(run_dir).metrics();
  std::ifstream in(metrics);
  if (!in) {
    return Status::InvalidArgument("--calibrate: '" + run_dir +
                                   "' has no metrics.jsonl: not an ftrain run directory");
  }
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") ||
        !j["step"].is_number_integer() || !j.value("tokens_per_s", nlohmann::json()).is_number()) {
      if (in.peek() == EOF) break;  // a torn last line: the trainer died while appending it
      return Status::Corruption(metrics + ":" + std::to_string(line_no) +
                                ": not a metrics record (step, tokens_per_s)");
    }
    CalibrationStep s;
    s.step = j["step"].get<int64_t>();
    s.tokens_per_s = j["tokens_per_s"].get<double>();
    const auto stall = j.value("ckpt_stall_s", nlohmann::json(0.0));
    const auto restarts = j.value("restart_count", nlohmann::json(0));
    s.ckpt_stall_s = stall.is_number() ? stall.get<double>() : 0.0;
    s.restart_count = restarts.is_number_integer() ? restarts.get<int64_t>() : 0;
    run.steps.push_back(s);
  }

  // The run's model and data from the config the trainer resolved. Without the file the plan's
  // own model stands in (the output says so).
  const RunLayout layout(run_dir);
  FT_ASSIGN_OR_RETURN(std::string ckpt_root, layout.CheckpointRoot());
  const std::string cfg_path = layout.resolved_config();
  if (std::ifstream(cfg_path)) {
    FT_ASSIGN_OR_RETURN(Config cfg, Config::LoadFile(cfg_path));
    Config model_only;
    for (const auto& [key, entry] : cfg.entries()) {
      if (key.rfind("model.", 0) == 0) model_only.Set(key, entry.value, entry.origin);
    }
    auto model = LlamaConfig::FromConfig(model_only);
    if (!model.ok()) return model.status().Annotate("--calibrate " + cfg_path);
    run.model = *model;
    std::string data_path;
    if (cfg.GetString("data.path", &data_path).ok()) {
      auto facts = ReadDataFacts(data_path, env);
      // The data may have moved since the run; the model's max_seq_len then bounds the rows.
      if (facts.ok()) run.seq_len = facts->seq_len;
    }
  }

  if (gpus) {
    run.gpus = *gpus;
    run.gpus_source = "--calibrate-gpus";
    return run;
  }
  ckpt::CheckpointStore store(ckpt_root, env);
  auto latest = store.Latest();
  // No readable checkpoint leaves the count unknown; the planner then asks for the flag.
  if (latest.ok() && latest->has_value()) {
    run.gpus = (*latest)->world_size;
    run.gpus_source = "world size of " + (*latest)->path;
  }
  return run;
}

}  // namespace ftrain
