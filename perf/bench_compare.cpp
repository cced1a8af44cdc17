// bench_compare: pure production (no consumer work) of one batch shape, the C++ side of
// the comparison in perf/RESULTS.md. One measure_* per variant, repeats interleaved:
//
//   measure_memcpy      single-core memcpy bandwidth over buffers far larger than the caches
//   measure_plain_loop  a plain single-threaded C++ loop making the same batches (same epoch
//                       order, the padding rule, x/y int64 and the float32 mask) into one
//                       reused buffer: no pipeline, no prefetch
//   measure_tokenfeed   the Loader, get_batch in a tight loop (threads and depth as given)
//
//   bench_compare --config base.xml --csv out.csv --json summary.json [--shape 8x1024]
//                 [--repeats 5] [--seconds 1] [--variants threads=1:depth=auto,...]
//
// A variant is threads=N:depth=D, optionally :contract=off (Config::contract_fields false:
// only x, y and the mask are written). threads=default keeps the config's decode_threads
// (0 in the harness's configs: one per hardware thread but the trainer's, so 1 on two
// cores); the summary records the thread count each variant ran with.
//
// The copy bound is the bytes one batch must write (x and y as int64 and the mask as
// float32: 20 bytes per position; 16 without the mask) divided by the memcpy bandwidth: no
// loader can write its batches faster on one core. The summary also records the bytes the
// library's pooled slot actually holds per batch, with the contract fields and without,
// and the bytes per position each writes (its buffers of one element per position), so
// that perf/report.py computes every size it states; and every repeat's figures beside
// the medians (the spread).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <oneapi/tbb/global_control.h>
#include <nlohmann/json.hpp>

#include "pipeline/batch_pool.hpp"
#include "bench_common.hpp"
#include "dataset/episode_dataset.hpp"
#include "sampling/numpy_random.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace tokenfeed::perf;

namespace {

// GB/s (1e9 bytes) of one memcpy of `bytes` on this thread; the buffers are touched first.
double measure_memcpy(std::size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // fault everything in
  const auto t0 = Clock::now();
  std::memcpy(dst.data(), src.data(), bytes);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  volatile char sink = dst[bytes / 2];
  (void)sink;
  return static_cast<double>(bytes) / s / 1e9;
}

struct PlainLoop {
  EpisodeSplit split;
  std::vector<std::uint64_t> kept;
  std::int64_t pad;
  std::size_t B, T;
  bool mask;
  std::vector<std::int64_t> x, y;
  std::vector<float> m;

  PlainLoop(const Config& c, std::size_t rows, std::size_t cols)
      : split(EpisodeSplit::open(c.dataset_dir / "train",
                                 EpisodeSplitOptions{c.token_dtype, c.mask_dtype, c.use_loss_mask.value_or(true)})),
        kept(kept_episodes(split, static_cast<std::uint64_t>(c.episode_min_tokens)).to_vector()),
        pad(c.pad_token_id.value_or(0)),
        B(rows),
        T(cols),
        mask(split.has_mask()),
        x(rows * cols),
        y(rows * cols),
        m(mask ? rows * cols : 0) {}

  // Batch k of epoch 0 (seed), into x, y, m.
  void make(const std::vector<std::uint64_t>& perm, std::uint64_t k) {
    for (std::size_t r = 0; r < B; ++r) {
      const std::uint64_t id = kept[perm[(k * B + r) % perm.size()]];
      const std::uint64_t n = split.spans()[id].length;
      const std::size_t xc = static_cast<std::size_t>(std::min<std::uint64_t>(n, T));
      const std::size_t yc = static_cast<std::size_t>(std::min<std::uint64_t>(n - 1, T));
      std::int64_t* xr = x.data() + r * T;
      std::int64_t* yr = y.data() + r * T;
      split.read_tokens(id, 0, xc, xr);
      split.read_tokens(id, 1, yc, yr);
      std::fill(xr + xc, xr + T, pad);
      std::fill(yr + yc, yr + T, pad);
      if (mask) {
        float* mr = m.data() + r * T;
        split.read_mask(id, 1, yc, mr);
        std::fill(mr + yc, mr + T, 0.0f);
      }
    }
  }
};

double measure_plain_loop(PlainLoop& loop, const std::vector<std::uint64_t>& perm, double seconds) {
  std::uint64_t k = 0;
  const auto start = Clock::now();
  double s = 0;
  do {
    for (int i = 0; i < 16; ++i) loop.make(perm, k++);
    s = std::chrono::duration<double>(Clock::now() - start).count();
  } while (s < seconds);
  return static_cast<double>(k) / s;
}

// Bytes per position a slot of `shape` is written with: its buffers of one element per
// position (x, y, mask, doc_ids, labels, token_weights, position_ids); cu_seqlens,
// episode ids and packed segments are per row or per sequence.
// Also names them (e.g. "x int64"), into `fields`.
double written_bytes_per_position(const detail::BatchShape& shape, std::vector<std::string>* fields = nullptr) {
  detail::BatchPool pool(1, shape, "train");
  const detail::BatchSlot* s = pool.acquire();
  const std::size_t cells = shape.rows * shape.cols;
  double bytes = 0;
  const auto add = [&](const auto& v, const char* name, const char* type) {
    if (v.size() != cells) return;
    bytes += static_cast<double>(sizeof(v[0]));
    if (fields != nullptr) fields->push_back(std::string(name) + " " + type);
  };
  add(s->x, "x", "int64");
  add(s->y, "y", "int64");
  add(s->mask, "mask", "float32");
  add(s->doc_ids, "doc_ids", "int32");
  add(s->labels, "labels", "int64");
  add(s->token_weights, "token_weights", "float32");
  add(s->position_ids, "position_ids", "int32");
  return bytes;
}

// A tokenfeed variant of --variants: threads=N:depth=D, optionally :contract=off.
struct Variant {
  std::string name;
  std::int64_t threads = -1;  // < 0: the config's decode_threads
  std::int64_t depth = 0;     // 0: auto
  bool contract_fields = true;
};

// The text after `key` in `name`, up to the next ':'.
std::string variant_field(const std::string& name, const std::string& key) {
  const std::size_t at = name.find(key);
  return name.substr(at + key.size(), name.find(':', at) - at - key.size());
}

Variant parse_variant(const std::string& name) {
  Variant v;
  v.name = name;
  const std::string threads = variant_field(name, "threads=");
  v.threads = threads == "default" ? -1 : std::stoll(threads);
  const std::string depth = variant_field(name, "depth=");
  v.depth = depth == "auto" ? 0 : std::stoll(depth);
  v.contract_fields = name.find("contract=off") == std::string::npos;
  return v;
}

// The Loader with `variant`'s threads, depth and contract fields, at rows x cols.
ConsumerResult measure_tokenfeed(const Config& base, std::int64_t rows, std::int64_t cols, const Variant& variant,
                                 double seconds) {
  Config c = base;
  c.contract_fields = variant.contract_fields;
  c.batch_size = rows;
  c.block_size = cols;
  if (variant.threads >= 0) c.decode_threads = variant.threads;
  c.prefetch_depth = variant.depth;
  Loader loader(c);
  return run_consumer(loader, 0, 500, seconds, 1000, 10000000);
}

// Whether the plain loop makes the same batches as the Loader (batch 0 and 1 of epoch 0);
// says which differs on stderr when not.
bool plain_loop_matches_loader(const Config& base, PlainLoop& loop, const std::vector<std::uint64_t>& perm) {
  Config c = base;
  c.decode_threads = 1;
  Loader loader(c);
  for (std::uint64_t k = 0; k < 2; ++k) {
    Batch b = loader.get_batch("train");
    loop.make(perm, k);
    const bool same = std::equal(loop.x.begin(), loop.x.end(), b.x().begin()) &&
                      std::equal(loop.y.begin(), loop.y.end(), b.y().begin()) &&
                      (!loop.mask || std::equal(loop.m.begin(), loop.m.end(), b.mask().begin()));
    if (!same) {
      std::fprintf(stderr, "bench_compare: the plain loop's batch %llu differs from the Loader's\n",
                   static_cast<unsigned long long>(k));
      return false;
    }
  }
  return true;
}

// Every repeat's figures, in the order the repeats ran; the tokenfeed ones per variant.
struct Repeats {
  std::vector<double> memcpy_gbs, plain_loop;
  std::vector<std::vector<double>> tokenfeed;
  std::vector<std::vector<std::uint64_t>> threads_used, depth_used;

  explicit Repeats(std::size_t variants) : tokenfeed(variants), threads_used(variants), depth_used(variants) {}
};

// The summary written to --json: medians, every repeat's figures, the copy bound and the
// bytes a batch must write and is written with (see the top of this file).
nlohmann::json summary(const std::string& shape, std::int64_t rows, std::int64_t cols, bool mask, int repeats,
                       const std::vector<Variant>& variants, const Repeats& r) {
  detail::BatchShape slot_shape;
  slot_shape.rows = static_cast<std::size_t>(rows);
  slot_shape.cols = static_cast<std::size_t>(cols);
  slot_shape.with_mask = mask;
  slot_shape.mask_is_weights = mask;  // as the Loader sets it for sft_episode
  detail::BatchShape view_shape = slot_shape;
  view_shape.contract_fields = false;
  view_shape.mask_is_weights = false;
  const double positions = static_cast<double>(rows * cols);
  const double must_write = positions * (16.0 + (mask ? 4.0 : 0.0));
  const double gbs = median(r.memcpy_gbs);
  nlohmann::json j;
  j["shape"] = shape;
  j["mask"] = mask;
  j["repeats"] = repeats;
  j["memcpy_gbs"] = gbs;
  j["bytes_per_batch"] = must_write;
  j["slot_bytes"] = detail::BatchPool::bytes_per_slot(slot_shape);
  j["slot_bytes_without_contract"] = detail::BatchPool::bytes_per_slot(view_shape);
  j["must_write_bytes_per_position"] = must_write / positions;
  std::vector<std::string> fields, view_fields;
  j["written_bytes_per_position"] = written_bytes_per_position(slot_shape, &fields);
  j["written_fields"] = fields;
  j["written_bytes_per_position_without_contract"] = written_bytes_per_position(view_shape, &view_fields);
  j["written_fields_without_contract"] = view_fields;
  j["copy_bound_batches_per_s"] = gbs * 1e9 / must_write;
  j["plain_loop_batches_per_s"] = median(r.plain_loop);
  j["memcpy_gbs_repeats"] = r.memcpy_gbs;
  std::vector<double> bound_repeats;
  for (const double g : r.memcpy_gbs) bound_repeats.push_back(g * 1e9 / must_write);
  j["copy_bound_repeats"] = bound_repeats;
  j["plain_loop_repeats"] = r.plain_loop;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const std::string& name = variants[v].name;
    j["tokenfeed"][name] = median(r.tokenfeed[v]);
    j["variants"][name] = {{"batches_per_s", median(r.tokenfeed[v])},
                           {"repeats", r.tokenfeed[v]},
                           {"decode_threads", r.threads_used[v]},
                           {"depth_used", r.depth_used[v]}};
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, csv_path, json_path, shape = "8x1024";
  std::string variants = "threads=1:depth=auto,threads=2:depth=auto";
  int repeats = 5;
  double seconds = 1.0;
  std::size_t memcpy_mb = 256;
  int parallelism = 0;
  CLI::App app{"Pure production of one batch shape: memcpy bound, a plain C++ loop and tokenfeed"};
  app.add_option("--config", config_path, "Base XML config")->required();
  app.add_option("--csv", csv_path, "Per-repeat rows")->required();
  app.add_option("--json", json_path, "Summary (medians, copy bound)")->required();
  app.add_option("--shape", shape)->capture_default_str();
  app.add_option("--variants", variants, "tokenfeed variants: threads=N:depth=D,...")->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--seconds", seconds, "Per measurement")->capture_default_str();
  app.add_option("--memcpy-mb", memcpy_mb)->capture_default_str();
  app.add_option("--tbb-parallelism", parallelism, "tbb::global_control max_allowed_parallelism (0: TBB's default)");
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<tbb::global_control> control;
  if (parallelism > 0) {
    control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, parallelism);
  }
  set_log_handler(nullptr);

  Config base = load_config_file(config_path);
  const std::int64_t rows = std::stoll(shape.substr(0, shape.find('x')));
  const std::int64_t cols = std::stoll(shape.substr(shape.find('x') + 1));
  base.batch_size = rows;
  base.block_size = cols;
  // The effective config (pad id, dtypes) as the Loader resolves it.
  const Config effective = Loader(base).config();
  PlainLoop loop(effective, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
  const std::vector<std::uint64_t> perm =
      numpy_permutation(static_cast<std::uint32_t>(effective.epoch_seed), loop.kept.size());
  if (!plain_loop_matches_loader(base, loop, perm)) return 1;

  std::vector<Variant> tf_variants;
  for (const std::string& name : split_list(variants)) tf_variants.push_back(parse_variant(name));
  Repeats r(tf_variants.size());
  std::ofstream csv(csv_path);
  csv << "repeat,variant,batches_per_s,p50_us,p99_us,depth_used\n";
  for (int rep = 0; rep < repeats; ++rep) {
    const double gbs = measure_memcpy(memcpy_mb << 20);
    r.memcpy_gbs.push_back(gbs);
    csv << rep << ",memcpy_gbs," << gbs << ",,,\n";
    const double p = measure_plain_loop(loop, perm, seconds);
    r.plain_loop.push_back(p);
    csv << rep << ",plain_loop," << p << ",,,\n";
    std::printf("rep %d: memcpy %.2f GB/s, plain loop %.0f batches/s", rep, gbs, p);
    for (std::size_t v = 0; v < tf_variants.size(); ++v) {
      const Variant& variant = tf_variants[v];
      const ConsumerResult t = measure_tokenfeed(base, rows, cols, variant, seconds);
      r.tokenfeed[v].push_back(t.batches_per_s);
      r.threads_used[v].push_back(t.threads_used);
      r.depth_used[v].push_back(t.depth_used);
      csv << rep << ",tokenfeed " << variant.name << ',' << t.batches_per_s << ',' << t.p50_us << ',' << t.p99_us << ','
          << t.depth_used << '\n';
      std::printf(", tokenfeed %s %.0f batches/s (depth %llu, %llu thread(s))", variant.name.c_str(), t.batches_per_s,
                  static_cast<unsigned long long>(t.depth_used), static_cast<unsigned long long>(t.threads_used));
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  const nlohmann::json j = summary(shape, rows, cols, loop.mask, repeats, tf_variants, r);
  std::ofstream(json_path) << j.dump(2) << "\n";
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
