// sft_packed with truncation=split under a sequence-length curriculum: documents cut while
// they are packed, each piece at the length of the row it lands in (docs/schedules.md). The
// loader's rows against a reference written here: each epoch's numpy order of documents,
// every document's unplaced tokens cut at the capacity of the row being filled (and cut
// anew where the capacity changes), a plain lookahead best-fit over those pieces. Checked:
// every row's pieces and fields, every label position once per epoch, 1, 2 and 4 ranks,
// resume at every step and elastic resume across the boundaries, context-parallel padding,
// and the split's open check.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>

#include "sampling/numpy_random.hpp"
#include "curriculum_support.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::uint32_t kSeed = 23;
constexpr std::size_t kDocuments = 20;
constexpr std::int64_t kLookahead = 6;

// Documents of 2 to 120 tokens (most longer than some row).
struct Dataset : CurriculumDocuments {
  Dataset() : CurriculumDocuments(kDocuments, 120, 9) {}
  std::uint64_t label_positions() const {
    std::uint64_t n = 0;
    for (const TestEpisode& d : docs) n += d.tokens.size() - 1;
    return n;
  }
};

// 3 steps of 4 rows of 32 positions (the key's), 4 steps of 8 rows of 64, then 4 rows of 16.
const RefSchedule kSchedule({{3, 4, 32}, {7, 8, 64}, {0, 4, 16}});

// A piece of a row: document `doc`'s inputs [first, first + positions).
struct RefPiece {
  std::int64_t doc = 0;
  std::size_t first = 0, positions = 0;
  bool operator==(const RefPiece&) const = default;
};

struct RefRow {
  std::uint64_t T = 0;
  std::vector<RefPiece> pieces;  // none: a fill row
  bool operator==(const RefRow&) const = default;
};

std::ostream& operator<<(std::ostream& os, const RefRow& r) {
  os << "T" << r.T << "[";
  for (const RefPiece& p : r.pieces) os << p.doc << "@" << p.first << "+" << p.positions << " ";
  return os << "]";
}

// The reference stream of global rows (see the file comment); a piece occupies its
// positions rounded up to `multiple`.
std::vector<RefRow> reference_rows(const Dataset& data, bool drop_last, std::size_t rows_wanted,
                                   std::size_t multiple = 1) {
  const auto tokens_of = [&](std::int64_t doc) { return data.docs[static_cast<std::size_t>(doc)].tokens.size(); };
  std::vector<RefRow> rows;
  for (std::uint32_t epoch = 0; rows.size() < rows_wanted; ++epoch) {
    std::size_t T = kSchedule.stage_at(kSchedule.step_of_row(rows.size())).block_size;
    // Every document's tokens not yet placed, cut at T: (doc, first) in epoch order.
    std::vector<std::pair<std::int64_t, std::size_t>> unplaced;
    const auto cut_from = [&](std::vector<std::pair<std::int64_t, std::size_t>>& into, std::int64_t doc,
                              std::size_t first) {
      for (std::size_t o = first; o + 1 < tokens_of(doc); o += T) into.emplace_back(doc, o);
    };
    for (const std::uint64_t doc : numpy_permutation(kSeed + epoch, kDocuments))
      cut_from(unplaced, static_cast<std::int64_t>(doc), 0);
    const auto positions = [&](std::size_t i) {
      return std::min(T, tokens_of(unplaced[i].first) - 1 - unplaced[i].second);
    };
    const auto occupies = [&](std::size_t i) { return (positions(i) + multiple - 1) / multiple * multiple; };
    while (!unplaced.empty()) {
      const std::size_t now = kSchedule.stage_at(kSchedule.step_of_row(rows.size())).block_size;
      if (now != T) {
        T = now;
        std::vector<std::pair<std::int64_t, std::size_t>> recut;
        for (std::size_t i = 0; i < unplaced.size(); ++i) {
          if (i == 0 || unplaced[i - 1].first != unplaced[i].first)
            cut_from(recut, unplaced[i].first, unplaced[i].second);
        }
        unplaced = std::move(recut);
      }
      RefRow row{T, {}};
      std::size_t free = T;
      const auto place = [&](std::size_t i) {
        free -= occupies(i);
        row.pieces.push_back({unplaced[i].first, unplaced[i].second, positions(i)});
        unplaced.erase(unplaced.begin() + static_cast<std::ptrdiff_t>(i));
      };
      place(0);
      for (;;) {
        std::size_t best = unplaced.size();
        for (std::size_t i = 0; i < std::min<std::size_t>(kLookahead, unplaced.size()); ++i) {
          bool waits = false;  // an older piece of its document is unplaced
          for (std::size_t j = 0; j < i; ++j) waits = waits || unplaced[j].first == unplaced[i].first;
          if (waits || occupies(i) > free) continue;
          if (best == unplaced.size() || occupies(i) > occupies(best)) best = i;
        }
        if (best == unplaced.size()) break;
        place(best);
      }
      rows.push_back(row);
    }
    if (!drop_last) {  // the epoch's last batch completed with fill rows
      const std::uint64_t end = kSchedule.rows_before(kSchedule.step_of_row(rows.size() - 1) + 1);
      while (rows.size() < end)
        rows.push_back(RefRow{kSchedule.stage_at(kSchedule.step_of_row(rows.size())).block_size, {}});
    }
  }
  return rows;
}

Config split_config(const Dataset& data, bool drop_last, std::int64_t world, std::int64_t rank) {
  Config c = curriculum_rank_config(data.dir.path(), 32, kSchedule, kSeed, drop_last, world, rank);
  c.dataset_mode = DatasetMode::sft_packed;
  c.truncation = Truncation::split;
  c.pack_lookahead = kLookahead;
  return c;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Dataset& data, bool drop_last, std::int64_t world) {
  return open_loaders(world, [&](std::int64_t r) { return split_config(data, drop_last, world, r); });
}

// Row r of `b` read back from its segments (a piece's first input from its first token),
// every field checked against its document's tokens and mask; the rest of the row padding.
RefRow checked_row(const Dataset& data, const Batch& b, std::size_t r, std::size_t multiple = 1) {
  const std::size_t T = b.cols();
  RefRow row{T, {}};
  std::size_t column = 0;
  for (const PackedSegment& s : b.segments()) {
    if (s.row != r) continue;
    const TestEpisode& d = data.docs.at(static_cast<std::size_t>(s.episode));
    const std::size_t at = r * T + s.column;
    const RefPiece piece{s.episode, static_cast<std::size_t>(b.tokens()[at] - (1000 * s.episode + 1)), s.positions};
    CAPTURE(row);
    REQUIRE(s.column == column);
    REQUIRE(piece.first + piece.positions < d.tokens.size());
    for (std::size_t i = 0; i < piece.positions; ++i) {
      const std::size_t p = piece.first + i;
      const float w = static_cast<float>(d.mask[p + 1]);
      CHECK(b.tokens()[at + i] == d.tokens[p]);
      CHECK(b.token_weights()[at + i] == w);
      CHECK(b.labels()[at + i] == (w != 0.0f ? static_cast<std::int64_t>(d.tokens[p + 1]) : -100));
      CHECK(b.position_ids()[at + i] == static_cast<std::int32_t>(i));
    }
    for (std::size_t i = piece.positions; i < (piece.positions + multiple - 1) / multiple * multiple; ++i) {
      CHECK(b.labels()[at + i] == -100);
      CHECK(b.token_weights()[at + i] == 0.0f);
    }
    column += (piece.positions + multiple - 1) / multiple * multiple;
    row.pieces.push_back(piece);
  }
  for (std::size_t p = column; p < T; ++p) {
    CHECK(b.labels()[r * T + p] == -100);
    CHECK(b.token_weights()[r * T + p] == 0.0f);
  }
  CHECK(b.episode_ids()[r] == (row.pieces.empty() ? -1 : row.pieces.front().doc));
  return row;
}

std::vector<RefRow> take(const Dataset& data, std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps) {
  std::vector<RefRow> rows;
  read_steps(ranks, steps, kSchedule, [&](const Batch& b) {
    for (std::size_t r = 0; r < b.rows(); ++r) rows.push_back(checked_row(data, b, r));
  });
  return rows;
}

constexpr std::uint64_t kSteps = 30;

}  // namespace

TEST_CASE(
    "packed split curriculum: pieces cut at each row's length equal the reference, every label position once per "
    "epoch, on 1, 2 and 4 ranks" *
    doctest::timeout(300)) {
  const Dataset data;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    std::vector<RefRow> want = reference_rows(data, drop_last, kSchedule.rows_before(kSteps));
    want.resize(kSchedule.rows_before(kSteps));  // the reference finishes its last epoch
    // The cases reach what they are for: rows of every length, documents cut at each of
    // them, and more than two epochs.
    std::set<std::uint64_t> lengths;
    std::uint64_t positions = 0;
    for (const RefRow& r : want) {
      for (const RefPiece& p : r.pieces) {
        if (p.first > 0) lengths.insert(r.T);
        positions += p.positions;
      }
    }
    REQUIRE(lengths == std::set<std::uint64_t>{16, 32, 64});
    REQUIRE(positions > 2 * data.label_positions());
    for (const std::int64_t world : {1, 2, 4}) {
      CAPTURE(world);
      auto ranks = open_ranks(data, drop_last, world);
      const std::vector<RefRow> got = take(data, ranks, kSteps);
      CHECK(got == want);
      // From the loader alone: the stream's first epochs each hold every label position of
      // every document once (epochs are packed one after another).
      std::map<std::pair<std::int64_t, std::size_t>, int> seen;
      std::uint64_t counted = 0;
      for (const RefRow& r : got) {
        for (const RefPiece& p : r.pieces) {
          for (std::size_t i = 0; i < p.positions && counted < 2 * data.label_positions(); ++i, ++counted)
            ++seen[{p.doc, p.first + i}];
        }
      }
      CHECK(seen.size() == data.label_positions());
      CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& kv) { return kv.second == 2; }));
    }
  }
}

TEST_CASE("packed split curriculum: resume at every step, and from 2 ranks onto 4 across the boundaries" *
          doctest::timeout(600)) {
  const Dataset data;
  constexpr std::uint64_t kRun = 14;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<RefRow> expected = reference_rows(data, drop_last, kSchedule.rows_before(kRun));
    const auto open = [&](std::int64_t world) { return open_ranks(data, drop_last, world); };
    const auto read = [&](auto& ranks, std::uint64_t steps) { return take(data, ranks, steps); };
    // Boundaries at steps 3 and 7.
    check_resumes(open, read, expected, kSchedule, kRun, 12, 1, {2, 3, 5, 7, 9});
  }
}

TEST_CASE(
    "packed split curriculum: context-parallel padding counts each piece padded, and a split too small names "
    "the longest stage" *
    doctest::timeout(300)) {
  const Dataset data;
  constexpr std::uint64_t kRun = 12;
  // cp = 2 of 4 ranks (dp = 2: ranks 0 and 2 are CP rank 0 of each DP rank): each piece
  // padded to a multiple of 4 positions; balance_ranks=attention reads each piece's length
  // at its row's length (the same rows per step, dealt differently).
  const std::vector<RefRow> expected = reference_rows(data, true, kSchedule.rows_before(kRun), 4);
  std::vector<std::unique_ptr<Loader>> ranks;
  for (const std::int64_t rank : {0, 2}) {
    Config c = split_config(data, true, 4, rank);
    c.context_parallel_size = 2;
    c.balance_ranks = RankBalance::attention;
    ranks.push_back(std::make_unique<Loader>(c));
  }
  for (std::uint64_t step = 0; step < kRun; ++step) {
    CAPTURE(step);
    std::vector<RefRow> got_rows;
    for (auto& loader : ranks) {
      const Batch b = loader->get_batch();
      REQUIRE(b.cols() == kSchedule.stage_at(step).block_size);
      for (std::size_t r = 0; r < b.rows(); ++r) got_rows.push_back(checked_row(data, b, r, 4));
    }
    std::multiset<std::string> got_text, want_text;
    for (const RefRow& r : got_rows) got_text.insert(doctest::toString(r).c_str());
    for (std::uint64_t g = kSchedule.rows_before(step); g < kSchedule.rows_before(step + 1); ++g)
      want_text.insert(doctest::toString(expected[g]).c_str());
    CHECK(got_text == want_text);
  }
  // 20 documents of 2 to 120 tokens make far fewer than 64 rows at the longest length, 64.
  Config big = split_config(data, true, 1, 0);
  big.shape_schedule[1].global_batch_size = 64;
  const std::string message = error_of([&] { Loader{big}; });
  CHECK(message.find("kept episodes that pack into") != std::string::npos);
  CHECK(message.find("fewer than the largest global batch of the shape_schedule (64 rows)") != std::string::npos);
}

TEST_CASE("packed split curriculum: the audit log names each epoch's first documents and every document seen" *
          doctest::timeout(120)) {
  const Dataset data;
  Config c = split_config(data, true, 1, 0);
  c.audit_log_dir = data.dir.path() / "audit";
  {
    Loader loader(c);
    for (std::uint64_t step = 0; step < kSteps; ++step) (void)loader.get_batch();
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(data.dir.path() / "audit")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  std::ifstream in(files[0]);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Epoch e's order is the documents' numpy order (the packer cuts them).
  for (std::uint32_t epoch = 0; epoch < 2; ++epoch) {
    CAPTURE(epoch);
    const std::vector<std::uint64_t> perm = numpy_permutation(kSeed + epoch, kDocuments);
    std::string first = "first_episode_ids=\"[";
    for (std::size_t i = 0; i < 10; ++i) first += (i ? ", " : "") + std::to_string(perm[i]);
    CHECK(text.find("action=epoch_start | split=train | epoch=" + std::to_string(epoch)) != std::string::npos);
    CHECK(text.find(first + "]\"") != std::string::npos);
  }
  CHECK(text.find("epoch=0 | seed_used=23 | episodes_seen=20 | episodes_skipped=0") != std::string::npos);
}
