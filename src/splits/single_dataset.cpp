#include "splits/single_dataset.hpp"

#include <filesystem>
#include <utility>
#include <vector>

#include "dataset/content_fingerprint.hpp"
#include "dataset/layout_free_content.hpp"
#include "launch/memory_budget.hpp"
#include "splits/mode_builder.hpp"
#include "launch/parallel_layout.hpp"
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

// The data files of a split read in place from foreign files (a token stream's, or the
// documents of one read as episodes), each with its index.
std::vector<fs::path> foreign_files(const SplitData& data) {
  std::vector<fs::path> files;
  const auto add = [&files](const fs::path& path, bool megatron, bool datatrove) {
    files.push_back(path);
    if (megatron) files.push_back(fs::path(path).replace_extension(".idx"));
    if (datatrove) files.push_back(path.string() + ".index");
  };
  if (data.stream) {
    for (const StreamFile& f : data.stream->files()) {
      add(f.map.path(), f.format == StreamFileFormat::megatron, f.format == StreamFileFormat::datatrove);
    }
  } else {
    for (const EpisodeShard& shard : data.episodes->shards()) {  // a foreign file's shard is the file
      const bool datatrove = shard.dir.extension() == ".ds";
      add(shard.dir, !datatrove, datatrove);
    }
  }
  return files;
}

// The content fingerprint of split `name`: its directory's or NAME.bin's data files, or, for
// Megatron pairs placed directly in dataset_dir and a val chosen by document hash from
// train's files (read as a token stream or as episodes), the files it opened (with their
// indexes).
std::uint64_t split_content(const fs::path& dataset_dir, const std::string& name, const SplitData& data) {
  std::error_code ec;
  const bool foreign_episodes =
      data.episodes && !data.episodes->shards().empty() && data.episodes->shards().front().documents;
  if ((!data.stream && !foreign_episodes) || fs::is_directory(dataset_dir / name, ec) ||
      fs::exists(dataset_dir / (name + ".bin"), ec)) {
    return content_fingerprint(split_data_path(dataset_dir, name));
  }
  return content_fingerprint(foreign_files(data), dataset_dir);
}

}  // namespace

SingleDataset::SingleDataset(ResolvedOptions settled) : settled_(std::move(settled)) {
  layout_ = settled_.layout;
  open_splits();
  make_fingerprint();
  std::vector<std::pair<std::string, detail::BatchShape>> shapes;
  for (const auto& [name, split] : own_) shapes.emplace_back(name, split->shape());
  check_memory_bound(config(), shapes);
  announce_open();
}

void SingleDataset::open_splits() {
  own_ = open_dataset_splits(settled_);
  for (const auto& [name, split] : own_) splits_.emplace(name, split.get());
}

void SingleDataset::make_fingerprint() {
  const Config& c = config();
  OrderFields& fields = order_fields_;
  fields = tokenfeed::order_fields(settled_.config);
  // What a tokenfeed before layout-free episode content gave: the layout's hashes throughout.
  OrderFields earlier = fields;
  for (const auto& [name, split] : own_) {
    const SplitData& data = split->data();
    earlier["data." + name] = hex64(data.fingerprint);  // layout, lengths, dtype
    // The tokens themselves (dataset/content_fingerprint.hpp: every byte, or sampled blocks).
    earlier["content." + name] = hex64(split_content(c.dataset_dir, name, data));
    if (data.episodes) {
      // Episodes are numbered globally and read by id, so that their batches are the same
      // however the split is sharded: the documents and their content, whatever the files
      // (dataset/layout_free_content.hpp), a `prepare-text --merge` of N tasks as a
      // one-process run.
      const LayoutFreeFingerprint layout_free = layout_free_fingerprint(*data.episodes);
      fields["data." + name] = hex64(layout_free.documents);
      fields["content." + name] = hex64(layout_free.content);
    } else {
      // A token stream's windows never cross a file: its files are part of its order.
      fields["data." + name] = earlier["data." + name];
      fields["content." + name] = earlier["content." + name];
    }
  }
  fingerprint_ = fingerprint_of("tokenfeed-order-v2", fields);
  const std::string earlier_fingerprint = fingerprint_of("tokenfeed-order-v2", earlier);
  if (earlier_fingerprint != fingerprint_) earlier_fingerprints_.push_back(earlier_fingerprint);
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
  if (c.val_overrides.batch_size || c.val_overrides.block_size) {  // val's own shape
    line += " val_shape=" + std::to_string(c.batch_size_for("val")) + "x" + std::to_string(c.block_size_for("val"));
  }
  line += std::string(" mask=") + bool_text(c.use_loss_mask.value_or(false)) + " " +
          ranks_text(layout_, settled_.rank_source, c.data_loading) +
          " decode_threads=" + std::to_string(c.decode_threads) + " (" + settled_.decode_threads_source + ")";
  if (!settled_.pad_source.empty())
    line += " pad_id=" + std::to_string(*c.pad_token_id) + " (" + settled_.pad_source + ")";
  const AuditLog& log = audit_->log();
  line += " audit_log=" + (log.enabled() ? log.path().string() : std::string("off"));
  if (!settled_.open_note.empty()) line += " (" + settled_.open_note + ")";
  log_line(LogLevel::info, line);
}

}  // namespace tokenfeed
