// bench_compare: pure production (no consumer work) of one batch shape, the C++ side of
// the comparison in perf/RESULTS.md. One measure_* per variant, repeats interleaved:
//
//   measure_memcpy      single-core memcpy bandwidth over buffers far larger than the caches
//   measure_plain_loop  a plain single-threaded C++ loop making the same batches into one
//                       reused buffer, no pipeline, no prefetch, in the config's mode:
//                       sft_episode: the epoch order, the padding rule, x/y int64 and the
//                         float32 mask;
//                       sft_packed: the Loader's own packing (recorded from its first
//                         batches), x int64, y int64 (-100 where the mask is 0 and on
//                         padding) and position_ids int32;
//                       token_stream: the Loader's own windows (recorded likewise), x/y int64
//   measure_tokenfeed   the Loader, get_batch in a tight loop (threads and depth as given)
//
// tokenfeed's row kernels run with the widest instruction set the CPU has (AVX-512 here),
// chosen at run time, while the plain loops are built with the library's own flags (the
// x86-64 baseline), as a user's loop would be; for sft_episode on an AVX-512 machine the
// summary also reports the episode loop compiled for x86-64-v4 (plain_loop_x86_64_v4),
// which a user who builds for their own CPU would run.
//
// Both also report CPU time per batch: the plain loop's thread, and for tokenfeed every
// thread of the process and its background threads alone (getrusage; the consumer's thread
// spins briefly in get_batch while it waits), so that the pipeline's cost in cores is
// stated beside its speed.
//
//   bench_compare --config base.xml --csv out.csv --json summary.json [--shape 8x1024]
//                 [--repeats 5] [--seconds 1] [--variants threads=1:depth=auto,...]
//   bench_compare --config base.xml --one plain|VARIANT [--start-at UNIX_SECONDS] ...
//
// --one measures one thing only (the plain loop, or one tokenfeed variant), --repeats times,
// and prints one JSON object a line ({"what", "repeat", "batches_per_s", "cpu_us_per_batch"},
// CPU over the whole process), for perf/shared_node.py, which starts several such
// processes side by side; --start-at makes them all begin measuring at that wall-clock
// instant.
//
// A variant is threads=N:depth=D, optionally :contract=off (Config::contract_fields false:
// only x, y and the mask are written) and :reads=view (the consumer reads x, y and the
// mask, and Config::fields names them, so that sft_episode writes only those; by default
// it reads the batch contract, and every field is written).
// threads=default keeps the config's decode_threads (0 in the harness's configs: one per
// hardware thread but the trainer's, so 1 on two cores); the summary records the thread
// count each variant ran with.
//
// The copy bound is the bytes one batch must write (x and y as int64 and the mask as
// float32: 20 bytes per position; 16 without the mask) divided by the memcpy bandwidth: no
// loader can write its batches faster on one core. The summary also records the bytes the
// library's pooled slot actually holds per batch, with the contract fields and without,
// and the bytes per position each writes (its buffers of one element per position), so
// that perf/report.py computes every size it states; and every repeat's figures beside
// the medians (the spread).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <oneapi/tbb/global_control.h>
#include <nlohmann/json.hpp>

#include "pipeline/batch_pool.hpp"
#include "bench_common.hpp"
#include "dataset/episode_dataset.hpp"
#include "dataset/token_stream.hpp"
#include "modes/next_token_run.hpp"
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

// A plain loop: makes batch k into its own reused buffers.
class PlainLoop {
 public:
  virtual ~PlainLoop() = default;
  virtual void make(std::uint64_t k) = 0;
  // Whether batch k equals the Loader's batch `b` (the same step).
  virtual bool matches(std::uint64_t k, const Batch& b) = 0;
  virtual bool has_mask() const = 0;
};

struct EpisodeLoop final : PlainLoop {
  EpisodeSplit split;
  std::vector<std::uint64_t> kept, perm;
  std::int64_t pad;
  std::size_t B, T;
  bool mask;
  std::vector<std::int64_t> x, y;
  std::vector<float> m;

  EpisodeLoop(const Config& c, std::size_t rows, std::size_t cols)
      : split(EpisodeSplit::open(c.dataset_dir / "train",
                                 EpisodeSplitOptions{c.token_dtype, c.mask_dtype, c.use_loss_mask.value_or(true)})),
        kept(kept_episodes(split, static_cast<std::uint64_t>(c.episode_min_tokens)).to_vector()),
        perm(numpy_permutation(static_cast<std::uint32_t>(c.epoch_seed), kept.size())),
        pad(c.pad_token_id.value_or(0)),
        B(rows),
        T(cols),
        mask(split.has_mask()),
        x(rows * cols),
        y(rows * cols),
        m(mask ? rows * cols : 0) {}

  bool has_mask() const override { return mask; }

  // Batch k of epoch 0 (seed), into x, y, m.
  void make(std::uint64_t k) override {
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

  bool matches(std::uint64_t k, const Batch& b) override {
    make(k);
    return std::equal(x.begin(), x.end(), b.x().begin()) && std::equal(y.begin(), y.end(), b.y().begin()) &&
           (!mask || std::equal(m.begin(), m.end(), b.mask().begin()));
  }
};

// Compiles a function for x86-64-v4 (AVX-512, 512-bit vectors preferred) where GCC can.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TOKENFEED_TARGET_X86_64_V4 __attribute__((target("arch=x86-64-v4,prefer-vector-width=512")))
#else
#define TOKENFEED_TARGET_X86_64_V4
#endif

// The same loop written against the mapped episode directly and compiled for the CPU's
// AVX-512 level (x86-64-v4), as a user who builds for their own machine would have it: a
// row beside the targets, which are against the loop built with the library's flags.
struct EpisodeLoopV4 final : PlainLoop {
  EpisodeLoop base;
  explicit EpisodeLoopV4(const Config& c, std::size_t rows, std::size_t cols) : base(c, rows, cols) {}
  bool has_mask() const override { return base.mask; }
  TOKENFEED_TARGET_X86_64_V4 void make(std::uint64_t k) override {
    const std::size_t B = base.B, T = base.T;
    const bool narrow = base.split.token_dtype() == TokenDtype::uint16;
    const bool byte_mask = base.mask && *base.split.mask_dtype() == MaskDtype::uint8;
    for (std::size_t r = 0; r < B; ++r) {
      const std::uint64_t id = base.kept[base.perm[(k * B + r) % base.perm.size()]];
      const EpisodeData e = base.split.data(id);
      const std::size_t xc = static_cast<std::size_t>(std::min<std::uint64_t>(e.length, T));
      const std::size_t yc = static_cast<std::size_t>(std::min<std::uint64_t>(e.length - 1, T));
      std::int64_t* __restrict xr = base.x.data() + r * T;
      std::int64_t* __restrict yr = base.y.data() + r * T;
      if (narrow) {
        const auto* t = reinterpret_cast<const std::uint16_t*>(e.tokens);
        for (std::size_t i = 0; i < xc; ++i) xr[i] = t[i];
        for (std::size_t i = 0; i < yc; ++i) yr[i] = t[i + 1];
      } else {
        const auto* t = reinterpret_cast<const std::uint32_t*>(e.tokens);
        for (std::size_t i = 0; i < xc; ++i) xr[i] = t[i];
        for (std::size_t i = 0; i < yc; ++i) yr[i] = t[i + 1];
      }
      for (std::size_t i = xc; i < T; ++i) xr[i] = base.pad;
      for (std::size_t i = yc; i < T; ++i) yr[i] = base.pad;
      if (base.mask) {
        float* __restrict mr = base.m.data() + r * T;
        if (byte_mask) {
          const auto* m = reinterpret_cast<const std::uint8_t*>(e.mask);
          for (std::size_t i = 0; i < yc; ++i) mr[i] = m[i + 1] != 0 ? 1.0f : 0.0f;
        } else {
          const auto* m = reinterpret_cast<const float*>(e.mask);
          for (std::size_t i = 0; i < yc; ++i) mr[i] = m[i + 1];
        }
        for (std::size_t i = yc; i < T; ++i) mr[i] = 0.0f;
      }
    }
  }
  bool matches(std::uint64_t k, const Batch& b) override {
    make(k);
    return std::equal(base.x.begin(), base.x.end(), b.x().begin()) &&
           std::equal(base.y.begin(), base.y.end(), b.y().begin()) &&
           (!base.mask || std::equal(base.m.begin(), base.m.end(), b.mask().begin()));
  }
};

// Batches recorded from the Loader's first steps: enough that the plain loop reads as much
// distinct data as the Loader does in a measurement, not a cache-resident few (a whole
// packed epoch of the perf datasets; random windows covering the stream several times).
constexpr std::uint64_t kRecordedPackedBatches = 4096;
constexpr std::uint64_t kRecordedWindowBatches = 65536;

// The first `n` batches of a one-thread Loader over `c`, each as `take(batch)` returns it.
template <typename Take>
auto record_batches(const Config& c, std::uint64_t n, Take take) {
  Config one = c;
  one.decode_threads = 1;
  Loader loader(one);
  std::vector<decltype(take(std::declval<const Batch&>()))> out;
  for (std::uint64_t k = 0; k < n; ++k) out.push_back(take(loader.get_batch("train")));
  return out;
}

struct PackedLoop final : PlainLoop {
  EpisodeSplit split;
  std::int64_t pad;
  std::size_t B, T;
  bool mask;
  std::vector<std::vector<PackedSegment>> batches;  // the Loader's packing, batch by batch
  std::vector<std::int64_t> x, y;
  std::vector<std::int32_t> positions;
  std::vector<std::size_t> used;   // per row: input positions holding episodes
  std::vector<float> mask_values;  // one segment's mask, at most a row

  PackedLoop(const Config& c, std::size_t rows, std::size_t cols)
      : split(EpisodeSplit::open(c.dataset_dir / "train",
                                 EpisodeSplitOptions{c.token_dtype, c.mask_dtype, c.use_loss_mask.value_or(true)})),
        pad(c.pad_token_id.value_or(0)),
        B(rows),
        T(cols),
        mask(split.has_mask()),
        batches(record_batches(
            c, kRecordedPackedBatches,
            [](const Batch& b) { return std::vector<PackedSegment>(b.segments().begin(), b.segments().end()); })),
        x(rows * cols),
        y(rows * cols),
        positions(rows * cols),
        used(rows),
        mask_values(cols) {}

  bool has_mask() const override { return mask; }

  void make(std::uint64_t k) override {
    const std::vector<PackedSegment>& segments = batches[k % batches.size()];
    std::fill(used.begin(), used.end(), 0);
    for (const PackedSegment& s : segments) {
      const std::size_t at = s.row * T + s.column;
      const auto id = static_cast<std::uint64_t>(s.episode);
      split.read_tokens(id, 0, s.positions, x.data() + at);
      split.read_tokens(id, 1, s.positions, y.data() + at);
      if (mask) {
        // -100 where the target carries no loss; the mask is read in the same 0/1 form.
        float* w = mask_values.data();
        split.read_mask(id, 1, s.positions, w);
        for (std::size_t i = 0; i < s.positions; ++i) y[at + i] = w[i] != 0.0f ? y[at + i] : -100;
      }
      std::iota(positions.data() + at, positions.data() + at + s.positions, 0);
      used[s.row] = std::max<std::size_t>(used[s.row], s.column + s.positions);
    }
    for (std::size_t r = 0; r < B; ++r) {
      std::fill(x.data() + r * T + used[r], x.data() + (r + 1) * T, pad);
      std::fill(y.data() + r * T + used[r], y.data() + (r + 1) * T, -100);
      std::iota(positions.data() + r * T + used[r], positions.data() + (r + 1) * T, 0);
    }
  }

  bool matches(std::uint64_t k, const Batch& b) override {
    make(k);
    return std::equal(x.begin(), x.end(), b.x().begin()) && std::equal(y.begin(), y.end(), b.labels().begin()) &&
           std::equal(positions.begin(), positions.end(), b.position_ids().begin());
  }
};

struct StreamLoop final : PlainLoop {
  TokenStreamSplit split;
  std::size_t B, T;
  std::vector<std::vector<std::int64_t>> batches;  // the Loader's windows (global token offsets)
  std::vector<std::int64_t> x, y;

  StreamLoop(const Config& c, std::size_t rows, std::size_t cols)
      : split(TokenStreamSplit::open(c.dataset_dir, "train", c.token_dtype)),
        B(rows),
        T(cols),
        batches(record_batches(
            c, kRecordedWindowBatches,
            [](const Batch& b) { return std::vector<std::int64_t>(b.episode_ids().begin(), b.episode_ids().end()); })),
        x(rows * cols),
        y(rows * cols) {}

  bool has_mask() const override { return false; }

  void make(std::uint64_t k) override {
    const std::vector<std::int64_t>& windows = batches[k % batches.size()];
    for (std::size_t r = 0; r < B; ++r) {
      // The file holding the window's first token, and the window's offset in it.
      const auto first = static_cast<std::uint64_t>(windows[r]);
      std::size_t f = split.files().size() - 1;
      while (split.files()[f].first_token > first) --f;
      const std::uint64_t offset = first - split.files()[f].first_token;
      split.read(f, offset, T, x.data() + r * T);
      split.read(f, offset + 1, T, y.data() + r * T);
    }
  }

  bool matches(std::uint64_t k, const Batch& b) override {
    make(k);
    return std::equal(x.begin(), x.end(), b.x().begin()) && std::equal(y.begin(), y.end(), b.y().begin());
  }
};

// The plain loop of the config's (resolved) dataset mode. Throws for a mode it has none
// for, and for token_stream in epoch mode (window ids are then not token offsets).
std::unique_ptr<PlainLoop> make_plain_loop(const Config& c, std::size_t rows, std::size_t cols) {
  switch (c.dataset_mode) {
    case DatasetMode::sft_episode:
      return std::make_unique<EpisodeLoop>(c, rows, cols);
    case DatasetMode::sft_packed:
      return std::make_unique<PackedLoop>(c, rows, cols);
    case DatasetMode::token_stream:
      if (c.batch_sampling_mode != SamplingMode::random || c.document_aware) {
        throw std::runtime_error("bench_compare: token_stream needs batch_sampling_mode=random, not document_aware");
      }
      return std::make_unique<StreamLoop>(c, rows, cols);
    default:
      throw std::runtime_error(std::string("bench_compare: no plain loop for dataset_mode ") +
                               to_string(c.dataset_mode));
  }
}

// Batches per second of the plain loop, and its CPU seconds per batch.
struct PlainResult {
  double batches_per_s = 0;
  double cpu_us_per_batch = 0;
};

PlainResult measure_plain_loop(PlainLoop& loop, double seconds) {
  std::uint64_t k = 0;
  const auto start = Clock::now();
  const double cpu0 = measure::thread_cpu_seconds();
  double s = 0;
  do {
    for (int i = 0; i < 16; ++i) loop.make(k++);
    s = std::chrono::duration<double>(Clock::now() - start).count();
  } while (s < seconds);
  const double cpu = measure::thread_cpu_seconds() - cpu0;
  return {static_cast<double>(k) / s, cpu * 1e6 / static_cast<double>(k)};
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

// A tokenfeed variant of --variants: threads=N:depth=D, optionally :contract=off, and
// optionally :reads=view (the consumer reads x, y and the mask, the plain loop's fields,
// instead of the batch contract, and says so: Config::fields is that view, so that
// sft_episode writes only it; the other variants keep every field, the default).
struct Variant {
  std::string name;
  std::int64_t threads = -1;  // < 0: the config's decode_threads
  std::int64_t depth = 0;     // 0: auto
  bool contract_fields = true;
  measure::TrainerReads reads = measure::TrainerReads::contract;
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
  if (name.find("reads=view") != std::string::npos) v.reads = measure::TrainerReads::view;
  return v;
}

// The Loader with `variant`'s threads, depth and contract fields, at rows x cols.
ConsumerResult measure_tokenfeed(const Config& base, std::int64_t rows, std::int64_t cols, const Variant& variant,
                                 double seconds) {
  Config c = base;
  c.contract_fields = variant.contract_fields;
  if (variant.reads == measure::TrainerReads::view) {
    c.fields = batch_field_bit(BatchField::x) | batch_field_bit(BatchField::y) | batch_field_bit(BatchField::mask);
  }
  c.batch_size = rows;
  c.block_size = cols;
  if (variant.threads >= 0) c.decode_threads = variant.threads;
  c.prefetch_depth = variant.depth;
  Loader loader(c);
  return run_consumer(loader, 0, 500, seconds, 1000, 10000000, variant.reads);
}

// Whether the plain loop makes the same batches as the Loader (its first two); says which
// differs on stderr when not.
bool plain_loop_matches_loader(const Config& base, PlainLoop& loop) {
  Config c = base;
  c.decode_threads = 1;
  Loader loader(c);
  for (std::uint64_t k = 0; k < 2; ++k) {
    Batch b = loader.get_batch("train");
    if (!loop.matches(k, b)) {
      std::fprintf(stderr, "bench_compare: the plain loop's batch %llu differs from the Loader's\n",
                   static_cast<unsigned long long>(k));
      return false;
    }
  }
  return true;
}

// Every repeat's figures, in the order the repeats ran; the tokenfeed ones per variant.
struct Repeats {
  std::vector<double> memcpy_gbs, plain_loop, plain_cpu_us, plain_loop_v4, plain_v4_cpu_us;
  std::vector<std::vector<double>> tokenfeed, tokenfeed_cpu_us, tokenfeed_loader_cpu_us;
  std::vector<std::vector<std::uint64_t>> threads_used, depth_used;

  explicit Repeats(std::size_t variants)
      : tokenfeed(variants),
        tokenfeed_cpu_us(variants),
        tokenfeed_loader_cpu_us(variants),
        threads_used(variants),
        depth_used(variants) {}
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
  j["plain_loop_cpu_us_per_batch"] = median(r.plain_cpu_us);
  j["plain_loop_cpu_us_repeats"] = r.plain_cpu_us;
  j["row_kernel_isa"] = to_string(row_kernel_isa());  // the row kernels tokenfeed ran with
  if (!r.plain_loop_v4.empty()) {
    j["plain_loop_x86_64_v4_batches_per_s"] = median(r.plain_loop_v4);
    j["plain_loop_x86_64_v4_repeats"] = r.plain_loop_v4;
    j["plain_loop_x86_64_v4_cpu_us_per_batch"] = median(r.plain_v4_cpu_us);
  }
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const std::string& name = variants[v].name;
    j["tokenfeed"][name] = median(r.tokenfeed[v]);
    j["variants"][name] = {{"batches_per_s", median(r.tokenfeed[v])},
                           {"repeats", r.tokenfeed[v]},
                           {"cpu_us_per_batch", median(r.tokenfeed_cpu_us[v])},
                           {"cpu_us_repeats", r.tokenfeed_cpu_us[v]},
                           {"loader_cpu_us_per_batch", median(r.tokenfeed_loader_cpu_us[v])},
                           {"loader_cpu_us_repeats", r.tokenfeed_loader_cpu_us[v]},
                           {"decode_threads", r.threads_used[v]},
                           {"depth_used", r.depth_used[v]}};
  }
  return j;
}

}  // namespace

// --one: the plain loop or one variant, `repeats` times, one JSON line each.
int measure_one(const Config& base, std::int64_t rows, std::int64_t cols, PlainLoop& loop, const std::string& what,
                int repeats, double seconds, double start_at) {
  if (start_at > 0) {
    const auto at = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(start_at)));
    std::this_thread::sleep_until(at);
  }
  for (int rep = 0; rep < repeats; ++rep) {
    nlohmann::json j{{"what", what}, {"repeat", rep}};
    if (what == "plain") {
      const double cpu0 = measure::process_cpu_seconds();
      const PlainResult r = measure_plain_loop(loop, seconds);
      const double batches = r.batches_per_s * seconds;
      j["batches_per_s"] = r.batches_per_s;
      j["cpu_us_per_batch"] = (measure::process_cpu_seconds() - cpu0) * 1e6 / batches;
    } else {
      const ConsumerResult r = measure_tokenfeed(base, rows, cols, parse_variant(what), seconds);
      j["batches_per_s"] = r.batches_per_s;
      j["cpu_us_per_batch"] = r.cpu_us_per_batch();
      j["threads_used"] = r.threads_used;
      j["depth_used"] = r.depth_used;
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string config_path, csv_path, json_path, shape = "8x1024";
  std::string variants = "threads=1:depth=auto,threads=2:depth=auto";
  int repeats = 5;
  double seconds = 1.0;
  std::size_t memcpy_mb = 256;
  int parallelism = 0;
  std::string one;
  double start_at = 0;
  CLI::App app{"Pure production of one batch shape: memcpy bound, a plain C++ loop and tokenfeed"};
  app.add_option("--config", config_path, "Base XML config")->required();
  app.add_option("--one", one, "Measure only this: plain, or a tokenfeed variant (one JSON line per repeat)");
  app.add_option("--start-at", start_at, "With --one: start measuring at this wall-clock time (Unix seconds)");
  app.add_option("--csv", csv_path, "Per-repeat rows")->excludes("--one");
  app.add_option("--json", json_path, "Summary (medians, copy bound)")->excludes("--one");
  app.add_option("--shape", shape)->capture_default_str();
  app.add_option("--variants", variants, "tokenfeed variants: threads=N:depth=D,...")->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--seconds", seconds, "Per measurement")->capture_default_str();
  app.add_option("--memcpy-mb", memcpy_mb)->capture_default_str();
  std::string isa;
  app.add_option("--row-kernels", isa,
                 "Run tokenfeed's row kernels at this level: baseline, x86-64-v3 or x86-64-v4 "
                 "(default: the best this CPU has)");
  app.add_option("--tbb-parallelism", parallelism, "tbb::global_control max_allowed_parallelism (0: TBB's default)");
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<tbb::global_control> control;
  if (parallelism > 0) {
    control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, parallelism);
  }
  set_log_handler(nullptr);
  if (!isa.empty()) {
    const std::vector<RowKernelIsa> have = row_kernel_isas();
    const auto it = std::find_if(have.begin(), have.end(), [&](RowKernelIsa i) { return isa == to_string(i); });
    if (it == have.end()) {
      std::fprintf(stderr, "bench_compare: --row-kernels %s: not a level this CPU runs\n", isa.c_str());
      return 2;
    }
    use_row_kernel_isa(*it);
  }

  Config base = load_config_file(config_path);
  const std::int64_t rows = std::stoll(shape.substr(0, shape.find('x')));
  const std::int64_t cols = std::stoll(shape.substr(shape.find('x') + 1));
  base.batch_size = rows;
  base.block_size = cols;
  // The effective config (pad id, dtypes) as the Loader resolves it.
  const Config effective = Loader(base).config();
  // The plain loop makes rank 0's batches of one process: checked against that loader,
  // whatever ranks the launcher's variables give the measured one (--one under
  // perf/shared_node.py).
  Config single = base;
  single.rank = 0;
  single.world_size = 1;
  const std::unique_ptr<PlainLoop> loop =
      make_plain_loop(effective, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
  if (!plain_loop_matches_loader(single, *loop)) return 1;
  // The episode loop built for this CPU's AVX-512 level too, where it has one.
  std::unique_ptr<PlainLoop> loop_v4;
  if (effective.dataset_mode == DatasetMode::sft_episode && row_kernel_isas().back() == RowKernelIsa::x86_64_v4) {
    loop_v4 =
        std::make_unique<EpisodeLoopV4>(effective, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
    if (!plain_loop_matches_loader(single, *loop_v4)) return 1;
  }

  if (!one.empty()) return measure_one(base, rows, cols, *loop, one, repeats, seconds, start_at);
  if (csv_path.empty() || json_path.empty()) {
    std::fprintf(stderr, "bench_compare: --csv and --json are required without --one\n");
    return 2;
  }

  std::vector<Variant> tf_variants;
  for (const std::string& name : split_list(variants)) tf_variants.push_back(parse_variant(name));
  Repeats r(tf_variants.size());
  std::ofstream csv(csv_path);
  csv << "repeat,variant,batches_per_s,p50_us,p99_us,depth_used,cpu_us_per_batch\n";
  for (int rep = 0; rep < repeats; ++rep) {
    const double gbs = measure_memcpy(memcpy_mb << 20);
    r.memcpy_gbs.push_back(gbs);
    csv << rep << ",memcpy_gbs," << gbs << ",,,\n";
    const PlainResult plain = measure_plain_loop(*loop, seconds);
    const double p = plain.batches_per_s;
    r.plain_loop.push_back(p);
    r.plain_cpu_us.push_back(plain.cpu_us_per_batch);
    csv << rep << ",plain_loop," << p << ",,,," << plain.cpu_us_per_batch << "\n";
    std::printf("rep %d: memcpy %.2f GB/s, plain loop %.0f batches/s", rep, gbs, p);
    if (loop_v4) {
      const PlainResult v4 = measure_plain_loop(*loop_v4, seconds);
      r.plain_loop_v4.push_back(v4.batches_per_s);
      r.plain_v4_cpu_us.push_back(v4.cpu_us_per_batch);
      csv << rep << ",plain_loop_x86_64_v4," << v4.batches_per_s << ",,,," << v4.cpu_us_per_batch << "\n";
      std::printf(", plain loop (x86-64-v4) %.0f batches/s", v4.batches_per_s);
    }
    for (std::size_t v = 0; v < tf_variants.size(); ++v) {
      const Variant& variant = tf_variants[v];
      const ConsumerResult t = measure_tokenfeed(base, rows, cols, variant, seconds);
      r.tokenfeed[v].push_back(t.batches_per_s);
      r.tokenfeed_cpu_us[v].push_back(t.cpu_us_per_batch());
      r.tokenfeed_loader_cpu_us[v].push_back(t.loader_cpu_us_per_batch());
      r.threads_used[v].push_back(t.threads_used);
      r.depth_used[v].push_back(t.depth_used);
      csv << rep << ",tokenfeed " << variant.name << ',' << t.batches_per_s << ',' << t.p50_us << ',' << t.p99_us << ','
          << t.depth_used << ',' << t.cpu_us_per_batch() << '\n';
      std::printf(", tokenfeed %s %.0f batches/s (depth %llu, %llu thread(s))", variant.name.c_str(), t.batches_per_s,
                  static_cast<unsigned long long>(t.depth_used), static_cast<unsigned long long>(t.threads_used));
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  nlohmann::json j = summary(shape, rows, cols, loop->has_mask(), repeats, tf_variants, r);
  j["dataset_mode"] = to_string(effective.dataset_mode);
  std::ofstream(json_path) << j.dump(2) << "\n";
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
