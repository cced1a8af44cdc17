// RL batches: groups of sampled, scored completions become packed batches under the one
// batch contract (include/tokenfeed/batch.hpp), with group-relative advantages as the
// token weights, so that one weighted cross-entropy trains pretraining, SFT and RL.
//
//   tokenfeed::RLPrompts prompts(config, block_size);            // the prompt dataset
//   tokenfeed::GroupBatcher batcher({.batch_size = 8, .block_size = 512, .group_size = 4});
//   tokenfeed::Batch batch = batcher.next_batch([&](std::uint64_t i) {
//     tokenfeed::Prompt p = prompts.at(i);
//     tokenfeed::ScoredGroup g = my_sample_and_score(p.tokens);  // completions + rewards
//     g.prompt = std::move(p.tokens);
//     g.episode = p.episode;
//     return g;
//   });
//   std::string state = batcher.save_state();   // later: batcher.load_state(state)
//
// What a batch holds. Each completion c of a group, after its prompt p, is one sequence
// s = p ++ c (cut from the completion's end to block_size + 1 tokens when longer, counted
// in truncated_sequences). Its n - 1 input positions hold s[0:n-1]; labels are s[1:n]
// (the shifted tokens, as in every mode) on the completion's label positions (position
// i >= |p| - 1) and ignore_index on the prompt's; token_weights are the completion's
// advantage on its label positions and 0 on the prompt's and on padding; position_ids
// restart at 0 per sequence; cu_seqlens bound every sequence (a row's trailing padding is
// a sequence of its own, as in sft_packed). Sequences are packed several per row, never
// split across rows: a group goes into the current batch when every one of its sequences
// fits some row (first fit, in order), else the batch is complete and the group opens the
// next one. The RL fields of the batch (empty in the other modes):
//   log_probs  float32, B x T: the sampler's per-token log-probabilities aligned to labels
//              (0 elsewhere); empty when no group of the batch gave them
//   rewards    float32, one per sequence of cu_seqlens (0 for padding sequences)
//   group_ids  int64, one per sequence of cu_seqlens (-1 for padding sequences)
// and segments() lists the sequences (row, column, positions, the prompt's episode id).
//
// Advantages: over a group's rewards r with mean m and population standard deviation sd,
// grpo gives (r_i - m) / (sd + eps) and mean_only gives r_i - m, computed in double. A
// group with sd <= eps (its rewards do not vary) teaches nothing and is dropped;
// max_attempts consecutive dropped groups is Error(pipeline) naming the prompts tried and
// eps (exactly), unless skip_failed_prompts, which logs a warning naming them, counts the
// run in failed_runs and pulls on. After the error a trainer goes on by constructing the
// batcher with skip_failed_prompts and loading its last state: the same prompts are pulled
// again and this time passed over.
//
// What a group must hold (else Error(usage) naming its pull index, and the completion and
// value at fault): every token id (prompt and completions) in [0, vocab_size) (>= 0 when
// vocab_size is 0: unknown), so that an id the embedding cannot look up never reaches a
// batch; finite rewards and advantages that float32, the batch's type, can hold.
//
// Determinism and resume: the batches are a pure function of the groups pulled, in pull
// order. Groups are pulled by index 0, 1, 2, ...; save_state records the index of the
// first group not yet in an emitted batch (a batch is emitted when a pulled group does
// not fit, so that group and the dropped groups before it are pulled again after
// load_state) and the metrics of the emitted batches. A resumed run therefore asks for
// the same prompts in the same order, and with a deterministic sampler gets the same
// batches and metrics as a run that never stopped.
//
// Thread-safety: GroupBatcher is not thread-safe (one trainer thread); its Batches follow
// Batch's rules. RLPrompts is immutable after construction: at() may be called from any
// thread (a prefetching sampler thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/export.hpp"

namespace tokenfeed {

enum class Advantage {
  grpo,       // (r - mean) / (std + eps)
  mean_only,  // r - mean
};

TOKENFEED_API const char* to_string(Advantage advantage) noexcept;
// "grpo" or "mean_only"; throws Error(config) naming the value otherwise.
TOKENFEED_API Advantage parse_advantage(std::string_view text);

// One prompt and its sampled, scored completions.
struct ScoredGroup {
  std::vector<std::int64_t> prompt;                    // >= 1 token
  std::vector<std::vector<std::int64_t>> completions;  // each >= 1 token
  std::vector<std::vector<float>> log_probs;           // empty, or one per completion, of its length
  std::vector<double> rewards;                         // one per completion, finite
  std::int64_t group_id = -1;                          // -1: the pull index
  std::int64_t episode = -1;                           // the prompt's episode id, if any (segments)
};

struct GroupBatcherOptions {
  std::size_t batch_size = 0;  // rows per batch, > 0
  std::size_t block_size = 0;  // input positions per row, > 0
  std::size_t group_size = 0;  // completions per group; 0 accepts any count >= 2; never 1
  double eps = 1e-6;           // >= 0: the zero-variance threshold and grpo's denominator term
  Advantage advantage = Advantage::grpo;
  std::uint64_t max_attempts = 64;   // consecutive dropped groups before an error, > 0
  bool skip_failed_prompts = false;  // true: max_attempts consecutive drops are a warning, not an error
  std::uint64_t vocab_size = 0;      // token ids must be below it; 0: unknown (ids only checked >= 0)
  std::int64_t pad_token_id = 0;
  std::int64_t ignore_index = -100;
  // A batch-size warmup and sequence-length curriculum by batch (step k is the k-th batch
  // emitted): the Loader's stages (config.hpp's ShapeStage; RLPrompts::config() carries a
  // config's), batch k having its stage's global_batch_size / data_parallel_size rows of its
  // block_size positions (a stage without one: batch_size x data_parallel_size, block_size).
  // Empty: batch_size x block_size at every step. Groups are still placed in pull order; a
  // group left over from one batch opens the next, cut again for its block size. Every
  // prompt must leave room for a completion in the shortest block size.
  std::vector<ShapeStage> shape_schedule;
  std::size_t data_parallel_size = 1;  // what divides a stage's global_batch_size, > 0
};

// Counts over some batches: one batch (GroupBatcher::batch_metrics) or all emitted ones
// (total_metrics). A group's pull, and the pulls of the dropped groups just before it,
// count in the batch that takes the group.
struct RLMetrics {
  std::uint64_t batches = 0;
  std::uint64_t attempts = 0;         // groups pulled
  std::uint64_t zero_var_groups = 0;  // dropped: reward std <= eps
  std::uint64_t valid_groups = 0;     // placed in the batches
  std::uint64_t sequences = 0;        // completions placed
  std::uint64_t truncated_sequences = 0;
  std::uint64_t failed_runs = 0;  // runs of max_attempts drops passed over (skip_failed_prompts)
  double reward_sum = 0;          // over the placed sequences
  double advantage_sum = 0;
  double abs_advantage_sum = 0;

  double mean_reward() const noexcept { return sequences ? reward_sum / static_cast<double>(sequences) : 0.0; }
  double mean_advantage() const noexcept { return sequences ? advantage_sum / static_cast<double>(sequences) : 0.0; }
  double mean_abs_advantage() const noexcept {
    return sequences ? abs_advantage_sum / static_cast<double>(sequences) : 0.0;
  }
  double attempts_per_batch() const noexcept {
    return batches ? static_cast<double>(attempts) / static_cast<double>(batches) : 0.0;
  }
  RLMetrics& operator+=(const RLMetrics& other) noexcept {
    batches += other.batches;
    attempts += other.attempts;
    zero_var_groups += other.zero_var_groups;
    valid_groups += other.valid_groups;
    sequences += other.sequences;
    truncated_sequences += other.truncated_sequences;
    failed_runs += other.failed_runs;
    reward_sum += other.reward_sum;
    advantage_sum += other.advantage_sum;
    abs_advantage_sum += other.abs_advantage_sum;
    return *this;
  }
};

class TOKENFEED_API GroupBatcher {
 public:
  // Returns the group of pull index `index`. May throw: the exception reaches the caller
  // of next_batch unchanged.
  using Pull = std::function<ScoredGroup(std::uint64_t index)>;

  // Throws Error(config) for options out of range.
  explicit GroupBatcher(GroupBatcherOptions options);
  ~GroupBatcher();
  GroupBatcher(const GroupBatcher&) = delete;
  GroupBatcher& operator=(const GroupBatcher&) = delete;

  // The next batch, pulling groups until one does not fit. Throws Error(usage) for a
  // malformed group (naming its index and what is wrong) or a group that fits no empty
  // batch, Error(pipeline) after max_attempts consecutive dropped groups (unless
  // skip_failed_prompts), Error(usage)
  // when kMaxHeldBatches batches are held; and rethrows what `pull` threw. After a throw
  // the batcher is where the last emitted batch left it (the next call pulls again from
  // cursor()).
  Batch next_batch(const Pull& pull);

  static constexpr std::size_t kMaxHeldBatches = 8;

  const RLMetrics& batch_metrics() const noexcept;  // of the last emitted batch
  const RLMetrics& total_metrics() const noexcept;  // of every emitted batch
  // The pull index a resumed run starts from (see the top of this file).
  std::uint64_t cursor() const noexcept;
  const GroupBatcherOptions& options() const noexcept;

  // {"format": "tokenfeed-rl-state", "version": 1, "cursor": N, "metrics": {...}}
  std::string save_state() const;
  // Throws Error(state) naming the field for a malformed text; the batcher is unchanged then.
  void load_state(std::string_view state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A prompt: episode `episode` of the prompt dataset, drawn at pull index `index`.
struct Prompt {
  std::uint64_t index = 0;
  std::uint64_t epoch = 0;  // 0 in random mode
  std::int64_t episode = 0;
  std::vector<std::int64_t> tokens;
};

// The prompts of an episode-indexed dataset (each episode one prompt's token ids), in the
// loader's order: config.dataset_dir's train/ split, epoch order with epoch_seed and the
// train split's epoch_shuffle (or random mode), this rank's slice of rank/world_size (index i is
// position i*world_size + rank of the stream, the remainder of an epoch smaller than
// world_size skipped), episodes shorter than episode_min_tokens or longer than
// `max_tokens` (and than any block_size of the config's shape_schedule, whose stages are
// the GroupBatcher's to follow: GroupBatcherOptions::shape_schedule) never drawn. Prompt i
// is a pure function of i.
class TOKENFEED_API RLPrompts {
 public:
  // Throws Error as the Loader does for a bad config or dataset, and Error(config) when no
  // episode is left or fewer than world_size are.
  RLPrompts(Config config, std::size_t max_tokens);
  ~RLPrompts();
  RLPrompts(const RLPrompts&) = delete;
  RLPrompts& operator=(const RLPrompts&) = delete;

  Prompt at(std::uint64_t index) const;
  std::uint64_t size() const noexcept;       // prompts that may be drawn
  std::uint64_t per_epoch() const noexcept;  // pull indices per epoch on this rank (0: random mode)
  // The pad id, as the loader settles it: the config's, else the metadata's pad_token_id,
  // eot_token_id, eos_token_id; else 0.
  std::int64_t pad_token_id() const noexcept;
  // The vocabulary size dataset_metadata.json records (GroupBatcherOptions::vocab_size); 0
  // when it records none.
  std::uint64_t vocab_size() const noexcept;
  // A hash of the dataset and the order-determining settings (hex), for states.
  std::string fingerprint() const;
  const Config& config() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenfeed
