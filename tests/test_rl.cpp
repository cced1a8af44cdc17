// RL batches: GroupBatcher (advantages, weights, packing, filtering, resume) and RLPrompts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "test_support.hpp"
#include "tokenfeed/rl.hpp"

using namespace tokenfeed;
using tokenfeed::test::error_of;

namespace {

// A deterministic sampler: group i has a prompt of 2 + i % 4 tokens and `size`
// completions of 1 + (i * 7 + k * 3) % 9 tokens (plus `extra`), with log-probs; its
// rewards vary, except for indices in `flat` (all equal).
struct ToySampler {
  std::size_t size = 4;
  std::set<std::uint64_t> flat;
  std::size_t extra = 0;
  bool with_log_probs = true;

  ScoredGroup operator()(std::uint64_t i) const {
    ScoredGroup g;
    for (std::size_t t = 0; t < 2 + i % 4; ++t) g.prompt.push_back(static_cast<std::int64_t>(1000 + 10 * i + t));
    for (std::size_t k = 0; k < size; ++k) {
      std::vector<std::int64_t> c;
      std::vector<float> lp;
      const std::size_t n = 1 + (i * 7 + k * 3) % 9 + extra;
      for (std::size_t t = 0; t < n; ++t) {
        c.push_back(static_cast<std::int64_t>(100000 * (i + 1) + 100 * k + t));
        lp.push_back(-0.01f * static_cast<float>(t + 1) - static_cast<float>(k));
      }
      g.completions.push_back(c);
      if (with_log_probs) g.log_probs.push_back(lp);
      g.rewards.push_back(flat.count(i) ? 0.5 : static_cast<double>((i * 5 + k * k) % 7) / 3.0);
    }
    g.episode = static_cast<std::int64_t>(7000 + i);
    return g;
  }
};

// Everything a batch holds, copied, for comparisons.
struct Snapshot {
  std::vector<std::int64_t> tokens, labels, group_ids, episode_ids;
  std::vector<float> weights, log_probs, rewards;
  std::vector<std::int32_t> positions, cu;
  std::vector<std::uint32_t> seg;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snap(const Batch& b) {
  Snapshot s;
  s.tokens.assign(b.tokens().begin(), b.tokens().end());
  s.labels.assign(b.labels().begin(), b.labels().end());
  s.group_ids.assign(b.group_ids().begin(), b.group_ids().end());
  s.episode_ids.assign(b.episode_ids().begin(), b.episode_ids().end());
  s.weights.assign(b.token_weights().begin(), b.token_weights().end());
  s.log_probs.assign(b.log_probs().begin(), b.log_probs().end());
  s.rewards.assign(b.rewards().begin(), b.rewards().end());
  s.positions.assign(b.position_ids().begin(), b.position_ids().end());
  s.cu.assign(b.cu_seqlens().begin(), b.cu_seqlens().end());
  for (const PackedSegment& p : b.segments()) {
    s.seg.insert(s.seg.end(), {p.row, p.column, p.positions, static_cast<std::uint32_t>(p.episode)});
  }
  return s;
}

GroupBatcherOptions options(std::size_t rows, std::size_t cols, Advantage advantage = Advantage::grpo) {
  GroupBatcherOptions o;
  o.batch_size = rows;
  o.block_size = cols;
  o.group_size = 4;
  o.advantage = advantage;
  o.pad_token_id = 9;
  o.eps = 1e-6;
  return o;
}

// The reference advantages of a group, written independently of the library.
std::vector<double> reference_advantages(const std::vector<double>& r, Advantage a, double eps) {
  double mean = 0;
  for (double x : r) mean += x / static_cast<double>(r.size());
  double ss = 0;
  for (double x : r) ss += (x - mean) * (x - mean);
  const double sd = std::sqrt(ss / static_cast<double>(r.size()));
  std::vector<double> out;
  for (double x : r) out.push_back(a == Advantage::grpo ? (x - mean) / (sd + eps) : x - mean);
  return out;
}

// Checks every sequence of `b` against the group it came from, and the packing invariants.
void check_batch(const Batch& b, const ToySampler& sampler, Advantage advantage, std::size_t T) {
  const auto cu = b.cu_seqlens();
  REQUIRE(cu.size() == b.num_sequences() + 1);
  CHECK(cu.front() == 0);
  CHECK(static_cast<std::size_t>(cu.back()) == b.rows() * b.cols());
  REQUIRE(b.rewards().size() == b.num_sequences());
  REQUIRE(b.group_ids().size() == b.num_sequences());
  std::map<std::int64_t, std::size_t> next_completion;  // group -> completions seen so far
  std::size_t segment = 0;
  for (std::size_t s = 0; s < b.num_sequences(); ++s) {
    const std::size_t begin = static_cast<std::size_t>(cu[s]), end = static_cast<std::size_t>(cu[s + 1]);
    REQUIRE(begin < end);
    CHECK(begin / T == (end - 1) / T);  // never across rows
    for (std::size_t p = begin; p < end; ++p) CHECK(b.position_ids()[p] == static_cast<std::int32_t>(p - begin));
    const std::int64_t gid = b.group_ids()[s];
    if (gid < 0) {  // a row's padding
      CHECK(end % T == 0);
      CHECK(b.rewards()[s] == 0.0f);
      for (std::size_t p = begin; p < end; ++p) {
        CHECK(b.tokens()[p] == 9);
        CHECK(b.labels()[p] == -100);
        CHECK(b.token_weights()[p] == 0.0f);
        if (!b.log_probs().empty()) CHECK(b.log_probs()[p] == 0.0f);
      }
      continue;
    }
    const ScoredGroup g = sampler(static_cast<std::uint64_t>(gid));
    // First fit may place a later completion in an earlier row: find which one this is
    // from its first token, the label at the prompt's last position.
    ++next_completion[gid];
    const std::int64_t first = b.labels()[begin + g.prompt.size() - 1];
    const auto k = static_cast<std::size_t>((first - 100000 * (gid + 1)) / 100);
    REQUIRE(k < g.completions.size());
    const std::vector<double> adv = reference_advantages(g.rewards, advantage, 1e-6);
    std::vector<std::int64_t> seq = g.prompt;
    seq.insert(seq.end(), g.completions[k].begin(), g.completions[k].end());
    seq.resize(std::min(seq.size(), T + 1));
    const std::size_t P = g.prompt.size();
    REQUIRE(end - begin == seq.size() - 1);
    CHECK(b.rewards()[s] == static_cast<float>(g.rewards[k]));
    const PackedSegment& seg = b.segments()[segment++];
    CHECK(seg.row * T + seg.column == begin);
    CHECK(seg.positions == end - begin);
    CHECK(seg.episode == g.episode);
    for (std::size_t i = 0; i + 1 < seq.size(); ++i) {
      const std::size_t p = begin + i;
      CHECK(b.tokens()[p] == seq[i]);
      if (i + 1 < P) {  // the label is a prompt token: no loss
        CHECK(b.labels()[p] == -100);
        CHECK(b.token_weights()[p] == 0.0f);
        CHECK(b.log_probs()[p] == 0.0f);
      } else {
        CHECK(b.labels()[p] == seq[i + 1]);
        CHECK(b.token_weights()[p] == doctest::Approx(adv[k]).epsilon(1e-6));
        CHECK(b.log_probs()[p] == g.log_probs[k][i + 1 - P]);
      }
    }
  }
  CHECK(segment == b.segments().size());
}

}  // namespace

TEST_CASE("rl: advantages, weights, labels and log-probs match a reference, for grpo and mean_only") {
  for (Advantage advantage : {Advantage::grpo, Advantage::mean_only}) {
    CAPTURE(to_string(advantage));
    ToySampler sampler;
    GroupBatcher batcher(options(4, 24, advantage));
    std::uint64_t groups = 0;
    for (int step = 0; step < 6; ++step) {
      Batch b = batcher.next_batch(sampler);
      CHECK(b.step() == static_cast<std::uint64_t>(step));
      CHECK(b.rows() == 4);
      CHECK(b.cols() == 24);
      check_batch(b, sampler, advantage, 24);
      CHECK(b.segments().size() > b.rows());  // several sequences share a row
      groups += batcher.batch_metrics().valid_groups;
      // A group is whole in one batch: its sequences' rewards have a mean equal to the group's.
      std::map<std::int64_t, int> per_group;
      for (std::int64_t g : b.group_ids())
        if (g >= 0) ++per_group[g];
      for (const auto& [g, n] : per_group) CHECK(n == 4);
    }
    CHECK(batcher.total_metrics().valid_groups == groups);
    CHECK(batcher.total_metrics().batches == 6);
  }
  CHECK(parse_advantage("mean_only") == Advantage::mean_only);
  CHECK(error_of([] { parse_advantage("ppo"); }).find("'ppo'") != std::string::npos);
}

TEST_CASE("rl: zero-variance groups are dropped and counted, the metrics add up") {
  ToySampler sampler;
  sampler.flat = {1, 2, 5, 9};
  GroupBatcher batcher(options(4, 24));
  std::set<std::int64_t> seen;
  RLMetrics sum;
  for (int step = 0; step < 5; ++step) {
    Batch b = batcher.next_batch(sampler);
    for (std::int64_t g : b.group_ids())
      if (g >= 0) seen.insert(g);
    const RLMetrics& m = batcher.batch_metrics();
    CHECK(m.attempts == m.valid_groups + m.zero_var_groups);
    CHECK(m.sequences == 4 * m.valid_groups);
    double reward = 0;
    std::size_t n = 0;
    for (std::size_t s = 0; s < b.num_sequences(); ++s) {
      if (b.group_ids()[s] >= 0) {
        reward += b.rewards()[s];
        ++n;
      }
    }
    CHECK(n == m.sequences);
    CHECK(m.mean_reward() == doctest::Approx(reward / static_cast<double>(n)).epsilon(1e-5));
    CHECK(m.mean_advantage() == doctest::Approx(0.0).epsilon(1e-9));  // grpo advantages sum to 0 per group
    CHECK(m.mean_abs_advantage() > 0.1);
    sum += m;
  }
  for (std::int64_t g : {1, 2, 5, 9}) CHECK(seen.count(g) == 0);
  CHECK(seen.count(0) == 1);
  CHECK(seen.count(3) == 1);
  const RLMetrics& total = batcher.total_metrics();
  CHECK(total.zero_var_groups == 4);
  CHECK(total.attempts == sum.attempts);
  CHECK(total.valid_groups == seen.size());
  CHECK(total.attempts_per_batch() == doctest::Approx(static_cast<double>(sum.attempts) / 5));
}

TEST_CASE("rl: max_attempts consecutive dropped groups is an error naming the prompts tried") {
  ToySampler sampler;
  for (std::uint64_t i = 3; i < 100; ++i) sampler.flat.insert(i);
  GroupBatcherOptions o = options(4, 24);
  o.max_attempts = 5;
  GroupBatcher batcher(o);
  const std::string message = error_of(
      [&] {
        for (;;) batcher.next_batch(sampler);
      },
      ErrorKind::pipeline);
  CHECK(message.find("max_attempts (5)") != std::string::npos);
  for (const char* name : {"pull index 3 (prompt episode 7003)", "pull index 7 (prompt episode 7007)"}) {
    CHECK_MESSAGE(message.find(name) != std::string::npos, message);
  }
  CHECK(message.find("pull index 8") == std::string::npos);
}

TEST_CASE("rl: a sequence longer than block_size is cut from the completion's end and counted") {
  ToySampler sampler;
  sampler.extra = 20;  // completions of 21..29 tokens, prompts of 2..5, block 24
  GroupBatcher batcher(options(4, 24));
  Batch b = batcher.next_batch(sampler);
  check_batch(b, sampler, Advantage::grpo, 24);
  const RLMetrics& m = batcher.batch_metrics();
  std::uint64_t expected = 0;
  std::set<std::int64_t> groups(b.group_ids().begin(), b.group_ids().end());
  groups.erase(-1);
  for (std::int64_t g : groups) {
    const ScoredGroup group = sampler(static_cast<std::uint64_t>(g));
    for (const auto& c : group.completions) expected += group.prompt.size() + c.size() > 25 ? 1 : 0;
  }
  CHECK(expected > 0);
  CHECK(m.truncated_sequences == expected);
  // Every sequence fills a row (24 positions) or nearly: one per row.
  CHECK(b.max_seqlen() <= 24);
}

TEST_CASE("rl: identical batches from a deterministic sampler, and after save_state/load_state") {
  ToySampler sampler;
  sampler.flat = {2, 6, 7};
  std::vector<Snapshot> straight;
  std::vector<std::string> states;
  RLMetrics final_total;
  {
    GroupBatcher batcher(options(3, 20));
    for (int step = 0; step < 10; ++step) {
      states.push_back(batcher.save_state());
      straight.push_back(snap(batcher.next_batch(sampler)));
    }
    final_total = batcher.total_metrics();
  }
  {
    GroupBatcher again(options(3, 20));
    for (int step = 0; step < 10; ++step) CHECK(snap(again.next_batch(sampler)) == straight[step]);
  }
  for (int at : {1, 4, 7}) {
    CAPTURE(at);
    GroupBatcher resumed(options(3, 20));
    resumed.load_state(states[at]);
    for (int step = at; step < 10; ++step) {
      Batch b = resumed.next_batch(sampler);
      CHECK(b.step() == static_cast<std::uint64_t>(step));
      CHECK(snap(b) == straight[step]);
    }
    CHECK(resumed.total_metrics().attempts == final_total.attempts);
    CHECK(resumed.total_metrics().zero_var_groups == final_total.zero_var_groups);
    CHECK(resumed.total_metrics().reward_sum == final_total.reward_sum);
  }
  // A resumed run asks for the same indices as the run it continues.
  GroupBatcher resumed(options(3, 20));
  resumed.load_state(states[4]);
  std::vector<std::uint64_t> asked;
  const std::uint64_t cursor = resumed.cursor();
  CHECK(cursor > 0);
  resumed.next_batch([&](std::uint64_t i) {
    asked.push_back(i);
    return sampler(i);
  });
  CHECK(asked.front() == cursor);
  for (std::size_t k = 0; k < asked.size(); ++k) CHECK(asked[k] == cursor + k);

  CHECK(error_of([&] { resumed.load_state("{\"format\": \"x\"}"); }, ErrorKind::state).find("format") !=
        std::string::npos);
  CHECK(error_of([&] { resumed.load_state("nope"); }, ErrorKind::state).find("JSON") != std::string::npos);
}

// Batches 0-2: 4 rows of 12 (global 8 over 2 data-parallel ranks); 3-5: 4 rows of 24; then
// 5 rows (batch_size) of 8, which truncates most sequences.
GroupBatcherOptions scheduled_options() {
  GroupBatcherOptions o = options(5, 20);
  o.data_parallel_size = 2;
  o.shape_schedule = {ShapeStage{3, std::nullopt, 8, 12}, ShapeStage{6, std::nullopt, 8, 24},
                      ShapeStage{std::nullopt, std::nullopt, std::nullopt, 8}};
  return o;
}

TEST_CASE("rl: a shape_schedule shapes batch k by its stage, groups stay in pull order, resume is exact") {
  ToySampler sampler;
  sampler.flat = {4, 9};
  const std::vector<std::pair<std::size_t, std::size_t>> shapes = {{4, 12}, {4, 12}, {4, 12}, {4, 24}, {4, 24},
                                                                   {4, 24}, {5, 8},  {5, 8},  {5, 8}};
  std::vector<Snapshot> straight;
  std::vector<std::string> states;
  GroupBatcher batcher(scheduled_options());
  std::int64_t last_group = -1;
  std::set<std::int64_t> placed;
  for (std::size_t step = 0; step < shapes.size(); ++step) {
    CAPTURE(step);
    states.push_back(batcher.save_state());
    Batch b = batcher.next_batch(sampler);
    REQUIRE(b.rows() == shapes[step].first);
    REQUIRE(b.cols() == shapes[step].second);
    // Every sequence cut for this batch's own block size (a group left over from the batch
    // before is cut again), with its fields as in any batch.
    check_batch(b, sampler, Advantage::grpo, b.cols());
    // Its truncated sequences counted at its block size.
    std::uint64_t truncated = 0;
    std::set<std::int64_t> groups;
    for (std::size_t s = 0; s < b.num_sequences(); ++s) {
      const std::int64_t gid = b.group_ids()[s];
      if (gid < 0) continue;
      groups.insert(gid);
      const ScoredGroup g = sampler(static_cast<std::uint64_t>(gid));
      const std::int64_t first = b.labels()[static_cast<std::size_t>(b.cu_seqlens()[s]) + g.prompt.size() - 1];
      const auto k = static_cast<std::size_t>((first - 100000 * (gid + 1)) / 100);
      if (g.prompt.size() + g.completions[k].size() > b.cols() + 1) ++truncated;
    }
    CHECK(batcher.batch_metrics().truncated_sequences == truncated);
    // Whole groups in pull order: this batch's come after every earlier batch's.
    REQUIRE(!groups.empty());
    CHECK(*groups.begin() > last_group);
    last_group = *groups.rbegin();
    placed.insert(groups.begin(), groups.end());
    straight.push_back(snap(b));
  }
  // Every valid group up to the last placed one, none twice (sets), none skipped.
  for (std::int64_t i = 0; i <= last_group; ++i)
    CHECK(placed.count(i) == (sampler.flat.count(static_cast<std::uint64_t>(i)) ? 0u : 1u));
  for (std::size_t at = 0; at < shapes.size(); ++at) {
    CAPTURE(at);
    GroupBatcher resumed(scheduled_options());
    resumed.load_state(states[at]);
    for (std::size_t step = at; step < shapes.size(); ++step)
      CHECK(snap(resumed.next_batch(sampler)) == straight[step]);
  }
}

TEST_CASE("rl: a batch of a smaller stage leaves the slot's pages beyond its cells with the kernel") {
  // 2 rows of 64 for 2 batches, then 8 rows of 8192 (256 KiB of log_probs a slot): the first
  // batches zero and write only their own cells, so the rest of the slot stays given back.
  ToySampler sampler;
  GroupBatcherOptions o = options(2, 64);
  o.shape_schedule = {ShapeStage{2, std::nullopt, std::nullopt, 64}, ShapeStage{std::nullopt, std::nullopt, 8, 8192}};
  GroupBatcher batcher(o);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t whole = 8 * 8192;  // the largest stage's cells, which every slot holds
  for (int step = 0; step < 2; ++step) {
    Batch b = batcher.next_batch(sampler);
    REQUIRE(b.log_probs().size() == 2 * 64);
    const std::size_t beyond = (whole - b.log_probs().size()) * sizeof(float);
    REQUIRE(beyond / page >= 32);
    CHECK(tokenfeed::test::resident_pages(b.log_probs().data() + b.log_probs().size(), beyond) == 0);
    CHECK(tokenfeed::test::resident_pages(b.tokens().data() + b.tokens().size(), beyond * 2) == 0);
  }
  Batch big = batcher.next_batch(sampler);
  CHECK(big.log_probs().size() == whole);
}

TEST_CASE("rl: a GroupBatcher's shape_schedule is checked, naming the stage") {
  GroupBatcherOptions odd = scheduled_options();
  odd.shape_schedule[1].global_batch_size = 7;
  CHECK(error_of([&] { GroupBatcher{odd}; }, ErrorKind::config)
            .find("GroupBatcher: shape_schedule stage 1: global_batch_size=7 is not a multiple of the data-parallel "
                  "size 2") != std::string::npos);
  GroupBatcherOptions open_end = scheduled_options();
  open_end.shape_schedule[1].until_step.reset();
  CHECK(error_of([&] { GroupBatcher{open_end}; }, ErrorKind::config)
            .find("shape_schedule stage 1 has no until_step or until_tokens") != std::string::npos);
  GroupBatcherOptions zero = scheduled_options();
  zero.shape_schedule[2].block_size = 0;
  CHECK(error_of([&] { GroupBatcher{zero}; }, ErrorKind::config).find("stage 2: block_size must be > 0") !=
        std::string::npos);
  // A prompt must leave room in the shortest block size, whichever batch it would open.
  GroupBatcherOptions short_rows = scheduled_options();
  short_rows.shape_schedule[2].block_size = 3;
  GroupBatcher batcher(short_rows);
  ToySampler sampler;  // prompts of 2 + i % 4 tokens: index 2 has 4
  CHECK(error_of([&] { (void)batcher.next_batch([&](std::uint64_t) { return sampler(2); }); }, ErrorKind::usage)
            .find("has a prompt of 4 tokens: block_size 3 (the shape_schedule's shortest) leaves no room for a "
                  "completion") != std::string::npos);
}

TEST_CASE("rl: an exception from the sampler reaches the caller unchanged, the batcher stays where it was") {
  ToySampler sampler;
  GroupBatcher batcher(options(4, 24));
  Snapshot first = snap(batcher.next_batch(sampler));
  const std::string state = batcher.save_state();
  const Snapshot expected = [&] {
    GroupBatcher other(options(4, 24));
    other.next_batch(sampler);
    return snap(other.next_batch(sampler));
  }();
  try {
    batcher.next_batch([&](std::uint64_t i) -> ScoredGroup {
      if (i == batcher.cursor() + 2) throw std::runtime_error("inference server down at " + std::to_string(i));
      return sampler(i);
    });
    FAIL("expected the sampler's exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).rfind("inference server down at ", 0) == 0);
  }
  CHECK(batcher.save_state() == state);
  CHECK(snap(batcher.next_batch(sampler)) == expected);
  (void)first;
}

TEST_CASE("rl: malformed groups and a group too big for a batch are usage errors naming the group") {
  ToySampler sampler;
  GroupBatcher batcher(options(2, 24));
  auto with = [&](auto change) {
    return [&, change](std::uint64_t i) {
      ScoredGroup g = sampler(i);
      change(g);
      return g;
    };
  };
  CHECK(error_of([&] { batcher.next_batch(with([](ScoredGroup& g) { g.rewards.pop_back(); })); }, ErrorKind::usage)
            .find("3 rewards for 4 completions") != std::string::npos);
  CHECK(error_of(
            [&] {
              batcher.next_batch(with([](ScoredGroup& g) {
                g.completions[1].clear();
                g.log_probs[1].clear();
              }));
            },
            ErrorKind::usage)
            .find("completion 1 is empty") != std::string::npos);
  CHECK(
      error_of([&] { batcher.next_batch(with([](ScoredGroup& g) { g.log_probs[2].push_back(0); })); }, ErrorKind::usage)
          .find("log_probs") != std::string::npos);
  CHECK(error_of([&] { batcher.next_batch(with([](ScoredGroup& g) { g.rewards[0] = NAN; })); }, ErrorKind::usage)
            .find("not finite") != std::string::npos);
  CHECK(error_of([&] { batcher.next_batch(with([](ScoredGroup& g) { g.prompt.assign(25, 1); })); }, ErrorKind::usage)
            .find("no room for a completion") != std::string::npos);
  CHECK(error_of([&] { batcher.next_batch(with([](ScoredGroup& g) { g.completions.pop_back(); })); }, ErrorKind::usage)
            .find("group_size is 4") != std::string::npos);
  // Four sequences of 24 positions need four rows; the batch has two.
  sampler.extra = 30;
  CHECK(error_of([&] { batcher.next_batch(sampler); }, ErrorKind::usage)
            .find("does not fit an empty batch of 2 rows x 24") != std::string::npos);
  CHECK(batcher.cursor() == 0);
  GroupBatcherOptions bad = options(2, 24);
  bad.group_size = 1;
  CHECK(error_of([&] { GroupBatcher b(bad); }).find("group_size") != std::string::npos);
  bad = options(2, 24);
  bad.max_attempts = 0;
  CHECK(error_of([&] { GroupBatcher b(bad); }).find("max_attempts") != std::string::npos);
}

TEST_CASE("rl: without log-probs the field is empty, batches held past the limit are refused") {
  ToySampler sampler;
  sampler.with_log_probs = false;
  GroupBatcher batcher(options(2, 24));
  std::vector<Batch> held;
  for (std::size_t i = 0; i < GroupBatcher::kMaxHeldBatches; ++i) held.push_back(batcher.next_batch(sampler));
  CHECK(held[0].log_probs().empty());
  CHECK(held[0].token_weights().size() == 48);
  CHECK(error_of([&] { batcher.next_batch(sampler); }, ErrorKind::usage).find("held") != std::string::npos);
  held.clear();
  CHECK(batcher.next_batch(sampler).valid());
}

TEST_CASE("rl: prompts follow the epoch order, sliced by rank, skipping prompts too long") {
  test::TempDir dir;
  // 13 episodes of 3..12 tokens; with max_tokens 10, those of 11 and 12 are never drawn.
  const auto episodes = test::numbered_episodes(13, {3, 5, 7, 9, 11, 12, 4, 6, 8, 10});
  test::write_split(dir.path(), "train", episodes, TokenDtype::uint16, false);
  std::set<std::int64_t> expected;
  for (std::size_t i = 0; i < episodes.size(); ++i) {
    if (episodes[i].tokens.size() <= 10) expected.insert(static_cast<std::int64_t>(i));
  }
  Config config = test::make_config(dir.path(), 1, 10);
  std::map<std::int64_t, int> per_epoch[2];
  for (std::int64_t rank : {0, 1}) {
    Config c = config;
    c.world_size = 2;
    c.rank = rank;
    RLPrompts prompts(c, 10);
    CHECK(prompts.size() == expected.size());
    CHECK(prompts.per_epoch() == expected.size() / 2);
    for (std::uint64_t i = 0; i < 2 * prompts.per_epoch(); ++i) {
      const Prompt p = prompts.at(i);
      CHECK(p.epoch == i / prompts.per_epoch());
      CHECK(expected.count(p.episode) == 1);
      ++per_epoch[p.epoch][p.episode];
      const auto& tokens = episodes[static_cast<std::size_t>(p.episode)].tokens;
      CHECK(std::vector<std::int64_t>(tokens.begin(), tokens.end()) == p.tokens);
    }
  }
  for (const auto& epoch : per_epoch) {
    CHECK(epoch.size() == expected.size() - expected.size() % 2);  // the remainder skipped
    for (const auto& [episode, n] : epoch) CHECK(n == 1);
  }
  // The same settings give the same prompts; another seed another order.
  RLPrompts a(config, 10), b(config, 10);
  Config other = config;
  other.epoch_seed = 7;
  RLPrompts c(other, 10);
  bool differs = false;
  for (std::uint64_t i = 0; i < a.per_epoch(); ++i) {
    CHECK(a.at(i).episode == b.at(i).episode);
    differs |= a.at(i).episode != c.at(i).episode;
  }
  CHECK(differs);
  CHECK(a.fingerprint() == b.fingerprint());
  CHECK(a.fingerprint() != c.fingerprint());
  CHECK(error_of([&] { RLPrompts tiny(config, 2); }).find("fewer than the data-parallel size") != std::string::npos);
  // A shape_schedule (the GroupBatcher's) leaves the order alone; prompts longer than its
  // shortest block size are never drawn.
  Config scheduled = config;
  scheduled.shape_schedule = {ShapeStage{2, std::nullopt, 2, 6}, ShapeStage{std::nullopt, std::nullopt, 4, 16}};
  RLPrompts staged(scheduled, 10);
  std::size_t at_most_6 = 0;
  for (const auto& e : episodes) at_most_6 += e.tokens.size() <= 6 ? 1 : 0;
  CHECK(staged.size() == at_most_6);
  for (std::uint64_t i = 0; i < staged.per_epoch(); ++i) CHECK(staged.at(i).tokens.size() <= 6);
  CHECK(staged.config().shape_schedule.size() == 2);
}

TEST_CASE("rl: prompts settle their config with the loader's rules: the train split's shuffle, the pad id") {
  test::TempDir dir;
  const auto episodes = test::numbered_episodes(12, {3, 5, 7, 9});
  test::write_split(dir.path(), "train", episodes, TokenDtype::uint16, false);
  Config config = test::make_config(dir.path(), 1, 10);
  config.epoch_shuffle = true;
  config.train_overrides.epoch_shuffle = false;  // <train><epoch_shuffle>false: the loader reads train in order
  RLPrompts prompts(config, 10);
  for (std::uint64_t i = 0; i < prompts.per_epoch(); ++i) CHECK(prompts.at(i).episode == static_cast<std::int64_t>(i));
  Config shuffled = config;
  shuffled.train_overrides.epoch_shuffle.reset();
  RLPrompts other(shuffled, 10);
  CHECK(other.fingerprint() != prompts.fingerprint());
  // The pad id: the config's, else the metadata's pad_token_id before its eot_token_id; none
  // given or recorded is 0, where the loader would refuse the dataset.
  config.pad_token_id.reset();
  CHECK(RLPrompts(config, 10).pad_token_id() == 0);
  {
    std::ofstream meta(dir.path() / "dataset_metadata.json");
    meta << R"({"token_dtype": "uint16", "pad_token_id": 5, "eot_token_id": 9})";
  }
  CHECK(RLPrompts(config, 10).pad_token_id() == 5);
  config.pad_token_id = 7;
  CHECK(RLPrompts(config, 10).pad_token_id() == 7);
}

TEST_CASE("rl: token ids outside the vocabulary are refused, naming the pull index, the completion and the id") {
  ToySampler sampler;  // ids up to 100000 * (index + 1) + 400
  GroupBatcherOptions o = options(4, 24);
  o.vocab_size = 10'000'000;
  auto with = [&](auto change) {
    return [&, change](std::uint64_t i) {
      ScoredGroup g = sampler(i);
      if (i == 2) change(g);
      return g;
    };
  };
  for (std::int64_t bad : {std::int64_t{-1}, std::int64_t{10'000'000}, std::int64_t{1} << 40}) {
    CAPTURE(bad);
    GroupBatcher batcher(o);
    const std::string message = error_of(
        [&] { batcher.next_batch(with([bad](ScoredGroup& g) { g.completions[3][1] = bad; })); }, ErrorKind::usage);
    CHECK_MESSAGE(
        message.find("pull index 2 (prompt episode 7002): completion 3 holds token id " + std::to_string(bad) +
                     " at position 1, outside the vocabulary [0, 10000000)") != std::string::npos,
        message);
    CHECK(batcher.cursor() == 0);
  }
  GroupBatcher batcher(o);
  CHECK(error_of([&] { batcher.next_batch(with([](ScoredGroup& g) { g.prompt[0] = -7; })); }, ErrorKind::usage)
            .find("the prompt holds token id -7 at position 0") != std::string::npos);
  CHECK(batcher.next_batch(sampler).valid());
  // Without a vocabulary, negative ids are still refused; large ones pass.
  GroupBatcher unknown(options(4, 24));
  CHECK(
      error_of([&] { unknown.next_batch(with([](ScoredGroup& g) { g.completions[0][0] = -100; })); }, ErrorKind::usage)
          .find("completion 0 holds token id -100 at position 0, negative") != std::string::npos);
  CHECK(unknown.next_batch(with([](ScoredGroup& g) { g.completions[0][0] = std::int64_t{1} << 40; })).valid());
}

TEST_CASE("rl: rewards and advantages that float32 cannot hold are refused, computed in double") {
  ToySampler sampler;
  auto rewards = [&](std::vector<double> r) {
    return [&, r](std::uint64_t i) {
      ScoredGroup g = sampler(i);
      if (i == 1) g.rewards = r;
      return g;
    };
  };
  GroupBatcher grpo(options(4, 24));
  CHECK(error_of(
            [&] {
              grpo.next_batch(rewards({1.5e308, 1.5e308, -1e308, 0}));
            },
            ErrorKind::usage)
            .find("pull index 1 (prompt episode 7001): reward 0 (1.5e+308) is not finite in float32") !=
        std::string::npos);
  CHECK(error_of(
            [&] {
              grpo.next_batch(rewards({0, 1e39, 0, 0}));
            },
            ErrorKind::usage)
            .find("reward 1 (1e+39) is not finite in float32") != std::string::npos);
  GroupBatcher mean_only(options(4, 24, Advantage::mean_only));
  const std::string advantage = error_of(
      [&] {
        mean_only.next_batch(rewards({3e38, 3e38, 3e38, -3e38}));
      },
      ErrorKind::usage);
  CHECK_MESSAGE(
      advantage.find("pull index 1 (prompt episode 7001): the advantage of completion 3 (-4.") != std::string::npos,
      advantage);
  CHECK(advantage.find("e+38) is not finite in float32") != std::string::npos);
  // Rewards at float32's limits still give exact, finite weights.
  Batch b = grpo.next_batch(rewards({3e38, -3e38, 3e38, -3e38}));
  for (float w : b.token_weights()) CHECK(std::isfinite(w));
  CHECK(std::isfinite(grpo.batch_metrics().mean_advantage()));
  bool found = false;
  for (std::size_t s = 0; s < b.num_sequences(); ++s) found |= b.group_ids()[s] == 1 && b.rewards()[s] == 3e38f;
  CHECK(found);
}

TEST_CASE("rl: the max_attempts error prints eps exactly, skip_failed_prompts passes the run over") {
  ToySampler sampler;
  for (std::uint64_t i = 3; i < 9; ++i) sampler.flat.insert(i);
  GroupBatcherOptions o = options(4, 24);
  o.max_attempts = 4;
  o.eps = 1e-9;
  GroupBatcher failing(o);
  const std::string state = failing.save_state();
  std::string message;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the same prompts fail again
    message = error_of(
        [&] {
          for (;;) failing.next_batch(sampler);
        },
        ErrorKind::pipeline);
    CHECK_MESSAGE(message.find("eps = 1e-09)") != std::string::npos, message);
    CHECK(message.find("pull index 3 (prompt episode 7003)") != std::string::npos);
    CHECK(message.find("skip_failed_prompts") != std::string::npos);
  }
  // The way on: a batcher with skip_failed_prompts resumed from the last state.
  o.skip_failed_prompts = true;
  GroupBatcher skipping(o);
  skipping.load_state(state);
  std::set<std::int64_t> seen;
  for (int step = 0; step < 4; ++step) {
    Batch b = skipping.next_batch(sampler);
    for (std::int64_t g : b.group_ids())
      if (g >= 0) seen.insert(g);
  }
  for (std::int64_t g = 3; g < 9; ++g) CHECK(seen.count(g) == 0);
  CHECK(seen.count(9) == 1);
  CHECK(skipping.total_metrics().failed_runs == 1);
  CHECK(skipping.total_metrics().zero_var_groups == 6);
  // Recorded in the state: a resumed batcher keeps the count.
  GroupBatcher resumed(o);
  resumed.load_state(skipping.save_state());
  CHECK(resumed.total_metrics().failed_runs == 1);
  CHECK(skipping.save_state().find("\"failed_runs\":1") != std::string::npos);
}

TEST_CASE("rl: the prompts' fingerprint covers their tokens: a copy with one token changed differs") {
  test::TempDir dir;
  test::write_split(dir / "a", "train", test::numbered_episodes(12, {3, 5, 7, 9}), TokenDtype::uint16, false);
  std::filesystem::copy(dir / "a", dir / "b", std::filesystem::copy_options::recursive);
  std::vector<char> bytes = test::read_bytes(dir / "b" / "train" / "tokens.bin");
  bytes[10] = static_cast<char>(bytes[10] ^ 1);
  test::write_raw(dir / "b" / "train" / "tokens.bin", bytes.data(), bytes.size());
  const RLPrompts original(test::make_config(dir / "a", 1, 10), 10);
  const RLPrompts copy(test::make_config(dir / "b", 1, 10), 10);
  const RLPrompts again(test::make_config(dir / "a", 1, 10), 10);
  CHECK(copy.fingerprint() != original.fingerprint());
  CHECK(again.fingerprint() == original.fingerprint());
}

TEST_CASE("rl: prompts give the vocabulary their metadata records") {
  test::TempDir dir;
  test::write_split(dir.path(), "train", test::numbered_episodes(4, {3}), TokenDtype::uint16, false);
  CHECK(RLPrompts(test::make_config(dir.path(), 1, 10), 10).vocab_size() == 0);
  test::write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "vocab_size": 5000})");
  CHECK(RLPrompts(test::make_config(dir.path(), 1, 10), 10).vocab_size() == 5000);
}
