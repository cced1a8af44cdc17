#include "loader/single_dataset.hpp"

#include <filesystem>
#include <utility>
#include <vector>

#include "dataset/content_fingerprint.hpp"
#include "loader/memory_budget.hpp"
#include "loader/open_split.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

// Where split `name` of `dataset_dir` keeps its data: its directory, else (a token stream's
// flat layout) NAME.bin.
fs::path split_data_path(const fs::path& dataset_dir, const std::string& name) {
  std::error_code ec;
  if (fs::is_directory(dataset_dir / name, ec)) return dataset_dir / name;
  return dataset_dir / (name + ".bin");
}

}  // namespace

SingleDataset::SingleDataset(ResolvedOptions settled) : settled_(std::move(settled)) {
  open_splits();
  make_fingerprint();
  std::vector<std::pair<std::string, detail::BatchShape>> shapes;
  for (const auto& [name, split] : own_) shapes.emplace_back(name, split->shape());
  check_memory_bound(config(), shapes);
  announce_open();
}

void SingleDataset::open_split(const std::string& name) {
  LoaderSplit* split = own_.emplace(name, open_dataset_split(settled_, name)).first->second.get();
  splits_.emplace(name, split);
}

void SingleDataset::open_splits() {
  Config& c = settled_.config;
  if (settled_.episode_mode()) {
    std::error_code ec;
    for (const char* name : kSplitNames) {
      if (fs::exists(c.dataset_dir / name, ec)) open_split(name);
      // The dtype inferred for train is the dataset's: val is validated with it rather
      // than inferred on its own, so the two can never be read at different widths.
      if (!c.token_dtype && has_split(name)) c.token_dtype = split(name).data().episodes->token_dtype();
    }
    // The token dtype every split agreed on (or was given) is the effective one; the same
    // for the mask's.
    if (!c.token_dtype) c.token_dtype = split("train").data().episodes->token_dtype();
    if (!c.mask_dtype) c.mask_dtype = split("train").data().episodes->mask_file_dtype();
    resolve_use_loss_mask();
  } else {
    for (const char* name : kSplitNames) {
      if (std::string_view(name) == "train" || TokenStreamSplit::has_split(c.dataset_dir, name)) open_split(name);
    }
    if (!c.token_dtype) c.token_dtype = split("train").data().stream->common_dtype();
  }
}

void SingleDataset::resolve_use_loss_mask() {
  std::string with, without;
  for (const auto& [name, split] : own_) {
    std::string& list = split->data().episodes->mask_files_present() ? with : without;
    list += (list.empty() ? "" : ", ") + name;
  }
  settle_use_loss_mask(settled_.config, with, without);
}

void SingleDataset::make_fingerprint() {
  const Config& c = config();
  OrderFields& fields = order_fields_;
  fields = settled_.order_fields();
  for (const auto& [name, split] : own_) {
    fields["data." + name] = hex64(split->data().fingerprint);  // layout, lengths, dtype
    // The tokens themselves (dataset/content_fingerprint.hpp: every byte, or sampled blocks).
    fields["content." + name] = hex64(content_fingerprint(split_data_path(c.dataset_dir, name)));
  }
  fingerprint_ = fingerprint_of("tokenfeed-order-v2", fields);
}

void SingleDataset::announce_open() {
  const Config& c = config();
  audit_ = std::make_unique<AuditTrail>(c);
  AuditLog::Fields figures;
  for (const auto& [name, split] : own_) {
    if (split->data().episodes) {
      figures.emplace_back("num_" + name + "_episodes", std::to_string(split->data().episodes->num_episodes()));
    }
    const SampledUnit& unit = split->description().unit;
    figures.emplace_back(unit.kept + name + "_" + unit.plural, std::to_string(split->data().sampler->kept_size()));
  }
  audit_->dataset_load(c, fingerprint_, std::move(figures));

  // The one line at open (the per-split details and epoch boundaries are debug lines).
  std::string line = "[tokenfeed] opened '" + c.dataset_dir.string() + "' mode=" + to_string(c.dataset_mode) +
                     " sampling=" + to_string(*c.batch_sampling_mode);
  for (const auto& [name, split] : own_) {
    line +=
        " " + name + "=" + std::to_string(split->data().sampler->kept_size()) + "_" + split->description().unit.plural;
  }
  line += std::string(" mask=") + bool_text(c.use_loss_mask.value_or(false)) + " rank=" + std::to_string(c.rank) +
          " world_size=" + std::to_string(c.world_size) + " (" + settled_.rank_source + ")" +
          " decode_threads=" + std::to_string(c.decode_threads) + " (" + settled_.decode_threads_source + ")";
  if (settled_.episode_mode()) line += " pad_id=" + std::to_string(*c.pad_token_id) + " (" + settled_.pad_source + ")";
  const AuditLog& log = audit_->log();
  line += " audit_log=" + (log.enabled() ? log.path().string() : std::string("off"));
  log_line(LogLevel::info, line);
}

}  // namespace tokenfeed
