// truncation=split: long episodes cut into pieces t[0:L], t[L-1:2L-1], ... (L = block_size
// + 1), each trained as an episode of its own, in sft_packed and sft_episode: every label
// position of every document once per epoch, pieces in order, resume and ranks, and short
// episodes exactly as with truncation=right.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>

#include "sampling/document_pieces.hpp"
#include "sampling/episode_packer.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::int64_t kBlock = 8;  // T; pieces hold up to L = 9 tokens

// Episodes of random lengths in [2, max_len], token p of episode id being 1000 * id + p + 1
// (numbered_episodes' encoding), so that every position of a row names its document and place.
std::vector<TestEpisode> documents(std::size_t count, std::size_t max_len, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::size_t> lengths(count);
  for (std::size_t& n : lengths) n = 2 + rng() % (max_len - 1);
  return numbered_episodes(count, lengths);
}

Config split_config(const std::filesystem::path& dir, DatasetMode mode, std::int64_t batch) {
  Config c = make_config(dir, batch, kBlock);
  c.dataset_mode = mode;
  c.truncation = Truncation::split;
  c.use_loss_mask = false;  // every label position is trained: counted by labels != ignore_index
  c.token_dtype = TokenDtype::uint32;
  c.epoch_drop_last = false;
  return c;
}

// One sequence of a batch: `positions` inputs of document `episode` from its token `first`.
struct Trained {
  std::int64_t episode = 0;
  std::size_t first = 0;
  std::size_t positions = 0;
};

// The sequences a batch trains, row by row and left to right: sft_packed's segments, or one
// per real sft_episode row (its labels up to the padding). Checks each: its tokens are the
// document's from `first` on, every label the next token, position_ids restarting at 0, and
// a cu_seqlens sequence of its own.
std::vector<Trained> trained_sequences(const Batch& b, bool packed) {
  const std::size_t T = b.cols();
  std::vector<Trained> out;
  if (packed) {
    for (const PackedSegment& s : b.segments()) out.push_back({s.episode, s.row * T + s.column, s.positions});
  } else {
    for (std::size_t r = 0; r < b.rows(); ++r) {
      if (b.episode_ids()[r] < 0) continue;
      std::size_t n = 0;
      while (n < T && b.labels()[r * T + n] != -100) ++n;
      out.push_back({b.episode_ids()[r], r * T, n});
    }
  }
  const std::set<std::int32_t> bounds(b.cu_seqlens().begin(), b.cu_seqlens().end());
  for (Trained& t : out) {
    const std::size_t at = t.first;  // where the sequence is in the batch, for now
    const auto base = 1000 * t.episode + 1;
    t.first = static_cast<std::size_t>(b.tokens()[at] - base);
    CAPTURE(t.episode);
    CAPTURE(t.first);
    for (std::size_t i = 0; i < t.positions; ++i) {
      CHECK(b.tokens()[at + i] == base + static_cast<std::int64_t>(t.first + i));
      CHECK(b.labels()[at + i] == base + static_cast<std::int64_t>(t.first + i + 1));
      CHECK(b.position_ids()[at + i] == static_cast<std::int32_t>(i));
    }
    CHECK(bounds.count(static_cast<std::int32_t>(at)) == 1);
    const auto next = bounds.upper_bound(static_cast<std::int32_t>(at));
    REQUIRE(next != bounds.end());
    CHECK(*next == static_cast<std::int32_t>(at + t.positions));
  }
  return out;
}

// Reads two epochs and checks each: every document's pieces come in order, t[0:L] first,
// each starting at the previous one's last token and ending at the document's last, so
// that every label position 1..n-1 is trained exactly once. Returns epoch 0's documents in
// the order of their first pieces.
std::vector<std::int64_t> check_epochs(Loader& loader, const std::vector<TestEpisode>& docs, bool packed) {
  std::vector<std::int64_t> first_seen;
  std::map<std::int64_t, std::size_t> next_first;  // per document: where its next piece starts
  std::uint64_t epoch = 0;
  std::size_t pieces = 0, long_docs = 0;
  for (const TestEpisode& d : docs) long_docs += d.tokens.size() > kBlock + 1 ? 1 : 0;
  REQUIRE(long_docs > 0);
  const auto close_epoch = [&] {
    CAPTURE(epoch);
    CHECK(next_first.size() == docs.size());
    for (const auto& [episode, end] : next_first) {
      CAPTURE(episode);
      CHECK(end == docs[static_cast<std::size_t>(episode)].tokens.size() - 1);  // up to label n-1
    }
    CHECK(pieces > docs.size());  // long documents were cut, not truncated
    next_first.clear();
    pieces = 0;
  };
  while (epoch < 2) {
    const Batch b = loader.get_batch();
    if (b.epoch() != epoch) {
      close_epoch();
      epoch = b.epoch();
      if (epoch == 2) break;
    }
    for (const Trained& t : trained_sequences(b, packed)) {
      CAPTURE(t.episode);
      const auto [it, fresh] = next_first.try_emplace(t.episode, 0);
      if (fresh && epoch == 0) first_seen.push_back(t.episode);
      CHECK(t.first == it->second);  // in order, overlapping the previous piece by one token
      CHECK(t.positions >= 1);
      CHECK(t.positions <= static_cast<std::size_t>(kBlock));
      it->second = t.first + t.positions;
      ++pieces;
    }
  }
  return first_seen;
}

// The rows of `n` batches, flattened: tokens, labels, position_ids, episode ids and the
// segments, each batch's rows in order (for comparing streams).
std::vector<std::int64_t> rows_of(Loader& loader, int n) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) {
    const Batch b = loader.get_batch();
    out.insert(out.end(), b.tokens().begin(), b.tokens().end());
    out.insert(out.end(), b.labels().begin(), b.labels().end());
    out.insert(out.end(), b.position_ids().begin(), b.position_ids().end());
    out.insert(out.end(), b.episode_ids().begin(), b.episode_ids().end());
    out.insert(out.end(), b.cu_seqlens().begin(), b.cu_seqlens().end());
    for (const PackedSegment& s : b.segments()) {
      out.insert(out.end(), {static_cast<std::int64_t>(s.row), static_cast<std::int64_t>(s.column),
                             static_cast<std::int64_t>(s.positions), s.episode});
    }
    out.push_back(static_cast<std::int64_t>(b.epoch()));
  }
  return out;
}

// Row r of each of `n` batches: tokens, labels and its episode id.
std::vector<std::vector<std::int64_t>> row_contents(Loader& loader, int n) {
  std::vector<std::vector<std::int64_t>> rows;
  for (int i = 0; i < n; ++i) {
    const Batch b = loader.get_batch();
    const std::size_t T = b.cols();
    for (std::size_t r = 0; r < b.rows(); ++r) {
      std::vector<std::int64_t> row(b.tokens().begin() + static_cast<std::ptrdiff_t>(r * T),
                                    b.tokens().begin() + static_cast<std::ptrdiff_t>((r + 1) * T));
      row.insert(row.end(), b.labels().begin() + static_cast<std::ptrdiff_t>(r * T),
                 b.labels().begin() + static_cast<std::ptrdiff_t>((r + 1) * T));
      row.push_back(b.episode_ids()[r]);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace

TEST_CASE("split pieces: ceil((n - 1) / (S - 1)) per document, each starting at the previous one's last token") {
  const auto length = [](std::uint64_t id) { return id; };  // document id n has n tokens
  const DocumentPieces pieces(IdList{2, 9, 10, 17, 18}, 9, length);
  // 2 and 9 tokens: one piece; 10: [0, 9) and [8, 10); 17: [0, 9), [8, 17); 18: a third [16, 18).
  CHECK(pieces.size() == 1 + 1 + 2 + 2 + 3);
  CHECK(DocumentPieces::pieces_of(1, 9) == 0);
  const DocumentPieces::Piece p = pieces.piece(8);
  CHECK(p.episode == 18);
  CHECK(p.index == 2);
  CHECK(p.first == 16);
  CHECK(pieces.expand(IdList{18, 2, 10}) == std::vector<std::uint64_t>{6, 7, 8, 0, 2, 3});
}

TEST_CASE("split packing: a piece never goes before the previous piece of its document") {
  // Capacity 10: document A (5 positions) opens row 0; document B's second piece (3
  // positions) would fill the gap but must wait for B's first (10 positions).
  const std::vector<std::uint32_t> positions = {5, 10, 3};
  const std::vector<bool> follows = {false, false, true};
  const PackedEpoch packed = pack_episodes(IdList{0, 1, 2}, positions, 10, 8, follows);
  CHECK(packed.episodes == std::vector<std::uint64_t>{0, 1, 2});
  CHECK(packed.rows() == 3);
  // Without pieces the same lengths pack the short one into row 0.
  CHECK(pack_episodes(IdList{0, 1, 2}, positions, 10, 8).episodes == std::vector<std::uint64_t>{0, 2, 1});
}

namespace {

// Two epochs of `mode` with truncation=split over documents up to 40 tokens, checked by
// check_epochs; returns epoch 0's documents in order.
std::vector<std::int64_t> check_split_epochs(const std::filesystem::path& dir, DatasetMode mode, std::int64_t batch,
                                             std::uint32_t seed) {
  const auto docs = documents(50, 40, seed);
  write_split(dir, "train", docs, TokenDtype::uint32, false, 2);
  Loader loader(split_config(dir, mode, batch));
  return check_epochs(loader, docs, mode == DatasetMode::sft_packed);
}

}  // namespace

TEST_CASE("split sft_packed: every label position of every document trained once per epoch, pieces in order" *
          doctest::timeout(120)) {
  TempDir dir;
  check_split_epochs(dir.path(), DatasetMode::sft_packed, 3, 11);
}

TEST_CASE("split sft_episode: every label position of every document trained once per epoch, a piece per row" *
          doctest::timeout(120)) {
  TempDir dir;
  const std::vector<std::int64_t> order = check_split_epochs(dir.path(), DatasetMode::sft_episode, 4, 12);
  // The documents come in truncation=right's epoch order, each row one piece.
  Config right = split_config(dir.path(), DatasetMode::sft_episode, 1);
  right.truncation = Truncation::right;
  Loader reference(right);
  std::vector<std::int64_t> right_order;
  for (std::size_t i = 0; i < order.size(); ++i) right_order.push_back(reference.get_batch().episode_ids()[0]);
  CHECK(order == right_order);
}

TEST_CASE("split: resumed mid-epoch equals uninterrupted, and 2 ranks are slices of one stream" *
          doctest::timeout(180)) {
  TempDir dir;
  const auto docs = documents(40, 30, 13);
  write_split(dir.path(), "train", docs, TokenDtype::uint32, false, 1);
  for (const DatasetMode mode : {DatasetMode::sft_packed, DatasetMode::sft_episode}) {
    for (const bool drop_last : {false, true}) {
      CAPTURE(to_string(mode));
      CAPTURE(drop_last);
      Config c = split_config(dir.path(), mode, 4);
      c.epoch_drop_last = drop_last;
      c.decode_threads = 2;
      Loader reference(c);
      const int total = 30;  // several epochs
      const auto all = rows_of(reference, total);
      for (const int cut : {1, 7, 19}) {
        std::vector<std::int64_t> whole;
        std::string state;
        {
          Loader first(c);
          whole = rows_of(first, cut);
          state = first.save_state();
        }
        Loader resumed(c);
        resumed.load_state(state);
        const auto tail = rows_of(resumed, total - cut);
        whole.insert(whole.end(), tail.begin(), tail.end());
        CHECK(whole == all);
      }
      // Rank r of world 2 with batch_size 2 reads rows [2r, 2r + 2) of each global batch.
      Loader one(c);
      const auto global = row_contents(one, total);
      std::vector<std::vector<std::vector<std::int64_t>>> ranks;
      for (std::int64_t rank = 0; rank < 2; ++rank) {
        Config part = c;
        part.batch_size = 2;
        part.world_size = 2;
        part.rank = rank;
        Loader loader(part);
        ranks.push_back(row_contents(loader, total));
      }
      for (std::size_t k = 0; k < static_cast<std::size_t>(total); ++k) {
        for (std::size_t r = 0; r < 4; ++r) CHECK(ranks[r / 2][2 * k + r % 2] == global[4 * k + r]);
      }
    }
  }
}

TEST_CASE("split: episodes no longer than block_size + 1 give the same batches as truncation=right") {
  TempDir dir;
  const auto docs = documents(45, kBlock + 1, 14);
  write_split(dir.path(), "train", docs, TokenDtype::uint32, false, 2);
  for (const DatasetMode mode : {DatasetMode::sft_packed, DatasetMode::sft_episode}) {
    CAPTURE(to_string(mode));
    Config c = split_config(dir.path(), mode, 3);
    Loader split(c);
    c.truncation = Truncation::right;
    Loader right(c);
    CHECK(rows_of(split, 25) == rows_of(right, 25));
  }
}

TEST_CASE("split: the config key parses and prints, and a token stream refuses it naming the key") {
  Config c;
  set_config_value(c, "truncation", "split");
  CHECK(c.truncation == Truncation::split);
  bool printed = false;
  for (const auto& [key, value] : config_entries(c)) printed = printed || (key == "truncation" && value == "split");
  CHECK(printed);
  Config stream = make_config("data", 2, 8);
  stream.dataset_mode = DatasetMode::token_stream;
  stream.truncation = Truncation::split;
  CHECK(error_of([&] { validate_config(stream); }).find("'truncation'") != std::string::npos);
  // A token stream found by auto-detection is refused too.
  TempDir dir;
  const std::vector<std::uint16_t> tokens(64, 7);
  write_raw(dir / "train.bin", tokens.data(), tokens.size() * 2);
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16"})");
  Config detected = make_config(dir.path(), 2, 8);
  detected.truncation = Truncation::split;
  CHECK(error_of([&] { Loader loader(detected); }).find("'truncation'") != std::string::npos);
}
