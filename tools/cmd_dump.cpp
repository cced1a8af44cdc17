// `tokenfeed dump`: writes the next N batches of a split as .npy files, optionally
// restoring a resume state first and saving one after.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <utility>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "every_field_config.hpp"
#include "tokenfeed/npy_writer.hpp"
#include "tokenfeed/state_file.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::cli {
namespace {

namespace fs = std::filesystem;

struct DumpOptions {
  std::string config;
  std::string split = "train";
  long batches = 1;
  std::string out;
  std::string load_state;
  std::string save_state;
};

// The batches' cu_seqlens and cu_seqlens_padded, gathered to be written at the end: each
// batch's num_sequences + 1 entries after the previous batch's (each batch's start at 0).
struct Sequences {
  std::vector<std::int32_t> real, padded;
  void append(const Batch& b) {
    real.insert(real.end(), b.cu_seqlens().begin(), b.cu_seqlens().end());
    padded.insert(padded.end(), b.cu_seqlens_padded().begin(), b.cu_seqlens_padded().end());
  }
  void write(const fs::path& out) const {
    if (real.empty()) return;  // contract_fields=false
    for (const auto& [name, values] :
         {std::pair{"cu_seqlens.npy", &real}, std::pair{"cu_seqlens_padded.npy", &padded}}) {
      NpyWriter w(out / name, "<i4", {values->size()});
      w.append(std::span<const std::int32_t>(*values));
      w.finish();
    }
  }
};

// sft_packed: tokens, labels, weights, positions, the sequences, and where each episode
// landed.
void dump_packed(Loader& loader, const DumpOptions& o, const std::vector<std::uint64_t>& grid,
                 std::optional<NpyWriter>& sources) {
  const fs::path out(o.out);
  const auto whole_cols = static_cast<std::size_t>(loader.config().block_size);
  NpyWriter x(out / "x.npy", "<i8", grid);
  NpyWriter y(out / "y.npy", "<i8", grid);
  NpyWriter weights(out / "weights.npy", "<f4", grid);
  NpyWriter positions(out / "position_ids.npy", "<i4", grid);
  std::vector<std::int64_t> segments;  // (batch, row, column, positions, episode_id) per episode
  Sequences sequences;
  double efficiency = 0;
  for (long i = 0; i < o.batches; ++i) {
    Batch b = loader.get_batch(o.split);
    x.append(b.tokens());
    y.append(b.labels());
    weights.append(b.token_weights());
    positions.append(b.position_ids());
    sequences.append(b);
    if (sources) sources->append(b.source_ids());
    for (const PackedSegment& s : b.segments()) {
      segments.insert(segments.end(), {static_cast<std::int64_t>(i), s.row, s.column, s.positions, s.episode});
    }
    // Over the whole rows (with context_parallel_split, cols is this rank's share of them).
    efficiency += static_cast<double>(b.real_positions()) / static_cast<double>(b.rows() * whole_cols);
  }
  NpyWriter seg(out / "segments.npy", "<i8", {segments.size() / 5, 5});
  seg.append(std::span<const std::int64_t>(segments));
  for (NpyWriter* w : {&x, &y, &weights, &positions, &seg}) w->finish();
  sequences.write(out);
  if (sources) sources->finish();
  if (!o.save_state.empty()) save_state_file(loader, o.save_state);
  std::printf("wrote %ld packed batches of %s (%llu x %llu, %zu episodes, packing efficiency %.1f%%) to %s\n",
              o.batches, o.split.c_str(), static_cast<unsigned long long>(grid[0] / static_cast<std::uint64_t>(o.batches)),
              static_cast<unsigned long long>(grid[1]), segments.size() / 5, 100.0 * efficiency / static_cast<double>(o.batches),
              o.out.c_str());
}

void dump(const DumpOptions& o) {
  Loader loader(config_reading_every_field(o.config));
  if (!o.load_state.empty()) load_state_file(loader, o.load_state);
  const Config& c = loader.config();
  if (!loader.has_split(o.split)) loader.split_info(o.split);  // throws the standard error

  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) throw Error(ErrorKind::io, "cannot create output directory '" + o.out + "': " + ec.message());
  const auto n = static_cast<std::uint64_t>(o.batches);
  if (!c.shape_schedule.empty() && o.split == "train") {
    throw Error(ErrorKind::usage,
                "dump writes arrays of --batches x batch_size rows, and the config's shape_schedule changes the train "
                "split's rows by step: dump --split val, or a config without the schedule");
  }
  const auto rows = static_cast<std::uint64_t>(c.batch_size);
  // With context_parallel_split, rows are this rank's share: block_size / cp.
  const auto cols = static_cast<std::uint64_t>(c.block_size) /
                    (c.context_parallel_split ? static_cast<std::uint64_t>(c.context_parallel_size) : 1);
  const bool mask = loader.split_info(o.split).mask;
  const bool stream = c.dataset_mode == DatasetMode::token_stream;
  const bool packed = c.dataset_mode == DatasetMode::sft_packed;
  // Each int64 array holds n x rows x cols values: refuse what no disk holds before
  // writing anything (and before the products could wrap around).
  constexpr std::uint64_t kMaxArrayBytes = std::uint64_t{1} << 44;  // 16 TiB
  std::uint64_t cells = 0;
  if (__builtin_mul_overflow(n, rows, &cells) || __builtin_mul_overflow(cells, cols, &cells) ||
      cells > kMaxArrayBytes / 8) {
    throw Error(ErrorKind::usage, "--batches " + std::to_string(o.batches) + " of " + std::to_string(rows) + " x " +
                                      std::to_string(cols) + " would make x.npy larger than 16 TiB; dump fewer batches");
  }
  const std::vector<std::uint64_t> grid{n * rows, cols};
  // A mixture: each row's source index (Loader::source_names order).
  std::optional<NpyWriter> sources;
  if (!c.mixture.empty())
    sources.emplace(fs::path(o.out) / "source_ids.npy", "<i4", std::vector<std::uint64_t>{n, rows});
  if (packed) {
    dump_packed(loader, o, grid, sources);
    return;
  }

  // A mixture has the document fields when one of its sources has them (a document-aware
  // token stream): its first batch says so, taken before the files are opened.
  std::optional<Batch> first;
  bool documents = stream && c.document_aware;
  if (!c.mixture.empty()) {
    first.emplace(loader.get_batch(o.split));
    documents = !first->doc_ids().empty();
  }
  NpyWriter x(fs::path(o.out) / "x.npy", "<i8", grid);
  NpyWriter y(fs::path(o.out) / "y.npy", "<i8", grid);
  std::optional<NpyWriter> m, doc_ids, position_ids;
  if (mask) m.emplace(fs::path(o.out) / "mask.npy", "<f4", grid);
  if (documents) {
    doc_ids.emplace(fs::path(o.out) / "doc_ids.npy", "<i4", grid);
    position_ids.emplace(fs::path(o.out) / "position_ids.npy", "<i4", grid);
  }
  NpyWriter ids(fs::path(o.out) / (stream ? "window_ids.npy" : "episode_ids.npy"), "<i8", {n, rows});
  Sequences sequences;
  for (std::uint64_t i = 0; i < n; ++i) {
    Batch b = i == 0 && first ? std::move(*first) : loader.get_batch(o.split);
    sequences.append(b);
    x.append(b.x());
    y.append(b.y());
    if (m) m->append(b.mask());
    if (documents) {
      doc_ids->append(b.doc_ids());
      position_ids->append(b.position_ids());
    }
    ids.append(b.episode_ids());
    if (sources) sources->append(b.source_ids());
  }
  x.finish();
  y.finish();
  for (auto* writer : {&m, &doc_ids, &position_ids}) {
    if (*writer) (*writer)->finish();
  }
  ids.finish();
  sequences.write(o.out);
  if (sources) sources->finish();
  if (!o.save_state.empty()) save_state_file(loader, o.save_state);
  std::printf("wrote %llu batches of %s (%llu x %llu%s) to %s\n", static_cast<unsigned long long>(n), o.split.c_str(),
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols), mask ? ", with mask" : "",
              o.out.c_str());
}

}  // namespace

void add_dump_command(CLI::App& app) {
  auto options = std::make_shared<DumpOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dump",
      "Write the next N batches as x.npy, y.npy, mask.npy (when on) and episode_ids.npy; token streams write "
      "window_ids.npy, and doc_ids.npy and position_ids.npy when document_aware; sft_packed writes x.npy (tokens), "
      "y.npy (labels), weights.npy, position_ids.npy and segments.npy (batch, row, column, positions, episode_id); "
      "with the contract fields, cu_seqlens.npy and cu_seqlens_padded.npy (int32: each batch's num_sequences + 1 "
      "entries after the previous batch's, each batch's from 0); "
      "a mixture also writes source_ids.npy (int32, batches x batch_size), and doc_ids.npy and position_ids.npy when "
      "a source is document_aware");
  cmd->add_option("--config", options->config, "XML config file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--split", options->split, "Split to read")->check(CLI::IsMember({"train", "val"}))->capture_default_str();
  cmd->add_option("--batches", options->batches, "Number of batches")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--out", options->out, "Output directory (created if needed)")->required();
  cmd->add_option("--load-state", options->load_state, "Restore this resume state before the first batch")
      ->check(CLI::ExistingFile);
  cmd->add_option("--save-state", options->save_state, "Save the resume state after the N batches");
  cmd->callback([options] { dump(*options); });
}

}  // namespace tokenfeed::cli
