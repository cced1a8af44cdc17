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
      : split(EpisodeSplit::open(c.dataset_dir / "train", EpisodeSplitOptions{c.token_dtype, c.mask_dtype, c.use_loss_mask.value_or(true)})),
        kept(kept_episodes(split, static_cast<std::uint64_t>(c.episode_min_tokens))),
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

// threads < 0: the config's decode_threads.
ConsumerResult measure_tokenfeed(const Config& base, std::int64_t rows, std::int64_t cols, std::int64_t threads,
                                 std::int64_t depth, bool contract_fields, double seconds) {
  Config c = base;
  c.contract_fields = contract_fields;
  c.batch_size = rows;
  c.block_size = cols;
  if (threads >= 0) c.decode_threads = threads;
  c.prefetch_depth = depth;
  Loader loader(c);
  return run_consumer(loader, 0, 500, seconds, 1000, 10000000);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, csv_path, json_path, shape = "8x1024", variants = "threads=1:depth=auto,threads=2:depth=auto";
  int repeats = 5;
  double seconds = 1.0;
  std::size_t memcpy_mb = 256;
  CLI::App app{"Pure production of one batch shape: memcpy bound, a plain C++ loop and tokenfeed"};
  app.add_option("--config", config_path, "Base XML config")->required();
  app.add_option("--csv", csv_path, "Per-repeat rows")->required();
  app.add_option("--json", json_path, "Summary (medians, copy bound)")->required();
  app.add_option("--shape", shape)->capture_default_str();
  app.add_option("--variants", variants, "tokenfeed variants: threads=N:depth=D,...")->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--seconds", seconds, "Per measurement")->capture_default_str();
  app.add_option("--memcpy-mb", memcpy_mb)->capture_default_str();
  int parallelism = 0;
  app.add_option("--tbb-parallelism", parallelism, "tbb::global_control max_allowed_parallelism (0: TBB's default)");
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<tbb::global_control> control;
  if (parallelism > 0) control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, parallelism);
  set_log_handler(nullptr);

  Config base = load_config_file(config_path);
  const std::int64_t rows = std::stoll(shape.substr(0, shape.find('x')));
  const std::int64_t cols = std::stoll(shape.substr(shape.find('x') + 1));
  base.batch_size = rows;
  base.block_size = cols;
  // The effective config (pad id, dtypes) as the Loader resolves it.
  const Config effective = Loader(base).config();

  PlainLoop loop(effective, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
  const std::vector<std::uint64_t> perm = numpy_permutation(static_cast<std::uint32_t>(effective.epoch_seed), loop.kept.size());
  {
    // The plain loop makes the same batches as the Loader (batch 0 and 1 of epoch 0).
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
        return 1;
      }
    }
  }

  std::ofstream csv(csv_path);
  csv << "repeat,variant,batches_per_s,p50_us,p99_us,depth_used\n";
  std::vector<double> memcpy_gbs, plain;
  std::vector<std::string> names = split_list(variants);
  std::vector<std::vector<double>> tf(names.size());
  std::vector<std::vector<std::uint64_t>> tf_threads(names.size()), tf_depth(names.size());
  for (int rep = 0; rep < repeats; ++rep) {
    const double gbs = measure_memcpy(memcpy_mb << 20);
    memcpy_gbs.push_back(gbs);
    csv << rep << ",memcpy_gbs," << gbs << ",,,\n";
    const double p = measure_plain_loop(loop, perm, seconds);
    plain.push_back(p);
    csv << rep << ",plain_loop," << p << ",,,\n";
    std::printf("rep %d: memcpy %.2f GB/s, plain loop %.0f batches/s", rep, gbs, p);
    for (std::size_t v = 0; v < names.size(); ++v) {
      const std::string& name = names[v];
      const std::string th = name.substr(name.find("threads=") + 8, name.find(':', name.find("threads=")) - name.find("threads=") - 8);
      const std::int64_t threads = th == "default" ? -1 : std::stoll(th);
      const std::string d = name.substr(name.find("depth=") + 6, name.find(':', name.find("depth=")) - name.find("depth=") - 6);
      const bool contract = name.find("contract=off") == std::string::npos;
      const ConsumerResult r =
          measure_tokenfeed(base, rows, cols, threads, d == "auto" ? 0 : std::stoll(d), contract, seconds);
      tf[v].push_back(r.batches_per_s);
      tf_threads[v].push_back(r.threads_used);
      tf_depth[v].push_back(r.depth_used);
      csv << rep << ",tokenfeed " << name << ',' << r.batches_per_s << ',' << r.p50_us << ',' << r.p99_us << ','
          << r.depth_used << '\n';
      std::printf(", tokenfeed %s %.0f batches/s (depth %llu, %llu thread(s))", name.c_str(), r.batches_per_s,
                  static_cast<unsigned long long>(r.depth_used), static_cast<unsigned long long>(r.threads_used));
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  detail::BatchShape slot_shape;
  slot_shape.rows = static_cast<std::size_t>(rows);
  slot_shape.cols = static_cast<std::size_t>(cols);
  slot_shape.with_mask = loop.mask;
  slot_shape.mask_is_weights = loop.mask;  // as the Loader sets it for sft_episode
  detail::BatchShape view_shape = slot_shape;
  view_shape.contract_fields = false;
  view_shape.mask_is_weights = false;
  const double positions = static_cast<double>(rows * cols);
  const double must_write = positions * (16.0 + (loop.mask ? 4.0 : 0.0));
  const double gbs = median(memcpy_gbs);
  nlohmann::json j;
  j["shape"] = shape;
  j["mask"] = loop.mask;
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
  j["plain_loop_batches_per_s"] = median(plain);
  j["memcpy_gbs_repeats"] = memcpy_gbs;
  std::vector<double> bound_repeats;
  for (const double g : memcpy_gbs) bound_repeats.push_back(g * 1e9 / must_write);
  j["copy_bound_repeats"] = bound_repeats;
  j["plain_loop_repeats"] = plain;
  for (std::size_t v = 0; v < names.size(); ++v) {
    j["tokenfeed"][names[v]] = median(tf[v]);
    j["variants"][names[v]] = {{"batches_per_s", median(tf[v])},
                               {"repeats", tf[v]},
                               {"decode_threads", tf_threads[v]},
                               {"depth_used", tf_depth[v]}};
  }
  std::ofstream(json_path) << j.dump(2) << "\n";
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
