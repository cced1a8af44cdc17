// `tokenfeed inspect`: describes and validates a dataset directory, split by split. The
// checks are the library's (src/inspect/, inspect_dataset: what it reports and why); this
// command prints the report and exits with the status of the error the verdicts add up to.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "inspect/inspect_dataset.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {
namespace {

struct InspectOptions {
  InspectRequest request;
  std::string config;  // --config: a mixture's or a shape_schedule's config, inspected over --steps
  long steps = 1000;
  bool print_config = false;
  long eos_id = -1;                   // --eos-id; -1: not given
  std::string token_dtype;            // --token-dtype; empty: not given
  bool packing_option_given = false;  // --pack-lookahead, --truncation or --seed (they need --packed)
};

using ull = unsigned long long;  // printf's %llu

std::string percent(std::uint64_t part, std::uint64_t whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

std::string id_list(const std::vector<std::uint64_t>& ids, std::uint64_t total) {
  std::string text;
  for (const std::uint64_t id : ids) text += (text.empty() ? "" : ", ") + std::to_string(id);
  if (total > ids.size()) text += ", ...";
  return text;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out += c;
    }
  }
  return out;
}

// "min M, median M, p90 P, p99 P, max M" after `label`.
void print_lengths(const char* label, const LengthPercentiles& l) {
  std::printf("  %s min %llu, median %llu, p90 %llu, p99 %llu, max %llu\n", label, static_cast<ull>(l.min),
              static_cast<ull>(l.median), static_cast<ull>(l.p90), static_cast<ull>(l.p99), static_cast<ull>(l.max));
}

void print_packing(const InspectRequest& r, const PackingFigures& p) {
  std::printf(
      "  packing      sft_packed: %llu rows, %llu of %llu positions real (%s); sft_episode: %llu rows, %llu of "
      "%llu positions real (%s)\n",
      static_cast<ull>(p.packed_rows), static_cast<ull>(p.packed_positions), static_cast<ull>(p.packed_cells),
      percent(p.packed_positions, p.packed_cells).c_str(), static_cast<ull>(p.episode_rows),
      static_cast<ull>(p.episode_positions), static_cast<ull>(p.episode_cells),
      percent(p.episode_positions, p.episode_cells).c_str());
  if (p.split) {
    // What split costs: the documents it cuts, and the padding left in the packed rows.
    const std::uint64_t padding = p.packed_cells - p.packed_positions;
    std::printf(
        "  split        %llu of %llu documents cut (%s) into %llu pieces; padding %llu of %llu packed positions "
        "(%s)\n",
        static_cast<ull>(p.split->cut), static_cast<ull>(p.split->documents),
        percent(p.split->cut, p.split->documents).c_str(), static_cast<ull>(p.split->pieces), static_cast<ull>(padding),
        static_cast<ull>(p.packed_cells), percent(padding, p.packed_cells).c_str());
  }
  const std::string context_parallel = r.context_parallel_size > 1
                                           ? ", context_parallel_size=" + std::to_string(r.context_parallel_size) +
                                                 " (each episode padded to a multiple of " +
                                                 std::to_string(2 * r.context_parallel_size) + ")"
                                           : std::string();
  std::printf(
      "  packing      assumed: truncation=%s, epoch_seed=%lld (epoch 0's order), pack_lookahead=%lld, "
      "episode_min_tokens=%llu%s; every row of the epoch (epoch_drop_last may leave the last rows out of a run)\n",
      to_string(r.truncation), static_cast<long long>(r.seed), static_cast<long long>(r.pack_lookahead),
      static_cast<ull>(p.episode_min_tokens), context_parallel.c_str());
}

void print_block(const InspectRequest& r, const EpisodeFigures& f) {
  const EpisodeBlockFigures& b = *f.block;
  std::printf("  block %-6lld %llu episodes longer than block_size + 1 (%.2f%%)\n",
              static_cast<long long>(r.block_size), static_cast<ull>(b.longer),
              f.kept == 0 ? 0.0 : 100.0 * static_cast<double>(b.longer) / static_cast<double>(f.kept));
  for (const TruncationCost& cost : b.truncation) {
    std::printf("  truncation   %-17s %llu tokens dropped, %s trained tokens lost\n", to_string(cost.rule),
                static_cast<ull>(cost.dropped_tokens),
                cost.lost_trained_tokens ? std::to_string(*cost.lost_trained_tokens).c_str() : "n/a (no mask)");
  }
  if (!b.turns_known) {
    std::printf("  truncation   drop_oldest_turns n/a: dataset_metadata.json has no special_tokens\n");
  }
  if (b.packing) print_packing(r, *b.packing);
}

// ", episode E position P" where a located value lies (`or_else` when in none).
template <typename First>
std::string episode_of(const First& first, const char* or_else) {
  if (!first.episode) return or_else;
  return ", episode " + std::to_string(*first.episode) + " position " + std::to_string(*first.position);
}

void print_vocab(const std::optional<VocabCheck>& vocab) {
  if (!vocab) {
    std::printf("  deep         token ids not checked: dataset_metadata.json has no vocab_size\n");
    return;
  }
  std::string where;
  if (vocab->first) {
    where = " (first: token " + std::to_string(vocab->first->token) + " at token offset " +
            std::to_string(vocab->first->offset) + " of '" + vocab->first->file + "'" + episode_of(*vocab->first, "") +
            ")";
  }
  std::printf("  deep         %llu tokens >= vocab_size %lld%s\n", static_cast<ull>(vocab->out_of_vocab),
              static_cast<long long>(vocab->vocab_size), where.c_str());
}

void print_mask_values(const MaskValueCheck& check) {
  std::string first;
  if (check.first) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", check.first->value);
    first = std::string(" (first: ") + value + " at value offset " + std::to_string(check.first->offset) + " of '" +
            check.first->file + "'" + episode_of(*check.first, ", in no episode") + ")";
  }
  std::printf("  deep         %llu mask values %s%s\n", static_cast<ull>(check.count),
              check.dtype == MaskDtype::uint8 ? "outside {0, 1} (read as 1)" : "negative", first.c_str());
}

void print_all_zero(const AllZeroMasks& z) {
  std::printf(
      "  deep         %llu of %llu kept episodes with an all-zero mask on their labels, mask[1:n] (nothing to "
      "train on)%s\n",
      static_cast<ull>(z.count), static_cast<ull>(z.kept),
      z.count > 0 ? (": episode ids " + id_list(z.first_ids, z.count)).c_str() : "");
}

void print_checksums(const ChecksumCheck& c) {
  if (!c.recorded) {
    std::printf("  deep         content checksums not recorded in dataset_metadata.json\n");
  } else if (c.problems.empty()) {
    std::printf("  deep         content checksums ok (%zu shard%s, sha256)\n", c.shards, c.shards == 1 ? "" : "s");
  } else {
    std::printf("  deep         content checksums: %zu mismatch%s: %s%s\n", c.problems.size(),
                c.problems.size() == 1 ? "" : "es", c.problems.front().c_str(), c.problems.size() > 1 ? ", ..." : "");
  }
}

// The layout-free content identity: the same for the same documents in any shards.
void print_content(const SplitReport& s) {
  if (!s.layout_free_fingerprint.empty()) {
    std::printf("  content      %s (layout-free fingerprint: sampled tokens, every document)\n",
                s.layout_free_fingerprint.c_str());
  }
  if (!s.content_sha256.empty()) {
    std::printf("  sha256       %s (content whatever the shards: every token and document%s)\n",
                s.content_sha256.c_str(), s.episodes && s.episodes->mask ? ", every mask value" : "");
  }
}

void print_episode_split(const InspectRequest& r, const SplitReport& s) {
  std::printf("split %s (%s)\n", s.name.c_str(), s.dir.c_str());
  if (!s.episodes) {
    std::printf("  verdict      %s\n", s.verdict.c_str());
    return;
  }
  const EpisodeFigures& f = *s.episodes;
  std::printf("  layout       %s, %zu shard%s\n", f.flat ? "flat (files directly in the split)" : "sharded", f.shards,
              f.shards == 1 ? "" : "s");
  std::printf("  episodes     %llu (%llu with >= %llu tokens)\n", static_cast<ull>(f.episodes),
              static_cast<ull>(f.kept), static_cast<ull>(f.min_tokens));
  std::printf("  tokens       %llu, dtype %s%s\n", static_cast<ull>(f.tokens), to_string(f.dtype),
              f.dtype_source == DtypeSource::metadata             ? " (from dataset_metadata.json)"
              : f.dtype_source == DtypeSource::given              ? " (from --token-dtype)"
              : f.dtype_source == DtypeSource::megatron_index     ? " (from the Megatron .idx)"
              : f.dtype_source == DtypeSource::datatrove_metadata ? " (from the .ds.metadata)"
                                                                  : " (inferred)");
  if (f.documents)
    std::printf("  documents    each document of the files an episode (%s)\n",
                r.val_fraction > 0.0 ? "those --val-fraction chose for this split" : "all of them");
  std::printf("  mask         %s\n", f.mask ? to_string(*f.mask) : "absent");
  if (f.lengths) print_lengths("lengths     ", *f.lengths);
  if (f.block) print_block(r, f);
  if (r.deep && f.kept > 0) {
    print_vocab(s.vocab);
    if (f.mask_values) print_mask_values(*f.mask_values);
    if (f.all_zero) print_all_zero(*f.all_zero);
    if (s.checksums) print_checksums(*s.checksums);
  }
  print_content(s);
  std::printf("  verdict      %s\n", s.verdict.c_str());
}

void print_stream_files(const StreamFigures& f, const std::string& name) {
  std::printf("  layout       %s, %zu file%s\n", f.flat ? ("flat (" + name + ".bin)").c_str() : "sharded",
              f.files.size(), f.files.size() == 1 ? "" : "s");
  // Document counts by where they come from: [0] .docs.npy offsets, [1] indexes (Megatron
  // .idx, datatrove .ds.index).
  std::uint64_t documents[2] = {0, 0}, with_docs[2] = {0, 0};
  for (const StreamFileFigures& file : f.files) {
    const std::string docs =
        file.documents ? ", " + std::to_string(*file.documents) + " documents (" + file.docs_file + ")" : std::string();
    std::printf("  file         %s: %llu tokens, %s%s%s\n", file.name.c_str(), static_cast<ull>(file.tokens),
                to_string(file.dtype),
                file.dtype_source == DtypeSource::npy_header           ? " (from its .npy header)"
                : file.dtype_source == DtypeSource::megatron_index     ? " (from its Megatron .idx)"
                : file.dtype_source == DtypeSource::datatrove_metadata ? " (from its .ds.metadata)"
                : file.dtype_source == DtypeSource::metadata           ? " (from dataset_metadata.json)"
                                                                       : " (from --token-dtype)",
                docs.c_str());
    if (!file.tokenizer.empty()) std::printf("  tokenizer    %s (%s)\n", file.tokenizer.c_str(), file.name.c_str());
    if (file.documents) {
      const int from_index = file.docs_file.ends_with(".docs.npy") ? 0 : 1;
      documents[from_index] += *file.documents;
      ++with_docs[from_index];
    }
  }
  std::printf("  tokens       %llu\n", static_cast<ull>(f.tokens));
  if (f.by_hash) {
    std::printf(
        "  val_fraction %g (val_seed %llu): this split is %llu documents of the files, %llu tokens, in %llu runs\n",
        f.by_hash->fraction, static_cast<ull>(f.by_hash->seed), static_cast<ull>(f.by_hash->documents),
        static_cast<ull>(f.tokens), static_cast<ull>(f.by_hash->runs));
  }
  if (with_docs[0] > 0) {
    std::printf("  docs.npy     %llu documents, offsets beside %llu of %zu files\n", static_cast<ull>(documents[0]),
                static_cast<ull>(with_docs[0]), f.files.size());
  }
  if (with_docs[1] > 0) {
    std::printf("  indexed      %llu documents, in the .idx or .ds.index of %llu of %zu files\n",
                static_cast<ull>(documents[1]), static_cast<ull>(with_docs[1]), f.files.size());
  }
}

void print_stream_split(const InspectRequest& r, const SplitReport& s) {
  std::printf("split %s (token stream)\n", s.name.c_str());
  if (!s.stream) {
    std::printf("  verdict      %s\n", s.verdict.c_str());
    return;
  }
  const StreamFigures& f = *s.stream;
  print_stream_files(f, s.name);
  if (f.windows) {
    std::printf("  block %-6lld %llu windows per epoch (epoch mode), %llu window starts (random mode)\n",
                static_cast<long long>(r.block_size), static_cast<ull>(f.windows->epoch),
                static_cast<ull>(f.windows->random_starts));
  }
  if (f.documents) {
    const StreamFigures::Documents& d = *f.documents;
    std::printf("  documents    %llu end-of-text tokens (id %lld)%s\n", static_cast<ull>(d.count),
                static_cast<long long>(d.eos),
                d.trailing > 0 ? (", plus " + std::to_string(d.trailing) + " trailing tokens").c_str() : "");
    if (d.lengths) print_lengths("doc lengths ", *d.lengths);
  } else if (!s.vocab) {
    std::printf(
        "  documents    unknown: no end-of-text id (pass --eos-id or set eos_token_id in dataset_metadata.json)\n");
  }
  if (r.deep) print_vocab(s.vocab);
  if (s.checksums) print_checksums(*s.checksums);
  print_content(s);
  std::printf("  verdict      %s\n", s.verdict.c_str());
}

void print_config(const std::vector<SuggestedKey>& keys) {
  std::printf("\n<training>\n");
  for (const SuggestedKey& k : keys) {
    const std::string note = k.note.empty() ? std::string() : "  <!-- " + xml_escape(k.note) + " -->";
    std::printf("  <%s>%s</%s>%s\n", k.key.c_str(), xml_escape(k.value).c_str(), k.key.c_str(), note.c_str());
  }
  std::printf("</training>\n");
}

void inspect(const InspectOptions& o) {
  const InspectRequest& r = o.request;
  if (o.packing_option_given && !r.packed) {
    throw Error(ErrorKind::usage,
                "inspect --pack-lookahead, --truncation, --seed and --context-parallel-size describe the packing that "
                "--packed reports; add --packed --block-size T");
  }
  const DatasetReport report = inspect_dataset(r);
  std::printf("dataset %s%s\n", r.dataset_dir.c_str(), report.metadata_present ? "" : " (no dataset_metadata.json)");
  for (const SplitReport& split : report.splits) {
    if (report.layout == DatasetLayout::episodes) {
      print_episode_split(r, split);
    } else {
      print_stream_split(r, split);
    }
  }
  if (report.val_ignored) std::printf("split val      ignored: %s\n", report.val_ignored->c_str());
  if (report.missing_train) std::printf("dataset      INVALID: %s\n", report.missing_train->c_str());
  if (o.print_config && !report.suggested_config.empty()) print_config(report.suggested_config);
  if (report.failure) throw Error(report.failure->kind, report.failure->message);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe and validate a dataset (episode-indexed or token stream)");
  CLI::Option* dir =
      cmd->add_option("dataset_dir", options->request.dataset_dir, "Dataset directory (holding train/ and val/)");
  CLI::Option* config = cmd->add_option("--config", options->config,
                                        "A config with a <shape_schedule> or a <mixture>: print where each shape "
                                        "stage starts (rows, tokens, epoch), each mixture stage's share of rows, "
                                        "real and trained tokens per source over --steps, and the epoch each source "
                                        "reaches")
                            ->check(CLI::ExistingFile)
                            ->excludes(dir);
  CLI::Option* steps = cmd->add_option("--steps", options->steps, "--config: the steps to read")
                           ->check(CLI::PositiveNumber)
                           ->capture_default_str();
  cmd->add_option("--block-size", options->request.block_size,
                  "Report what truncation to this block size would drop (episodes), or the windows it gives (token "
                  "streams); also the snippet's block_size")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--deep", options->request.deep,
                "Also check every token against vocab_size, mask values (uint8 not 0/1, float32 negative), all-zero "
                "masks, each shard against the content checksums in dataset_metadata.json, and print each split's "
                "layout-free content SHA-256 (every token and document, whatever the shards)");
  cmd->add_option("--eos-id", options->eos_id, "End-of-text id for counting documents in a token stream")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--token-dtype", options->token_dtype,
                  "Token dtype of .bin files when dataset_metadata.json does not record it (nanoGPT train.bin/val.bin)")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  cmd->add_option("--val-fraction", options->request.val_fraction,
                  "val_fraction: val as this fraction of train's documents, chosen by hash (Megatron pairs, datatrove "
                  "files); reports each split's documents and tokens")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--val-seed", options->request.val_seed, "--val-fraction: val_seed, the hash's seed")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--print-config", options->print_config, "Print a ready-to-use <training> config for this dataset");
  cmd->add_flag("--packed", options->request.packed,
                "With --block-size: the packing efficiency of sft_packed against padded sft_episode rows");
  CLI::Option* lookahead =
      cmd->add_option("--pack-lookahead", options->request.pack_lookahead, "--packed: the packer's lookahead")
          ->check(CLI::Range(1, 65536))
          ->capture_default_str();
  auto truncation_name = std::make_shared<std::string>("right");
  CLI::Option* truncation = cmd->add_option("--truncation", *truncation_name, "--packed: how long episodes are cut")
                                ->check(CLI::IsMember({"right", "drop_oldest_turns", "split"}))
                                ->capture_default_str();
  CLI::Option* seed = cmd->add_option("--seed", options->request.seed, "--packed: epoch_seed (epoch 0's order)")
                          ->check(CLI::Range(0L, 4294967295L))
                          ->capture_default_str();
  CLI::Option* context_parallel =
      cmd->add_option("--context-parallel-size", options->request.context_parallel_size,
                      "--packed: context_parallel_size; > 1 pads each episode to a multiple of 2 x it, as such a run "
                      "does (block size a multiple of it)")
          ->check(CLI::Range(1L, 1048576L))
          ->capture_default_str();
  cmd->callback([options, truncation_name, lookahead, truncation, seed, context_parallel, dir, config, steps] {
    if (config->count() > 0) {
      inspect_config(options->config, options->steps);
      return;
    }
    if (dir->count() == 0) throw CLI::RequiredError("dataset_dir (or --config FILE for a mixture or a shape_schedule)");
    if (steps->count() > 0) throw CLI::ValidationError("--steps", "needs --config");
    Config parsed;  // the config key's own parser names the rule
    set_config_value(parsed, "truncation", *truncation_name);
    InspectRequest& request = options->request;
    request.truncation = parsed.truncation;
    if (options->eos_id >= 0) request.eos_id = options->eos_id;
    if (!options->token_dtype.empty()) request.token_dtype = parse_token_dtype(options->token_dtype);
    options->packing_option_given =
        lookahead->count() + truncation->count() + seed->count() + context_parallel->count() > 0;
    inspect(*options);
  });
}

}  // namespace tokenfeed::cli
