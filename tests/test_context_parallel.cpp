// Context parallelism (docs/batch-contract.md, "Context parallelism"): each sequence padded
// to a multiple of 2·cp, cu_seqlens_padded, and context_parallel_split's load-balanced
// share of each row, checked against references written here (not the loader's code): the
// padded rows built from the episodes, the share cut from the unsplit rows chunk by chunk,
// and the shares of all CP ranks put back together.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>

#include "dataset/episode_dataset.hpp"
#include "io/npy.hpp"
#include "modes/episode_window.hpp"
#include "sampling/episode_packer.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::int64_t kIgnore = -100;

// The smallest multiple of m that is >= n, counted up one at a time.
std::size_t padded_to(std::size_t n, std::size_t m) {
  while (n % m != 0) ++n;
  return n;
}

// A batch's values, kept after the batch is released.
struct Rows {
  std::size_t rows = 0, cols = 0;
  std::vector<std::int64_t> tokens, labels, y, ids;
  std::vector<float> weights, mask;
  std::vector<std::int32_t> positions, doc_ids, cu, cu_padded;
  std::size_t max_seqlen = 0, real_positions = 0, num_sequences = 0;
  std::vector<PackedSegment> segments;
  std::uint64_t step = 0, epoch = 0;
};

template <typename T>
std::vector<T> vec(std::span<const T> s) {
  return {s.begin(), s.end()};
}

Rows rows_of(const Batch& b) {
  Rows r;
  r.rows = b.rows();
  r.cols = b.cols();
  r.tokens = vec(b.tokens());
  r.labels = vec(b.labels());
  r.y = vec(b.y());
  r.ids = vec(b.episode_ids());
  r.weights = vec(b.token_weights());
  r.mask = vec(b.mask());
  r.positions = vec(b.position_ids());
  r.doc_ids = vec(b.doc_ids());
  r.cu = vec(b.cu_seqlens());
  r.cu_padded = vec(b.cu_seqlens_padded());
  r.max_seqlen = b.max_seqlen();
  r.real_positions = b.real_positions();
  r.num_sequences = b.num_sequences();
  r.segments = vec(b.segments());
  r.step = b.step();
  r.epoch = b.epoch();
  return r;
}

std::vector<Rows> first_batches(const Config& c, std::size_t n) {
  Loader loader(c);
  std::vector<Rows> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(rows_of(loader.get_batch()));
  return out;
}

// The spans a share is cut by, as [begin, end) over the flattened whole rows: each sequence
// of cu_seqlens_padded, or each whole row.
using Spans = std::vector<std::pair<std::size_t, std::size_t>>;
Spans sequence_spans(const Rows& whole) {
  Spans spans;
  for (std::size_t i = 0; i + 1 < whole.cu_padded.size(); ++i) {
    spans.emplace_back(static_cast<std::size_t>(whole.cu_padded[i]), static_cast<std::size_t>(whole.cu_padded[i + 1]));
  }
  return spans;
}
Spans row_spans(const Rows& whole) {
  Spans spans;
  for (std::size_t r = 0; r < whole.rows; ++r) spans.emplace_back(r * whole.cols, (r + 1) * whole.cols);
  return spans;
}

// CP rank `rank`'s share of `whole` (rows of `cols`): per span in order, its 2·cp equal
// chunks, chunk `rank` then chunk 2·cp - 1 - rank, appended to the span's row.
template <typename T>
std::vector<T> reference_share(const std::vector<T>& whole, std::size_t cols, const Spans& spans, std::size_t cp,
                               std::size_t rank) {
  if (whole.empty()) return {};
  const std::size_t rows = whole.size() / cols;
  std::vector<std::vector<T>> out(rows);
  for (const auto& [begin, end] : spans) {
    const std::size_t chunk = (end - begin) / (2 * cp);
    REQUIRE(chunk * 2 * cp == end - begin);
    std::vector<T>& row = out[begin / cols];
    for (const std::size_t c : {rank, 2 * cp - 1 - rank}) {
      row.insert(row.end(), whole.begin() + static_cast<std::ptrdiff_t>(begin + c * chunk),
                 whole.begin() + static_cast<std::ptrdiff_t>(begin + (c + 1) * chunk));
    }
  }
  std::vector<T> flat;
  for (const auto& row : out) {
    REQUIRE(row.size() == cols / cp);
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return flat;
}

// The whole rows put back together from every rank's share (shares[rank]).
template <typename T>
std::vector<T> reassemble(const std::vector<std::vector<T>>& shares, std::size_t cols, const Spans& spans) {
  const std::size_t cp = shares.size();
  std::vector<T> whole(shares[0].size() * cp);
  std::vector<std::size_t> taken(whole.size() / cols, 0);  // per row: positions of each share used
  for (const auto& [begin, end] : spans) {
    const std::size_t row = begin / cols;
    const std::size_t chunk = (end - begin) / (2 * cp);
    const std::size_t from = row * (cols / cp) + taken[row];
    for (std::size_t rank = 0; rank < cp; ++rank) {
      std::copy_n(shares[rank].begin() + static_cast<std::ptrdiff_t>(from), chunk,
                  whole.begin() + static_cast<std::ptrdiff_t>(begin + rank * chunk));
      std::copy_n(shares[rank].begin() + static_cast<std::ptrdiff_t>(from + chunk), chunk,
                  whole.begin() + static_cast<std::ptrdiff_t>(begin + (2 * cp - 1 - rank) * chunk));
    }
    taken[row] += 2 * chunk;
  }
  return whole;
}

// Checks one split batch against the reference share of the unsplit one, field by field,
// and that the bookkeeping is the whole rows'.
void check_share(const Rows& split, const Rows& whole, const Spans& spans, std::size_t cp, std::size_t rank) {
  CAPTURE(rank);
  REQUIRE(split.rows == whole.rows);
  REQUIRE(split.cols * cp == whole.cols);
  CHECK(split.tokens == reference_share(whole.tokens, whole.cols, spans, cp, rank));
  CHECK(split.labels == reference_share(whole.labels, whole.cols, spans, cp, rank));
  CHECK(split.y == reference_share(whole.y, whole.cols, spans, cp, rank));
  CHECK(split.weights == reference_share(whole.weights, whole.cols, spans, cp, rank));
  CHECK(split.mask == reference_share(whole.mask, whole.cols, spans, cp, rank));
  CHECK(split.positions == reference_share(whole.positions, whole.cols, spans, cp, rank));
  CHECK(split.doc_ids == reference_share(whole.doc_ids, whole.cols, spans, cp, rank));
  CHECK(split.cu == whole.cu);
  CHECK(split.cu_padded == whole.cu_padded);
  CHECK(split.max_seqlen == whole.max_seqlen);
  CHECK(split.num_sequences == whole.num_sequences);
  CHECK(split.real_positions == whole.real_positions);
  CHECK(split.ids == whole.ids);
  CHECK(split.step == whole.step);
  CHECK(split.segments.size() == whole.segments.size());
}

// A world of one data-parallel group of cp ranks, as rank 0 (tp-cp-dp-pp: the global rank
// is the CP rank).
void in_one_group(Config& c, std::int64_t cp) {
  c.context_parallel_size = cp;
  c.world_size = cp;
  c.rank = 0;
}

Config packed_config(const std::filesystem::path& dir, std::int64_t batch, std::int64_t block, std::int64_t cp) {
  Config c = make_config(dir, batch, block);
  c.dataset_mode = DatasetMode::sft_packed;
  c.use_loss_mask = true;
  c.token_dtype = TokenDtype::uint32;
  in_one_group(c, cp);
  return c;
}

// The config of CP rank `rank` with the split on (in one group, as in_one_group).
Config split_config(Config c, std::int64_t rank) {
  c.world_size = c.context_parallel_size;
  c.rank = rank;
  c.context_parallel_split = true;
  return c;
}

// Checks a padded packed batch against the episodes its segments name: the reference
// padded rows, built here from the episodes alone.
void check_padded_packed(const Rows& b, const std::vector<TestEpisode>& episodes, std::size_t cp) {
  const std::size_t T = b.cols, m = 2 * cp;
  std::vector<std::int32_t> cu{0}, cu_padded{0};
  std::size_t real = 0, longest = 0, next = 0;
  for (std::size_t row = 0; row < b.rows; ++row) {
    std::size_t column = 0;
    for (; next < b.segments.size() && b.segments[next].row == row; ++next) {
      const PackedSegment& s = b.segments[next];
      const TestEpisode& e = episodes.at(static_cast<std::size_t>(s.episode));
      const std::size_t n = std::min<std::size_t>(e.tokens.size(), T + 1) - 1;  // truncation=right
      const std::size_t padded = padded_to(n, m);
      CAPTURE(s.episode);
      REQUIRE(s.positions == n);
      REQUIRE(s.column == column);  // right after the previous sequence's padded span
      REQUIRE(column + padded <= T);
      for (std::size_t i = 0; i < padded; ++i) {
        CAPTURE(i);
        const std::size_t at = row * T + column + i;
        const bool is_real = i < n;
        const float w = is_real ? static_cast<float>(e.mask[i + 1]) : 0.0f;
        CHECK(b.tokens[at] == (is_real ? static_cast<std::int64_t>(e.tokens[i]) : 0));
        CHECK(b.weights[at] == w);
        CHECK(b.labels[at] == (w != 0.0f ? static_cast<std::int64_t>(e.tokens[i + 1]) : kIgnore));
        CHECK(b.positions[at] == static_cast<std::int32_t>(i));  // continuing through the padding
      }
      cu.push_back(cu.back() + static_cast<std::int32_t>(n));
      cu_padded.push_back(cu_padded.back() + static_cast<std::int32_t>(padded));
      real += n;
      longest = std::max(longest, n);
      column += padded;
    }
    // The row's trailing padding: a sequence of its own, real and padded alike.
    for (std::size_t i = column; i < T; ++i) {
      CHECK(b.tokens[row * T + i] == 0);
      CHECK(b.labels[row * T + i] == kIgnore);
      CHECK(b.weights[row * T + i] == 0.0f);
      CHECK(b.positions[row * T + i] == static_cast<std::int32_t>(i - column));
    }
    if (column < T) {
      CHECK((T - column) % m == 0);
      cu.push_back(cu.back() + static_cast<std::int32_t>(T - column));
      cu_padded.push_back(cu_padded.back() + static_cast<std::int32_t>(T - column));
      longest = std::max(longest, T - column);
    }
  }
  CHECK(b.cu == cu);
  CHECK(b.cu_padded == cu_padded);
  CHECK(b.max_seqlen == longest);
  CHECK(b.real_positions == real);
}

}  // namespace

TEST_CASE("context parallel: sft_packed pads each episode to a multiple of 2cp, as the reference rows say") {
  TempDir dir;
  const auto episodes = random_episodes(150, 40, 5);
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 2);
  for (const std::int64_t cp : {2, 3}) {
    CAPTURE(cp);
    Config c = packed_config(dir.path(), 3, 36, cp);  // 36: a multiple of 4 and of 6
    c.epoch_drop_last = false;
    Loader loader(c);
    std::multiset<std::int64_t> seen;
    while (true) {
      Batch batch = loader.get_batch();
      if (batch.epoch() == 1) break;
      const Rows b = rows_of(batch);
      check_padded_packed(b, episodes, static_cast<std::size_t>(cp));
      for (const PackedSegment& s : b.segments) seen.insert(s.episode);
    }
    // Every episode once per epoch, as without context parallelism.
    CHECK(seen.size() == episodes.size());
    CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == episodes.size());
  }
}

TEST_CASE("context parallel: without it cu_seqlens_padded equals cu_seqlens, in every mode") {
  TempDir dir;
  const auto episodes = random_episodes(40, 30, 9);
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 1);
  for (const DatasetMode mode : {DatasetMode::sft_episode, DatasetMode::sft_packed}) {
    Config c = packed_config(dir.path(), 4, 32, 1);
    c.dataset_mode = mode;
    Loader loader(c);
    Batch b = loader.get_batch();
    CHECK(!b.cu_seqlens().empty());
    CHECK(vec(b.cu_seqlens_padded()) == vec(b.cu_seqlens()));
    // context_parallel_size > 1 leaves sft_episode's rows as they are: the row is the sequence.
    in_one_group(c, 2);
    if (mode == DatasetMode::sft_episode) {
      Batch same = Loader(c).get_batch();
      CHECK(vec(same.tokens()) == vec(b.tokens()));
      CHECK(vec(same.cu_seqlens_padded()) == vec(b.cu_seqlens()));
    }
  }
}

TEST_CASE(
    "context parallel: sft_packed's split is the reference share of the unsplit rows, and the shares make them whole") {
  TempDir dir;
  const auto episodes = random_episodes(200, 60, 17);
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 2);
  for (const Truncation truncation : {Truncation::right, Truncation::split}) {
    for (const std::int64_t cp : {2, 3}) {
      CAPTURE(cp);
      CAPTURE(to_string(truncation));
      Config whole = packed_config(dir.path(), 3, 36, cp);
      whole.truncation = truncation;
      const std::vector<Rows> unsplit = first_batches(whole, 6);
      std::vector<std::vector<Rows>> shares(static_cast<std::size_t>(cp));
      for (std::int64_t rank = 0; rank < cp; ++rank) {
        shares[static_cast<std::size_t>(rank)] = first_batches(split_config(whole, rank), 6);
      }
      for (std::size_t k = 0; k < unsplit.size(); ++k) {
        CAPTURE(k);
        const Spans spans = sequence_spans(unsplit[k]);
        std::vector<std::vector<std::int64_t>> tokens, labels;
        std::vector<std::vector<std::int32_t>> positions;
        for (std::size_t rank = 0; rank < shares.size(); ++rank) {
          check_share(shares[rank][k], unsplit[k], spans, static_cast<std::size_t>(cp), rank);
          tokens.push_back(shares[rank][k].tokens);
          labels.push_back(shares[rank][k].labels);
          positions.push_back(shares[rank][k].positions);
        }
        CHECK(reassemble(tokens, unsplit[k].cols, spans) == unsplit[k].tokens);
        CHECK(reassemble(labels, unsplit[k].cols, spans) == unsplit[k].labels);
        CHECK(reassemble(positions, unsplit[k].cols, spans) == unsplit[k].positions);
      }
    }
  }
}

TEST_CASE("context parallel: sft_episode and a plain token_stream split each whole row into 2cp chunks") {
  TempDir dir;
  write_split(dir.path(), "train", random_episodes(60, 50, 23), TokenDtype::uint32, true, 1);
  std::vector<std::uint16_t> stream(4000);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<std::uint16_t>(7 + i % 5000);
  TempDir stream_dir;
  std::filesystem::create_directories(stream_dir / "train");
  NpyWriter w(stream_dir / "train/s.npy", "<u2", {stream.size()});
  w.append(std::span<const std::uint16_t>(stream));
  w.finish();
  for (const bool episodes : {true, false}) {
    CAPTURE(episodes);
    Config whole = make_config(episodes ? dir.path() : stream_dir.path(), 4, 32);
    whole.dataset_mode = episodes ? DatasetMode::sft_episode : DatasetMode::token_stream;
    if (episodes) {
      whole.use_loss_mask = true;
      whole.token_dtype = TokenDtype::uint32;
    }
    in_one_group(whole, 2);
    const std::vector<Rows> unsplit = first_batches(whole, 4);
    for (std::int64_t rank = 0; rank < 2; ++rank) {
      const std::vector<Rows> split = first_batches(split_config(whole, rank), 4);
      for (std::size_t k = 0; k < split.size(); ++k) {
        CAPTURE(k);
        CHECK(split[k].cols == 16);
        check_share(split[k], unsplit[k], row_spans(unsplit[k]), 2, static_cast<std::size_t>(rank));
      }
    }
  }
}

namespace {

// The reference padded row of a document-aware window: the unpadded row's document pieces
// (runs of equal doc_ids), each padded to a multiple of m, until the row is full; the piece
// that reaches the end is cut there and the rest of the window dropped.
struct DocRow {
  std::vector<std::int64_t> tokens, labels;
  std::vector<std::int32_t> doc_ids, positions;
  std::vector<std::pair<std::size_t, std::size_t>> sequences;  // (real, padded)
  std::size_t real = 0;
};

DocRow reference_document_row(const Rows& plain, std::size_t row, std::size_t m, std::int64_t pad) {
  const std::size_t T = plain.cols;
  DocRow out;
  std::size_t start = 0;
  while (start < T && out.tokens.size() < T) {
    std::size_t end = start;
    while (end < T && plain.doc_ids[row * T + end] == plain.doc_ids[row * T + start]) ++end;
    const std::size_t real = std::min(end - start, T - out.tokens.size());
    const std::size_t padded = padded_to(real, m);
    for (std::size_t i = 0; i < padded; ++i) {
      const std::size_t at = row * T + start + i;
      const bool is_real = i < real;
      out.tokens.push_back(is_real ? plain.tokens[at] : pad);
      out.labels.push_back(is_real ? plain.labels[at] : kIgnore);
      out.doc_ids.push_back(plain.doc_ids[row * T + start]);
      out.positions.push_back(plain.positions[row * T + start] + static_cast<std::int32_t>(i));
    }
    out.sequences.emplace_back(real, padded);
    out.real += real;
    start = end;
  }
  return out;
}

}  // namespace

TEST_CASE("context parallel: a document-aware token stream pads each document piece, and splits by them") {
  TempDir dir;
  std::mt19937 rng(3);
  std::vector<std::uint16_t> tokens;
  while (tokens.size() < 3000) {
    const std::size_t n = 1 + rng() % 23;
    for (std::size_t i = 0; i < n; ++i) tokens.push_back(static_cast<std::uint16_t>(10 + rng() % 900));
    tokens.push_back(1);  // end of text
  }
  std::filesystem::create_directories(dir / "train");
  NpyWriter w(dir / "train/s.npy", "<u2", {tokens.size()});
  w.append(std::span<const std::uint16_t>(tokens));
  w.finish();
  write_text(dir / "dataset_metadata.json", R"({"eos_token_id": 1, "pad_token_id": 3})");
  Config plain = make_config(dir.path(), 4, 24);
  plain.dataset_mode = DatasetMode::token_stream;
  plain.batch_sampling_mode = SamplingMode::epoch;
  plain.document_aware = true;
  plain.pad_token_id.reset();  // the metadata's
  const std::vector<Rows> unpadded = first_batches(plain, 5);
  for (const std::int64_t cp : {2, 3}) {
    CAPTURE(cp);
    Config c = plain;
    in_one_group(c, cp);
    const std::vector<Rows> padded = first_batches(c, 5);
    for (std::size_t k = 0; k < padded.size(); ++k) {
      CAPTURE(k);
      const Rows& b = padded[k];
      CHECK(b.ids == unpadded[k].ids);  // the same windows
      std::vector<std::int32_t> cu{0}, cu_padded{0};
      std::size_t real = 0;
      for (std::size_t r = 0; r < b.rows; ++r) {
        const DocRow ref = reference_document_row(unpadded[k], r, 2 * static_cast<std::size_t>(cp), 3);
        REQUIRE(ref.tokens.size() == 24);
        const auto row = [&](const auto& v) { return std::vector(v.begin() + r * 24, v.begin() + (r + 1) * 24); };
        CHECK(row(b.tokens) == ref.tokens);
        CHECK(row(b.labels) == ref.labels);
        CHECK(row(b.doc_ids) == ref.doc_ids);
        CHECK(row(b.positions) == ref.positions);
        for (std::size_t i = 0; i < 24; ++i) CHECK(b.weights[r * 24 + i] == (ref.labels[i] == kIgnore ? 0.0f : 1.0f));
        for (const auto& [n, p] : ref.sequences) {
          cu.push_back(cu.back() + static_cast<std::int32_t>(n));
          cu_padded.push_back(cu_padded.back() + static_cast<std::int32_t>(p));
        }
        real += ref.real;
      }
      CHECK(b.cu == cu);
      CHECK(b.cu_padded == cu_padded);
      CHECK(b.real_positions == real);
      for (std::int64_t rank = 0; rank < cp; ++rank) {
        const std::vector<Rows> split = first_batches(split_config(c, rank), k + 1);
        check_share(split[k], b, sequence_spans(b), static_cast<std::size_t>(cp), static_cast<std::size_t>(rank));
      }
    }
  }
}

TEST_CASE("context parallel: resume and the fingerprint with the padding and the split") {
  TempDir dir;
  write_split(dir.path(), "train", random_episodes(90, 40, 31), TokenDtype::uint32, true, 1);
  const Config c = split_config(packed_config(dir.path(), 2, 32, 2), 1);
  std::vector<Rows> straight = first_batches(c, 8);
  std::string state;
  {
    Loader loader(c);
    for (int i = 0; i < 3; ++i) loader.get_batch();
    state = loader.save_state();
  }
  Loader resumed(c);
  resumed.load_state(state);
  for (std::size_t k = 3; k < 8; ++k) {
    const Rows b = rows_of(resumed.get_batch());
    CHECK(b.step == straight[k].step);
    CHECK(b.tokens == straight[k].tokens);
    CHECK(b.cu_padded == straight[k].cu_padded);
  }
  // The split does not change the stream: the unsplit loader takes the state; the padding
  // changes the packing, so a state of another context_parallel_size is refused.
  Config unsplit = c;
  unsplit.context_parallel_split = false;
  CHECK_NOTHROW(Loader(unsplit).load_state(state));
  Config other = packed_config(dir.path(), 2, 32, 1);
  const std::string message = error_of([&] { Loader(other).load_state(state); }, ErrorKind::state);
  CHECK(message.find("context_parallel_padding") != std::string::npos);
}

TEST_CASE("context parallel: a packed mixture pads each source's episodes, and its split is the reference share") {
  TempDir a, b;
  write_split(a.path(), "train", random_episodes(70, 30, 41), TokenDtype::uint32, true, 1);
  write_split(b.path(), "train", random_episodes(50, 50, 43), TokenDtype::uint32, true, 1);
  Config c = packed_config({}, 3, 32, 2);
  c.dataset_dir.clear();
  c.mixture = {MixtureSource{"a", "2", {{"dataset_dir", a.path().string()}}, std::nullopt},
               MixtureSource{"b", "1", {{"dataset_dir", b.path().string()}}, std::nullopt}};
  const std::vector<Rows> whole = first_batches(c, 4);
  for (const Rows& batch : whole) {
    // Each sequence's padded span is a multiple of 4 and holds its real positions.
    REQUIRE(batch.cu.size() == batch.cu_padded.size());
    for (std::size_t i = 0; i + 1 < batch.cu.size(); ++i) {
      const std::int32_t n = batch.cu[i + 1] - batch.cu[i], p = batch.cu_padded[i + 1] - batch.cu_padded[i];
      CHECK(p % 4 == 0);
      CHECK(n <= p);
      CHECK(p - n < 4);
    }
    CHECK(batch.cu_padded.back() == 3 * 32);
  }
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<Rows> split = first_batches(split_config(c, rank), 4);
    for (std::size_t k = 0; k < split.size(); ++k) {
      check_share(split[k], whole[k], sequence_spans(whole[k]), 2, static_cast<std::size_t>(rank));
    }
  }
}

TEST_CASE(
    "context parallel: a mixture under a sequence-length schedule splits each step's rows at its length, packed "
    "and episode sources alike") {
  TempDir a, b;
  write_split(a.path(), "train", random_episodes(70, 30, 41), TokenDtype::uint32, true, 1);
  write_split(b.path(), "train", random_episodes(50, 50, 43), TokenDtype::uint32, true, 1);
  for (const bool packed : {true, false}) {
    CAPTURE(packed);
    Config c = packed_config({}, 3, 32, 2);
    if (!packed) c.dataset_mode = DatasetMode::sft_episode;
    c.dataset_dir.clear();
    c.mixture = {MixtureSource{"a", "2", {{"dataset_dir", a.path().string()}}, std::nullopt},
                 MixtureSource{"b", "1", {{"dataset_dir", b.path().string()}}, std::nullopt}};
    // 32 positions a row for 2 steps, 16 for 2, then 48 (multiples of 2·cp = 4).
    c.shape_schedule = {ShapeStage{2, std::nullopt, std::nullopt, std::nullopt},
                        ShapeStage{4, std::nullopt, std::nullopt, 16},
                        ShapeStage{std::nullopt, std::nullopt, std::nullopt, 48}};
    const std::vector<Rows> whole = first_batches(c, 6);
    for (std::size_t k = 0; k < whole.size(); ++k) CHECK(whole[k].cols == (k < 2 ? 32U : k < 4 ? 16U : 48U));
    for (std::int64_t rank = 0; rank < 2; ++rank) {
      const std::vector<Rows> split = first_batches(split_config(c, rank), 6);
      for (std::size_t k = 0; k < split.size(); ++k) {
        CAPTURE(k);
        const Spans spans = packed ? sequence_spans(whole[k]) : row_spans(whole[k]);
        check_share(split[k], whole[k], spans, 2, static_cast<std::size_t>(rank));
      }
    }
  }
}

TEST_CASE("context parallel: the packer counts padded lengths and real positions") {
  const std::vector<std::uint32_t> positions{5, 3, 8, 1, 4, 7, 2, 6};
  std::vector<std::uint64_t> order(positions.size());
  for (std::uint64_t i = 0; i < order.size(); ++i) order[i] = i;
  const std::vector<std::uint32_t> occupied = occupied_padded(positions, 4);
  CHECK(occupied == std::vector<std::uint32_t>{8, 4, 8, 4, 4, 8, 4, 8});
  const PackedEpoch packed = pack_episodes(order, positions, 16, 8, {}, &occupied);
  std::uint64_t real = 0;
  for (std::size_t r = 0; r < packed.rows(); ++r) {
    std::size_t used = 0;
    for (std::uint64_t k = packed.row_begin[r]; k < packed.row_begin[r + 1]; ++k) {
      used += padded_to(positions[packed.episodes[k]], 4);
      real += positions[packed.episodes[k]];
    }
    CHECK(used <= 16);
  }
  CHECK(packed.positions == real);
  CHECK(real == 36);
  // Padded to 4: 8, 4, 8, 4, 4, 8, 4, 8 = 48 positions, 3 full rows of 16.
  CHECK(packed.rows() == 3);
}

TEST_CASE("context parallel: the configurations it refuses, each naming what to change") {
  TempDir dir;
  write_split(dir.path(), "train", random_episodes(40, 30, 47), TokenDtype::uint32, true, 1);
  // block_size not a multiple of 2cp, where the rows are padded or split.
  Config packed = packed_config(dir.path(), 2, 30, 2);
  std::string message = error_of([&] { Loader loader(packed); });
  CHECK(message.find("block_size") != std::string::npos);
  CHECK(message.find("30") != std::string::npos);
  CHECK(message.find("4") != std::string::npos);
  Config episode = packed;
  episode.dataset_mode = DatasetMode::sft_episode;
  CHECK_NOTHROW(Loader{episode});  // no padding, no split: any block_size
  message = error_of([&] { Loader loader(split_config(episode, 0)); });
  CHECK(message.find("context_parallel_split") != std::string::npos);
  // The split needs the CP rank: not derived when the data-parallel coordinates are given
  // over a world the layout does not divide.
  Config unknown = packed_config(dir.path(), 2, 32, 2);
  unknown.context_parallel_split = true;
  unknown.world_size = 3;
  unknown.rank = 0;
  unknown.data_parallel_rank = 0;
  unknown.data_parallel_size = 1;
  message = error_of([&] { Loader loader(unknown); });
  CHECK(message.find("context_parallel_rank") != std::string::npos);
  unknown.context_parallel_rank = 1;
  CHECK_NOTHROW(Loader{unknown});
  // Each rank its own share cannot come from a group leader's batches.
  Config leader = split_config(packed_config(dir.path(), 2, 32, 2), 0);
  leader.data_loading = DataLoading::group_leader;
  message = error_of([&] { validate_config(leader); });
  CHECK(message.find("group_leader") != std::string::npos);
  // A split with cp = 1 is a no-op.
  Config one = packed_config(dir.path(), 2, 30, 1);
  one.context_parallel_split = true;
  CHECK(Loader(one).get_batch().cols() == 30);
}

TEST_CASE(
    "context parallel: a chunk of a kept sequence is written as that slice of the whole, across a window's junction") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(1, {50}), TokenDtype::uint32, true, 1);  // mask: parity
  const EpisodeSplit split = EpisodeSplit::open(dir / "train", {TokenDtype::uint32, MaskDtype::uint8, true});
  const EpisodeWindows windows(split, 41, Truncation::right, std::nullopt);
  const EpisodeData data = windows.data(0);
  // Windows as the truncation rules make them: the head alone, a head and a tail (with the
  // junction between them), and a tail alone.
  std::vector<SftWindow> shapes(3);
  shapes[0].head_end = 41;
  shapes[1].head_begin = 0, shapes[1].head_end = 12, shapes[1].tail_begin = 21, shapes[1].tail_end = 50;
  shapes[2].tail_begin = 9, shapes[2].tail_end = 50;
  for (const SftWindow& w : shapes) {
    const std::size_t n = w.size() - 1;
    std::vector<std::int64_t> x(n), labels(n);
    std::vector<float> weights(n);
    std::vector<std::int32_t> positions(n);
    windows.write_targets(data, w, n, true,
                          NextTokenFields{x.data(), nullptr, weights.data(), labels.data(), positions.data()}, kIgnore);
    for (std::size_t first = 0; first < n; first += 3) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{5}, n - first}) {
        if (first + count > n) continue;
        CAPTURE(first);
        CAPTURE(count);
        std::vector<std::int64_t> cx(count), cl(count);
        std::vector<float> cw(count);
        std::vector<std::int32_t> cp(count);
        windows.write_targets(data, w, first, count, true,
                              NextTokenFields{cx.data(), nullptr, cw.data(), cl.data(), cp.data()}, kIgnore);
        const auto slice = [&](const auto& v) { return std::vector(v.begin() + first, v.begin() + first + count); };
        CHECK(cx == slice(x));
        CHECK(cl == slice(labels));
        CHECK(cw == slice(weights));
        CHECK(cp == slice(positions));
      }
    }
  }
}
