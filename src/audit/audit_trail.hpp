// AuditTrail: every event the loader writes to its audit log (audit_log.hpp), each record
// built here and nowhere else, for single datasets and mixtures alike:
//   dataset_load     at open: the settled config, the fingerprint, then the opener's figures
//   epoch_start      the trainer took a split's first batch of an epoch (epoch_resume: a
//                    later batch, after a start or a resume mid-epoch); per mixture source,
//                    the first row of the source's epoch
//   epoch_complete   the trainer took an epoch's last batch (a source's last row)
//   stage_start      a mixture's stage of weights began
//   shape_stage_start  the trainer took the first batch of a shape_schedule stage (and, at
//                    a start or resume mid-stage, of the stage in force)
//   weights_changed  the trainer changed a mixture's weights from a step on (written at the
//                    call, or when a resume state's changes are applied)
//   rows_balanced    balance_ranks=attention: the rows of a global batch this rank took, and
//                    the ranks' attention costs sliced and balanced
//
// Thread-safety: as AuditLog (write is thread-safe); the loader writes from its trainer
// thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "audit/audit_log.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// A bool as the audit log and the loader's lines write it.
inline const char* bool_text(bool b) { return b ? "true" : "false"; }

// epoch_seed + epoch as the audit log records it: epoch_seed is validated to [0, 2^32-1]
// and resumed epochs to below 2^60, so the unsigned sum cannot wrap.
std::string epoch_seed_text(std::int64_t epoch_seed, std::uint64_t epoch);

// What a split samples, as events and messages name it: "episodes" (the SFT modes) or
// "windows" (token_stream).
struct SampledUnit {
  std::string plural;     // "episodes"
  std::string first_ids;  // the epoch_start field of the order's first ids
  std::string kept;       // dataset_load's prefix: "kept_" or "sampled_"
};

class AuditTrail {
 public:
  // The log in config.audit_log_dir (disabled when empty), for config.rank.
  // Throws Error(io) when the file cannot be made.
  explicit AuditTrail(const Config& config);

  const AuditLog& log() const noexcept { return log_; }

  // dataset_load: every entry of `config` (settled), the fingerprint, then `figures`.
  void dataset_load(const Config& config, const std::string& fingerprint, AuditLog::Fields figures);

  // A split's epoch opened (or resumed, at batch `resumed_at` > 0).
  struct EpochOpened {
    std::string split;
    std::uint64_t epoch = 0;
    std::string seed;  // epoch_seed_text
    bool shuffle = false;
    std::uint64_t units = 0;  // ids in the epoch's order
    std::uint64_t batches = 0;
    std::string first_ids;  // format_id_list of the order's first ids
    std::uint64_t resumed_at = 0;
  };
  void epoch_opened(const SampledUnit& unit, const EpochOpened& e);
  // A split's epoch done: `seen` of its `units` ids were trained.
  void epoch_complete(const SampledUnit& unit, const std::string& split, std::uint64_t epoch, const std::string& seed,
                      std::uint64_t seen, std::uint64_t units);

  // A mixture's stage `stage` began at `step`, with `weights` ("a=3,b=1").
  void stage_start(const std::string& split, std::size_t stage, std::uint64_t step, const std::string& weights);
  // Shape stage `stage` (from `first_step`) is in force at `step`: `global_batch_size` rows a
  // step, `rows` of them this rank's, of `block_size` positions.
  struct ShapeStageStart {
    std::string split;
    std::size_t stage = 0;
    std::uint64_t first_step = 0, step = 0, global_batch_size = 0, rows = 0, block_size = 0;
    std::uint64_t rows_before = 0;  // global rows the steps before `step` took
    // Where the batch stands in its epoch; absent without epochs (random sampling).
    std::optional<std::uint64_t> epoch, batch_in_epoch;
  };
  void shape_stage_start(const ShapeStageStart& s);
  // The trainer changed a mixture's weights (`weights`: "a=3,b=1", the sources it names) from
  // global step `step` on.
  void weights_changed(const std::string& split, std::uint64_t step, const std::string& weights);
  // balance_ranks=attention: the trainer took global batch `step`, of which this rank holds
  // rows `rows` (format_id_list of their indices in the global batch); the largest of the
  // ranks' attention costs (Σ len² of their rows' sequences) under the plain slicing and
  // under the balance, and their mean.
  struct RowsBalanced {
    std::string split;
    std::uint64_t step = 0;
    std::string rows;
    std::uint64_t sliced_max = 0, balanced_max = 0;
    double mean = 0;
  };
  void rows_balanced(const RowsBalanced& r);
  // A mixture source's epoch of `rows` rows opened (resumed at row `resumed_at_row`).
  void source_epoch_opened(const std::string& split, const std::string& source, std::uint64_t epoch,
                           const std::string& seed, std::uint64_t rows, std::optional<std::uint64_t> resumed_at_row);
  void source_epoch_complete(const std::string& split, const std::string& source, std::uint64_t epoch,
                             const std::string& seed, std::uint64_t rows);

 private:
  AuditLog log_;
  std::string rank_;
};

}  // namespace tokenfeed
