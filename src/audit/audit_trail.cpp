#include "audit/audit_trail.hpp"

#include <utility>

#include "util/shortest_text.hpp"

namespace tokenfeed {

std::string epoch_seed_text(std::int64_t epoch_seed, std::uint64_t epoch) {
  return std::to_string(static_cast<std::uint64_t>(epoch_seed) + epoch);
}

AuditTrail::AuditTrail(const Config& config)
    : log_(config.audit_log_dir, static_cast<long>(config.rank)), rank_(std::to_string(config.rank)) {}

void AuditTrail::dataset_load(const Config& config, const std::string& fingerprint, AuditLog::Fields figures) {
  AuditLog::Fields fields;
  for (auto& [key, value] : config_entries(config)) fields.emplace_back(std::move(key), std::move(value));
  fields.emplace_back("dataset_fingerprint", fingerprint);
  for (auto& field : figures) fields.push_back(std::move(field));
  log_.write("dataset_load", fields);
}

void AuditTrail::epoch_opened(const SampledUnit& unit, const EpochOpened& e) {
  AuditLog::Fields fields{{"split", e.split},
                          {"epoch", std::to_string(e.epoch)},
                          {"seed", e.seed},
                          {"shuffle", bool_text(e.shuffle)},
                          {"num_" + unit.plural, std::to_string(e.units)},
                          {"batches", std::to_string(e.batches)},
                          {"rank", rank_},
                          {unit.first_ids, e.first_ids}};
  if (e.resumed_at != 0) fields.emplace_back("resumed_at_batch", std::to_string(e.resumed_at));
  log_.write(e.resumed_at != 0 ? "epoch_resume" : "epoch_start", fields);
}

void AuditTrail::epoch_complete(const SampledUnit& unit, const std::string& split, std::uint64_t epoch,
                                const std::string& seed, std::uint64_t seen, std::uint64_t units) {
  log_.write("epoch_complete", {{"split", split},
                                {"epoch", std::to_string(epoch)},
                                {"seed_used", seed},
                                {unit.plural + "_seen", std::to_string(seen)},
                                {unit.plural + "_skipped", std::to_string(units - seen)},
                                {"rank", rank_}});
}

void AuditTrail::stage_start(const std::string& split, std::size_t stage, std::uint64_t step,
                             const std::string& weights) {
  log_.write("stage_start", {{"split", split},
                             {"stage", std::to_string(stage)},
                             {"step", std::to_string(step)},
                             {"weights", weights},
                             {"rank", rank_}});
}

void AuditTrail::shape_stage_start(const ShapeStageStart& s) {
  if (!log_.enabled()) return;  // on the trainer's thread: nothing formatted for no file
  AuditLog::Fields fields{{"split", s.split},
                          {"stage", std::to_string(s.stage)},
                          {"first_step", std::to_string(s.first_step)},
                          {"step", std::to_string(s.step)},
                          {"global_batch_size", std::to_string(s.global_batch_size)},
                          {"rows", std::to_string(s.rows)},
                          {"block_size", std::to_string(s.block_size)},
                          {"rows_before", std::to_string(s.rows_before)}};
  if (s.epoch) fields.push_back({"epoch", std::to_string(*s.epoch)});
  if (s.batch_in_epoch) fields.push_back({"batch_in_epoch", std::to_string(*s.batch_in_epoch)});
  fields.push_back({"rank", rank_});
  log_.write("shape_stage_start", fields);
}

void AuditTrail::rows_balanced(const RowsBalanced& r) {
  log_.write("rows_balanced", {{"split", r.split},
                               {"step", std::to_string(r.step)},
                               {"rows", r.rows},
                               {"cost_max_sliced", std::to_string(r.sliced_max)},
                               {"cost_max_balanced", std::to_string(r.balanced_max)},
                               {"cost_mean", shortest_text(r.mean)},
                               {"rank", rank_}});
}

void AuditTrail::weights_changed(const std::string& split, std::uint64_t step, const std::string& weights) {
  log_.write("weights_changed",
             {{"split", split}, {"step", std::to_string(step)}, {"weights", weights}, {"rank", rank_}});
}

void AuditTrail::source_epoch_opened(const std::string& split, const std::string& source, std::uint64_t epoch,
                                     const std::string& seed, std::uint64_t rows,
                                     std::optional<std::uint64_t> resumed_at_row) {
  AuditLog::Fields fields{{"split", split},
                          {"source", source},
                          {"epoch", std::to_string(epoch)},
                          {"seed", seed},
                          {"rows", std::to_string(rows)},
                          {"rank", rank_}};
  if (resumed_at_row) fields.emplace_back("resumed_at_row", std::to_string(*resumed_at_row));
  log_.write(resumed_at_row ? "epoch_resume" : "epoch_start", fields);
}

void AuditTrail::source_epoch_complete(const std::string& split, const std::string& source, std::uint64_t epoch,
                                       const std::string& seed, std::uint64_t rows) {
  log_.write("epoch_complete", {{"split", split},
                                {"source", source},
                                {"epoch", std::to_string(epoch)},
                                {"seed_used", seed},
                                {"rows_seen", std::to_string(rows)},
                                {"rank", rank_}});
}

}  // namespace tokenfeed
