// The parallel layout: data-parallel coordinates from the global rank, the world size, the
// tensor/context/pipeline sizes and parallel_order, against a reference written here from
// the rule (the rank's digits in the order's mixed radix); the same batches on every rank of
// a data-parallel group; group_leader's followers without a pipeline; the refusals.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// {dimension: coordinate} of `rank`, the first dimension of `order` the fastest-varying.
std::map<std::string, std::int64_t> reference_coordinates(std::int64_t rank, std::int64_t world,
                                                          std::map<std::string, std::int64_t> sizes,
                                                          const std::vector<std::string>& order) {
  sizes["dp"] = world / (sizes["tp"] * sizes["cp"] * sizes["pp"]);
  std::map<std::string, std::int64_t> out;
  std::int64_t stride = 1;
  for (const std::string& dim : order) {
    out[dim] = (rank / stride) % sizes[dim];
    stride *= sizes[dim];
  }
  return out;
}

struct LayoutFixture {
  TempDir dir;
  LayoutFixture() { write_split(dir.path(), "train", numbered_episodes(120, {5, 9, 17, 30}), TokenDtype::uint32); }
  Config config(std::int64_t rank, std::int64_t world) const {
    Config c = make_config(dir.path(), 2, 32);
    c.token_dtype = TokenDtype::uint32;
    c.rank = rank;
    c.world_size = world;
    c.prefetch_depth = 2;
    c.decode_threads = 1;
    return c;
  }
};

// Every field and the bookkeeping of the next `steps` batches, as one comparable text.
std::vector<std::string> batches_of(Loader& loader, int steps) {
  std::vector<std::string> out;
  for (int i = 0; i < steps; ++i) {
    const Batch b = loader.get_batch("train");
    std::string text = std::to_string(b.step()) + "/" + std::to_string(b.epoch()) + "/" +
                       std::to_string(b.real_rows()) + "/" + std::to_string(b.num_sequences()) + ":";
    const auto add = [&text](auto span) {
      text.append(reinterpret_cast<const char*>(span.data()), span.size_bytes());
      text += '|';
    };
    add(b.tokens());
    add(b.labels());
    add(b.token_weights());
    add(b.position_ids());
    add(b.cu_seqlens());
    add(b.episode_ids());
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace

TEST_CASE("parallel layout: each rank's coordinates are its digits in the order's mixed radix") {
  LayoutFixture f;
  const std::int64_t world = 16;
  for (const std::vector<std::string>& order : std::vector<std::vector<std::string>>{
           {"tp", "cp", "dp", "pp"}, {"dp", "tp", "cp", "pp"}, {"pp", "dp", "cp", "tp"}}) {
    const std::string order_text = order[0] + "-" + order[1] + "-" + order[2] + "-" + order[3];
    CAPTURE(order_text);
    std::vector<std::vector<std::int64_t>> groups(2);
    for (std::int64_t rank = 0; rank < world; ++rank) {
      CAPTURE(rank);
      Config c = f.config(rank, world);
      c.tensor_parallel_size = 2;
      c.context_parallel_size = 2;
      c.pipeline_parallel_size = 2;
      c.parallel_order = order_text;
      const Loader loader(c);
      const ParallelLayout& l = loader.parallel_layout();
      auto want = reference_coordinates(rank, world, {{"tp", 2}, {"cp", 2}, {"pp", 2}}, order);
      CHECK(l.tensor_parallel_rank == want["tp"]);
      CHECK(l.context_parallel_rank == want["cp"]);
      CHECK(l.pipeline_parallel_rank == want["pp"]);
      CHECK(l.data_parallel_rank == want["dp"]);
      CHECK(l.data_parallel_size == 2);
      CHECK(loader.config().data_parallel_rank == want["dp"]);
      CHECK(loader.config().data_parallel_size == 2);
      CHECK(loader.config().context_parallel_rank == want["cp"]);
      CHECK(loader.config().rank == rank);
      CHECK(loader.config().world_size == world);
      groups[static_cast<std::size_t>(want["dp"])].push_back(rank);
      if (rank == world - 1) CHECK(loader.data_parallel_groups() == groups);
    }
    for (const auto& group : groups) {  // the leader is the group's lowest rank
      for (const std::int64_t rank : group) {
        Config c = f.config(rank, world);
        c.tensor_parallel_size = c.context_parallel_size = c.pipeline_parallel_size = 2;
        c.parallel_order = order_text;
        const Loader loader(c);
        CHECK(loader.parallel_layout().leader_rank == group.front());
        CHECK(loader.parallel_layout().data_leader == (rank == group.front()));
      }
    }
  }
}

TEST_CASE("parallel layout: a data-parallel group's ranks get identical batches, today's slice of their dp rank") {
  LayoutFixture f;
  for (const DatasetMode mode : {DatasetMode::sft_episode, DatasetMode::sft_packed}) {
    CAPTURE(to_string(mode));
    std::map<std::int64_t, std::vector<std::vector<std::string>>> by_group;
    for (std::int64_t rank = 0; rank < 8; ++rank) {
      Config c = f.config(rank, 8);
      c.dataset_mode = mode;
      c.tensor_parallel_size = 2;
      c.context_parallel_size = 2;
      Loader loader(c);
      by_group[loader.parallel_layout().data_parallel_rank].push_back(batches_of(loader, 6));
    }
    REQUIRE(by_group.size() == 2);
    for (const auto& [dp, members] : by_group) {
      CAPTURE(dp);
      REQUIRE(members.size() == 4);
      for (const auto& m : members) CHECK(m == members.front());
      Config plain = f.config(dp, 2);  // with the same CP padding (sft_packed pads sequences to 2·cp)
      plain.dataset_mode = mode;
      plain.context_parallel_size = 2;
      plain.context_parallel_rank = 0;
      plain.data_parallel_rank = dp;
      plain.data_parallel_size = 2;
      Loader today(plain);
      CHECK(batches_of(today, 6) == members.front());
    }
    CHECK(by_group[0].front() != by_group[1].front());
  }
}

TEST_CASE("parallel layout: group_leader's followers hold no pipeline and say whose batches to take") {
  LayoutFixture f;
  Config c = f.config(3, 4);
  c.tensor_parallel_size = 2;
  c.data_loading = DataLoading::group_leader;
  Loader follower(c);
  CHECK_FALSE(follower.parallel_layout().data_leader);
  CHECK(follower.parallel_layout().leader_rank == 2);
  const std::string refused = error_of([&] { follower.get_batch("train"); }, ErrorKind::usage);
  CHECK(refused.find("get_batch: data_loading=group_leader and rank 3 is not its data-parallel group's leader "
                     "(rank 2 decodes for data-parallel rank 1)") != std::string::npos);
  CHECK(error_of([&] { (void)follower.save_state(); }, ErrorKind::usage).find("save_state") != std::string::npos);
  CHECK(follower.split_stats("train").batches == 0);
  c.rank = 2;
  Loader leader(c);
  CHECK(leader.parallel_layout().data_leader);
  CHECK(leader.get_batch("train").rows() == 2);
}

TEST_CASE("parallel layout: direct data-parallel coordinates win, and a state moves to another layout") {
  LayoutFixture f;
  Config direct = f.config(5, 6);
  direct.tensor_parallel_size = 4;  // 6 ranks are no multiple of 4: only the direct coordinates tell
  direct.data_parallel_rank = 1;
  direct.data_parallel_size = 2;
  Loader loader(direct);
  CHECK(loader.parallel_layout().data_parallel_rank == 1);
  CHECK(loader.parallel_layout().tensor_parallel_rank == -1);
  CHECK(loader.parallel_layout().leader_rank == -1);
  CHECK(loader.data_parallel_groups().empty());
  Loader today(f.config(1, 2));
  CHECK(batches_of(loader, 3) == batches_of(today, 3));
  // tp=4 x dp=2 at batch 2 resumes at dp=4 (tp=1) at batch 1: the same global batch.
  Config wider = f.config(3, 4);
  wider.batch_size = 1;
  Loader resumed(wider);
  resumed.load_state(loader.save_state());
  CHECK(resumed.get_batch("train").step() == 3);
}

TEST_CASE("parallel layout: impossible layouts are refused naming the numbers") {
  LayoutFixture f;
  Config c = f.config(0, 6);
  c.tensor_parallel_size = 4;
  CHECK(error_of([&] { Loader loader(c); })
            .find("world_size 6 is not a multiple of tensor_parallel_size x context_parallel_size x "
                  "pipeline_parallel_size = 4 x 1 x 1 = 4") != std::string::npos);
  Config order = f.config(0, 1);
  for (const char* bad : {"tp-cp-dp", "tp-cp-dp-pp-tp", "tp-tp-dp-pp", "tp-cp-xp-pp", "", "tp--cp-dp-pp"}) {
    CAPTURE(bad);
    CHECK(error_of([&] { set_config_value(order, "parallel_order", bad); }).find("parallel_order") !=
          std::string::npos);
  }
  Config half = f.config(0, 1);
  half.data_parallel_rank = 0;
  CHECK(error_of([&] { validate_config(half); }).find("'data_parallel_size' is not") != std::string::npos);
  half.data_parallel_size = 1;
  half.data_parallel_rank = 1;
  CHECK(error_of([&] { validate_config(half); }).find("[0, data_parallel_size-1] = [0, 0], got 1") !=
        std::string::npos);
  Config cp = f.config(0, 1);
  cp.context_parallel_size = 2;
  cp.context_parallel_rank = 2;
  CHECK(error_of([&] { validate_config(cp); }).find("context_parallel_rank") != std::string::npos);
  CHECK(error_of([&] { set_config_value(cp, "pipeline_parallel_size", "0"); }).find("must be > 0") !=
        std::string::npos);
  Config leaderless = f.config(2, 3);
  leaderless.tensor_parallel_size = 2;
  leaderless.data_parallel_rank = 2;
  leaderless.data_parallel_size = 3;
  leaderless.data_loading = DataLoading::group_leader;
  CHECK(error_of([&] { Loader loader(leaderless); }).find("data_loading=group_leader needs each group's leader") !=
        std::string::npos);
}
