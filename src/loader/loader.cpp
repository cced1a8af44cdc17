// Loader: the wiring of a split set (one dataset, or a mixture) with the trainer's calls:
// the Loader's API over SplitSet and LoaderSplit. What a split does per mode is in
// dataset_split / mixture, how it opens in open_split, its audit events in audit_trail, the
// state's checks in resume_state, the memory bound in memory_budget.
#include "tokenfeed/loader.hpp"

#include <map>
#include <mutex>
#include <optional>

#include "splits/loader_split.hpp"
#include "mixture/mixture.hpp"
#include "launch/parallel_layout.hpp"
#include "splits/resolved_options.hpp"
#include "splits/resume_state.hpp"
#include "splits/single_dataset.hpp"
#include "splits/split_set.hpp"
#include "tokenfeed/error.hpp"
#include "util/filesystem_errors.hpp"

namespace tokenfeed {
namespace {

// What a Loader reads: the split set, and the same object as a Mixture when it is one
// (what only a mixture does: its sources' epochs, the trainer's weight changes).
struct OpenedSet {
  std::unique_ptr<SplitSet> data;
  Mixture* mixture = nullptr;  // data, when it is a mixture
};

// The split set `config` describes: a mixture, or one dataset settled by resolve_options;
// what its pipelines need of the settled options goes to `gate`.
OpenedSet open_split_set(Config config, PipelineGate& gate) {
  ResolvedOptions settled = resolve_options(std::move(config));
  gate.trainer_may_spin = settled.trainer_may_spin;
  if (settled.mixture()) {
    auto mixture = std::make_unique<Mixture>(std::move(settled.config), std::move(settled.decode_threads_source),
                                             std::move(settled.layout), std::move(settled.rank_source));
    Mixture* const typed = mixture.get();
    return OpenedSet{std::move(mixture), typed};
  }
  return OpenedSet{std::make_unique<SingleDataset>(std::move(settled)), nullptr};
}

// A weight call on a loader of one dataset.
[[noreturn]] void not_a_mixture(const std::string& call) {
  throw Error(ErrorKind::config, call +
                                     ": the loader reads one dataset; weights are set for a mixture's sources "
                                     "(<mixture> in the config)");
}

// data_loading=group_leader: a rank that is not its group's leader holds no pipeline; it
// receives the leader's batches (tokenfeed.torch.broadcast_batch) and saves no state of
// its own. `what` names the call refused.
void refuse_on_follower(const SplitSet& data, const std::string& what) {
  const ParallelLayout& layout = data.layout();
  if (data.config().data_loading != DataLoading::group_leader || layout.data_leader) return;
  throw Error(ErrorKind::usage,
              what + ": data_loading=group_leader and rank " + std::to_string(layout.rank) +
                  " is not its data-parallel group's leader (rank " + std::to_string(layout.leader_rank) +
                  " decodes for data-parallel rank " + std::to_string(layout.data_parallel_rank) +
                  "); receive the leader's batches (Python: tokenfeed.torch.broadcast_batch) and save the state of a "
                  "leader, whose state is every rank's (rank 0 leads)");
}

DatasetVocabulary vocabulary_of(const DatasetMetadata& m) {
  return DatasetVocabulary{m.vocab_size, m.eot_token_id, m.eos_token_id, m.special_tokens};
}

}  // namespace

struct Loader::Impl {
  PipelineGate gate;  // a pipeline's start against a concurrent stop(); opening sets it
  std::unique_ptr<SplitSet> data;
  Mixture* mixture = nullptr;  // data, when it is a mixture; null for one dataset

  explicit Impl(Config c) {
    OpenedSet opened = open_split_set(std::move(c), gate);
    data = std::move(opened.data);
    mixture = opened.mixture;
  }
  const Config& config() const noexcept { return data->config(); }

  void stop_pipelines() {
    MutexLock lock(gate.mutex);
    gate.stopped.store(true, std::memory_order_release);
    for (const auto& [name, split] : data->splits()) split->stop_pipeline(gate);
  }
};

// A filesystem error while opening (a symbolic link loop in a dataset) is tokenfeed's.
Loader::Loader(Config config) try : impl_(std::make_unique<Impl>(std::move(config))) {
} catch (const std::filesystem::filesystem_error& e) {
  throw io_error_of(e);
}

Loader::~Loader() {
  if (!impl_) return;
  impl_->stop_pipelines();
  for (const auto& [name, split] : impl_->data->splits()) split->reset_pipeline();  // waits for the stages
}

Batch Loader::get_batch(std::string_view split_name) { return *next_batch(split_name, std::nullopt); }

std::optional<Batch> Loader::try_get_batch(std::string_view split, std::chrono::microseconds timeout) {
  return next_batch(split, std::chrono::steady_clock::now() + timeout);
}

std::optional<Batch> Loader::next_batch(std::string_view split_name,
                                        std::optional<std::chrono::steady_clock::time_point> deadline) {
  SplitSet& data = *impl_->data;
  refuse_on_follower(data, "get_batch");
  return data.find(split_name).take(data.config(), impl_->gate, data.audit(), deadline);
}

std::string Loader::save_state() const {
  refuse_on_follower(*impl_->data, "save_state");
  ResumeState state;
  state.fingerprint = impl_->data->fingerprint();
  state.order = impl_->data->order_fields();
  for (const auto& [name, split] : impl_->data->splits()) state.splits[name] = split->next_position();
  if (impl_->mixture != nullptr) state.weight_changes = impl_->mixture->weight_changes();
  return serialize_resume_state(state);
}

void Loader::load_state(std::string_view text) {
  SplitSet& data = *impl_->data;
  const ResumeState state = parse_resume_state(text);
  // A loader without weight changes takes the state's: checked with them, committed last.
  // A single dataset's state has no changes; one that has them is a mixture's, which the
  // fingerprint check refuses.
  Mixture* const mixture = impl_->mixture;
  std::optional<PreparedWeights> adopted =
      mixture != nullptr ? mixture->adopt_state_changes(state.weight_changes) : std::nullopt;
  check_state_matches(state, adopted ? adopted->fingerprint : data.fingerprint(),
                      adopted ? adopted->order : data.order_fields(), data.config(),
                      adopted ? adopted->earlier_fingerprints : data.earlier_fingerprints());
  // Where each split resumes, all checked before any split moves: a refused state leaves
  // the loader unchanged.
  std::map<std::string, SplitPosition, std::less<>> positions;
  for (const auto& [name, saved] : state.splits) {
    const auto it = data.splits().find(name);
    if (it == data.splits().end()) {
      throw Error(ErrorKind::state, "resume state names split '" + name + "', which this dataset lacks");
    }
    check_resume_step(name, saved, data.config());
    positions[name] = it->second->resume_position(saved);
  }
  if (adopted) mixture->commit_weights(std::move(*adopted), impl_->gate);
  MutexLock lock(impl_->gate.mutex);
  for (const auto& [name, split] : data.splits()) {
    const auto it = positions.find(name);
    split->restore(it == positions.end() ? SplitPosition{} : it->second, impl_->gate);
  }
}

void Loader::stop() noexcept { impl_->stop_pipelines(); }

const Config& Loader::config() const noexcept { return impl_->config(); }

const ParallelLayout& Loader::parallel_layout() const noexcept { return impl_->data->layout(); }

std::vector<std::vector<std::int64_t>> Loader::data_parallel_groups() const {
  if (impl_->data->layout().leader_rank < 0) return {};  // coordinates the layout does not give
  return tokenfeed::data_parallel_groups(impl_->config());
}

bool Loader::has_split(std::string_view split) const noexcept {
  return impl_->data->splits().find(split) != impl_->data->splits().end();
}

SplitInfo Loader::split_info(std::string_view name) const { return impl_->data->find(name).info(); }

StepShape Loader::batch_shape(std::string_view name, std::uint64_t step) const {
  return impl_->data->find(name).step_shape(step);
}

DatasetVocabulary Loader::vocabulary() const { return vocabulary_of(impl_->data->metadata()); }

TokenIds Loader::token_ids() const {
  const Config& c = impl_->config();
  const DatasetMetadata& m = impl_->data->metadata();
  return TokenIds{c.pad_token_id, end_of_text_id(c.eos_token_id, m), m.eot_token_id,
                  c.eos_token_id ? c.eos_token_id : m.eos_token_id};
}

DatasetVocabulary read_dataset_vocabulary(const std::filesystem::path& dataset_dir) {
  return vocabulary_of(read_dataset_metadata(dataset_dir));
}

SplitStats Loader::split_stats(std::string_view name) const { return impl_->data->find(name).stats(); }

std::string Loader::fingerprint() const { return impl_->data->fingerprint(); }

std::vector<std::string> Loader::source_names() const {
  std::vector<std::string> names;
  for (const MixtureSource& source : impl_->config().mixture) names.push_back(source.name);
  return names;
}

std::optional<std::uint64_t> Loader::source_epoch_after(std::string_view split, std::size_t source,
                                                        std::uint64_t steps) const {
  if (impl_->mixture == nullptr) {
    throw Error(ErrorKind::usage, "source_epoch_after: the loader reads one dataset, not a mixture");
  }
  return impl_->mixture->source_epoch_after(split, source, steps);
}

void Loader::set_mixture_weights(const std::map<std::string, std::string>& weights, std::uint64_t at_step) {
  if (impl_->mixture == nullptr) not_a_mixture("set_mixture_weights");
  impl_->mixture->set_mixture_weights(weights, at_step, impl_->gate);
}

std::uint64_t Loader::earliest_weight_step() const {
  if (impl_->mixture == nullptr) not_a_mixture("earliest_weight_step");
  return impl_->mixture->earliest_weight_step();
}

}  // namespace tokenfeed
