#include "modes/packed_batch_source.hpp"

#include <algorithm>
#include <numeric>

#include "modes/episode_batch_source.hpp"
#include "sampling/rank_balance.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

PackedBatchSource::PackedBatchSource(const EpisodeSplit& split, const EpisodeWindows& windows,
                                     const EpochOrders& orders, Options options,
                                     std::vector<const EpisodeWindows*> stage_windows)
    : split_(split), orders_(orders), options_(options), pieces_(orders.sampler().pieces()) {
  curriculum_ = options_.schedule && options_.schedule->changes_block_size();
  stage_windows.insert(stage_windows.begin(), &windows);
  for (const EpisodeWindows* w : stage_windows) {
    Length& at = lengths_.emplace_back();
    at.block_size = w->S() - 1;
    at.windows = w;
  }
  if (curriculum_) {
    for (const ShapeSchedule::Stage& stage : options_.schedule->stages()) {
      if (std::none_of(lengths_.begin(), lengths_.end(),
                       [&stage](const Length& at) { return at.block_size == stage.block_size; })) {
        throw Error(ErrorKind::config, "sft_packed: no windows of shape_schedule block_size=" +
                                           std::to_string(stage.block_size) + " were given to the packed rows");
      }
    }
  }
  // Documents cut while packed have no lengths per unit: the packer cuts them at each row's.
  cuts_while_packing_ = pieces_ != nullptr && pieces_->numbering() == DocumentPieces::Numbering::tokens;
  if (cuts_while_packing_) return;
  for (Length& at : lengths_) {
    if (pieces_ != nullptr) {
      // Units are piece numbers: a piece of t[first:first+S] has min(S, n - first) - 1
      // positions (pieces of one length: a schedule of lengths cuts while packing).
      at.positions_of.assign(pieces_->size(), 0);
      follows_.assign(pieces_->size(), false);
      const std::uint64_t S = pieces_->S();
      for (std::uint64_t k = 0; k < pieces_->kept().size(); ++k) {
        const std::uint64_t n = split.spans()[pieces_->kept()[k]].length;
        for (std::uint64_t u = pieces_->first_piece(k); u < pieces_->first_piece(k + 1); ++u) {
          const std::uint64_t first = (u - pieces_->first_piece(k)) * (S - 1);
          at.positions_of[u] = static_cast<std::uint32_t>(std::min(S, n - first) - 1);
          follows_[u] = u != pieces_->first_piece(k);
        }
      }
    } else {
      at.positions_of.assign(split.num_episodes(), 0);
      const EpisodeSampler& order = orders.sampler();
      for (std::uint64_t i = 0; i < order.size(); ++i) {
        const std::uint64_t id = order.id_at(i);
        const std::size_t n = at.windows->window(id).size();
        at.positions_of[id] = static_cast<std::uint32_t>(n - 1);  // kept episodes have n >= 2
      }
    }
    if (options_.sequence_multiple > 1) {
      at.occupied = occupied_padded(at.positions_of, static_cast<std::uint32_t>(options_.sequence_multiple));
    }
  }
}

const PackedBatchSource::Length& PackedBatchSource::length(std::size_t block_size) const noexcept {
  for (const Length& at : lengths_) {
    if (at.block_size == block_size) return at;
  }
  return lengths_.front();  // unreachable: every stage length has its windows (open_split)
}

std::uint64_t PackedBatchSource::rows_at_length(std::uint64_t epoch, std::size_t block_size) const {
  const Length& at = length(block_size);
  if (cuts_while_packing_) {
    return pack_pieces(*orders_.get(epoch), *pieces_, {PieceStage{0, static_cast<std::uint32_t>(block_size)}},
                       options_.lookahead, static_cast<std::uint32_t>(options_.sequence_multiple))
        .rows();
  }
  return pack_episodes(*orders_.get(epoch), at.positions_of, static_cast<std::uint32_t>(at.block_size),
                       options_.lookahead, follows_, at.occupied.empty() ? nullptr : &at.occupied)
      .rows();
}

std::size_t PackedBatchSource::block_size_at(std::uint64_t step) const noexcept {
  return curriculum_ ? static_cast<std::size_t>(options_.schedule->block_size_at(step)) : options_.block_size;
}

std::shared_ptr<const PackedEpoch> PackedBatchSource::packing(std::uint64_t epoch, std::uint64_t first_row) const {
  const std::pair<std::uint64_t, std::uint64_t> key{epoch, curriculum_ ? first_row : 0};
  return packings_.get(key, [this, key] { return make_packing(key.first, key.second); });
}

PackedEpoch PackedBatchSource::make_packing(std::uint64_t epoch, std::uint64_t first_row) const {
  // (row of the epoch, its length) where the rows' length may change.
  std::vector<std::pair<std::uint64_t, std::size_t>> starts;
  if (!curriculum_) {
    starts.emplace_back(0, lengths_.front().block_size);
  } else {
    // Row r of the epoch is global row first_row + r: each schedule stage from the one
    // holding first_row on gives the rows from its first one their length.
    for (const ShapeSchedule::Stage& s : options_.schedule->stages()) {
      const std::uint64_t row = s.rows_before > first_row ? s.rows_before - first_row : 0;
      if (s.end_step && options_.schedule->rows_before(*s.end_step) <= first_row) continue;  // ended before
      if (!starts.empty() && starts.back().first == row) starts.pop_back();
      starts.emplace_back(row, static_cast<std::size_t>(s.block_size));
    }
  }
  if (cuts_while_packing_) {
    std::vector<PieceStage> stages;
    for (const auto& [row, block_size] : starts) stages.push_back({row, static_cast<std::uint32_t>(block_size)});
    return pack_pieces(*orders_.get(epoch), *pieces_, stages, options_.lookahead,
                       static_cast<std::uint32_t>(options_.sequence_multiple));
  }
  std::vector<PackStage> stages;
  for (const auto& [row, block_size] : starts) {
    const Length& at = length(block_size);
    stages.push_back(PackStage{row, static_cast<std::uint32_t>(at.block_size), &at.positions_of,
                               at.occupied.empty() ? nullptr : &at.occupied});
  }
  return pack_episodes(*orders_.get(epoch), stages, options_.lookahead, follows_);
}

std::uint32_t PackedBatchSource::unit_positions(const Length& at, const PackedEpoch& packed,
                                                std::uint64_t k) const noexcept {
  // Pieces cut while packed carry their lengths (pack_pieces); the others' are the length's.
  if (cuts_while_packing_) return packed.unit_positions[k];
  return at.positions_of[packed.episodes[k]];
}

std::uint32_t PackedBatchSource::unit_occupies(const Length& at, const PackedEpoch& packed,
                                               std::uint64_t k) const noexcept {
  if (!at.occupied.empty()) return at.occupied[packed.episodes[k]];
  const std::uint32_t positions = unit_positions(at, packed, k);
  const auto multiple = static_cast<std::uint32_t>(options_.sequence_multiple);
  return (positions + multiple - 1) / multiple * multiple;
}

std::uint64_t PackedBatchSource::first_row_of(const SplitPosition& at) const {
  if (!curriculum_) return 0;
  const std::uint64_t before = options_.schedule->rows_before(at.step);
  if (at.row_in_epoch > before) {
    throw Error(ErrorKind::state, "invalid resume state: row_in_epoch=" + std::to_string(at.row_in_epoch) +
                                      " exceeds the " + std::to_string(before) + " global rows before step " +
                                      std::to_string(at.step) + " under the shape_schedule");
  }
  return before - at.row_in_epoch;
}

std::uint64_t PackedBatchSource::next_first_row(std::uint64_t first_row, std::uint64_t rows) const {
  if (!curriculum_) return 0;
  // With drop_last the next epoch's rows follow on; without it the epoch's last batch is
  // completed with fill rows, and the next epoch starts with the next step's rows.
  if (options_.drop_last || rows == 0) return first_row + rows;
  const ShapeSchedule& schedule = *options_.schedule;
  return schedule.rows_before(schedule.step_of_row(first_row + rows - 1) + 1);
}

std::uint64_t PackedBatchSource::batches_in_epoch(std::uint64_t epoch) const {
  if (!curriculum_) return batches_in_epoch_at(SplitPosition{0, epoch, 0, 0});
  // The epoch's first row, from epoch 0's on; its batches are those from the first step
  // that starts in it to the step holding its last row.
  std::uint64_t first_row = 0;
  for (std::uint64_t e = 0; e < epoch; ++e) first_row = next_first_row(first_row, packing(e, first_row)->rows());
  const ShapeSchedule& schedule = *options_.schedule;
  const std::uint64_t rows = packing(epoch, first_row)->rows();
  std::uint64_t first = schedule.step_of_row(first_row);
  if (schedule.rows_before(first) < first_row) ++first;  // that batch belongs to the epoch before
  const std::uint64_t last = schedule.step_of_row(first_row + rows - 1);
  return last >= first ? last - first + 1 : 0;
}

std::uint64_t PackedBatchSource::batches_in_epoch_at(const SplitPosition& at) const {
  if (curriculum_) {
    // The steps from at.step to the one holding the epoch's last row.
    const std::uint64_t first_row = first_row_of(at);
    const std::uint64_t rows = packing(at.epoch, first_row)->rows();
    if (at.row_in_epoch >= rows) return at.batch_in_epoch;
    return at.batch_in_epoch + options_.schedule->step_of_row(first_row + rows - 1) + 1 - at.step;
  }
  const std::uint64_t rows = packing(at.epoch)->rows();
  const std::uint64_t global = global_batch_at(at.step);
  const std::uint64_t left = rows > at.row_in_epoch ? rows - at.row_in_epoch : 0;
  return at.batch_in_epoch + (left + global - 1) / global;
}

std::uint64_t PackedBatchSource::global_batch_at(std::uint64_t step) const noexcept {
  return options_.schedule ? options_.schedule->global_batch_at(step) : options_.batch_size * options_.world_size;
}

std::uint64_t PackedBatchSource::samples_in_epoch(std::uint64_t epoch) const {
  // Every unit of the order is packed once, whatever the rows' lengths (documents cut while
  // packed: every document, in as many pieces as its rows' lengths make).
  return orders_.get(epoch)->size();
}

void PackedBatchSource::seek(const SplitPosition& at) {
  MutexLock lock(mutex_);
  next_ = at;
}

BatchPlan PackedBatchSource::plan(std::uint64_t step) {
  MutexLock lock(mutex_);
  if (step != next_.step) {
    throw Error(ErrorKind::pipeline, "packed batches must be planned in order: expected step " +
                                         std::to_string(next_.step) + ", got " + std::to_string(step));
  }
  BatchPlan p;
  p.step = step;
  p.epoch = next_.epoch;
  p.batch_in_epoch = next_.batch_in_epoch;
  auto packed_plan = std::make_shared<PackedPlan>();
  packed_plan->row_in_epoch = next_.row_in_epoch;
  packed_plan->block_size = block_size_at(step);
  // Take the global batch's rows from the stream of epochs: all of them with drop_last
  // (continuing into the next epochs as needed), else up to the end of this epoch.
  std::uint64_t need = global_batch_at(step);
  packed_plan->rank_rows = need / options_.world_size;
  std::uint64_t epoch = next_.epoch, row = next_.row_in_epoch;
  std::uint64_t first_row = first_row_of(next_);  // the global row where `epoch` starts
  const std::uint64_t batch_first_row = first_row;
  std::uint64_t next_epoch_first_row = 0;  // where p.epoch + 1 starts, once known
  bool next_known = false;
  while (need > 0) {
    auto packed = packing(epoch, first_row);
    const std::uint64_t rows = packed->rows();
    const std::uint64_t take = std::min(need, rows - std::min(row, rows));
    if (take > 0) packed_plan->runs.push_back({std::move(packed), row, take});
    need -= take;
    row += take;
    if (row >= rows) {
      ++epoch;
      row = 0;
      first_row = next_first_row(first_row, rows);
      if (!next_known) next_epoch_first_row = first_row;
      next_known = true;
      if (!options_.drop_last) break;
    }
  }
  if (!next_known) next_epoch_first_row = next_first_row(batch_first_row, packing(p.epoch, batch_first_row)->rows());
  if (curriculum_) check_fits(*packed_plan, step);
  packed_plan->next_epoch = epoch;
  packed_plan->next_row_in_epoch = row;
  if (options_.balance_attention && options_.world_size > 1) balance(*packed_plan);
  p.mode_data = std::move(packed_plan);
  // The next epoch's order and packing are made in the background, ready before the
  // sampler reaches them (an epoch boundary would otherwise stall the trainer).
  const std::pair<std::uint64_t, std::uint64_t> ahead{p.epoch + 1, next_epoch_first_row};
  packings_.prefetch(ahead, [this, ahead] { return make_packing(ahead.first, ahead.second); });
  next_.step = step + 1;
  next_.batch_in_epoch = epoch == next_.epoch ? next_.batch_in_epoch + 1 : 0;
  next_.epoch = epoch;
  next_.row_in_epoch = row;
  return p;
}

void PackedBatchSource::check_fits(const PackedPlan& plan, std::uint64_t step) const {
  const Length& at = length(static_cast<std::size_t>(plan.block_size));
  for (const PackedPlan::Run& run : plan.runs) {
    const PackedEpoch& packed = *run.packing;
    for (std::uint64_t row = run.first_row; row < run.first_row + run.rows; ++row) {
      std::uint64_t used = 0;
      for (std::uint64_t k = packed.row_begin[row]; k < packed.row_begin[row + 1]; ++k)
        used += unit_occupies(at, packed, k);
      if (used > at.block_size) {
        throw Error(ErrorKind::pipeline, "packed row " + std::to_string(row) + " holds " + std::to_string(used) +
                                             " positions, more than block_size " + std::to_string(at.block_size) +
                                             " of step " + std::to_string(step) +
                                             " (its epoch was packed for other lengths)");
      }
    }
  }
}

void PackedBatchSource::balance(PackedPlan& plan) const {
  const std::uint64_t B = plan.rank_rows, W = options_.world_size;
  // Each row's attention cost, Σ n² over its episodes; fill rows (past the runs) cost 0.
  std::vector<std::uint64_t> costs(B * W, 0);
  const Length& at = length(static_cast<std::size_t>(plan.block_size));
  std::size_t g = 0;
  for (const PackedPlan::Run& run : plan.runs) {
    const PackedEpoch& packed = *run.packing;
    for (std::uint64_t row = run.first_row; row < run.first_row + run.rows; ++row, ++g) {
      for (std::uint64_t k = packed.row_begin[row]; k < packed.row_begin[row + 1]; ++k) {
        const std::uint64_t n = unit_positions(at, packed, k);
        costs[g] += n * n;
      }
    }
  }
  std::vector<std::uint32_t> sliced(costs.size());
  std::iota(sliced.begin(), sliced.end(), 0u);
  const std::vector<std::uint32_t> balanced = balance_rows(costs, W, B);
  const auto mine = balanced.begin() + static_cast<std::ptrdiff_t>(options_.rank * B);
  plan.rows.assign(mine, mine + static_cast<std::ptrdiff_t>(B));
  plan.sliced_max = rank_costs(costs, sliced, W, B).max;
  const RankCosts after = rank_costs(costs, balanced, W, B);
  plan.balanced_max = after.max;
  plan.mean = after.mean;
}

void PackedBatchSource::decode(const BatchPlan& batch_plan, detail::BatchSlot& slot) const {
  const BatchPlan& plan = batch_plan;
  const PackedPlan& packed_plan = batch_plan.mode_data_as<PackedPlan>();
  const auto rows = static_cast<std::size_t>(packed_plan.rank_rows);
  const auto T = static_cast<std::size_t>(packed_plan.block_size);
  const Length& at_length = length(T);
  const EpisodeWindows& windows = *at_length.windows;
  const bool context_parallel = options_.sequence_multiple > 1 || options_.split_ranks > 1;
  // Under a sequence-length schedule the rows are the step's length (this rank's share of it
  // with context_parallel_split); else the slot's.
  slot.begin_batch(plan.step, plan.epoch, plan.batch_in_epoch, 0, rows,  // real rows counted below
                   curriculum_ ? T / options_.split_ranks : 0);
  slot.row_in_epoch = packed_plan.row_in_epoch;
  slot.next_epoch = packed_plan.next_epoch;
  slot.next_row_in_epoch = packed_plan.next_row_in_epoch;
  slot.global_rows = packed_plan.rows;
  slot.sliced_cost_max = packed_plan.sliced_max;
  slot.balanced_cost_max = packed_plan.balanced_max;
  slot.cost_mean = packed_plan.mean;
  // This rank's rows are [rank*B, (rank+1)*B) of the global batch's rows, or those the
  // balance gave it (in increasing order too).
  std::size_t run = 0;
  std::uint64_t run_start = 0;  // the batch row where packed_plan.runs[run] starts
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint64_t batch_row = packed_plan.rows.empty() ? options_.rank * rows + r : packed_plan.rows[r];
    while (run < packed_plan.runs.size() && batch_row >= run_start + packed_plan.runs[run].rows) {
      run_start += packed_plan.runs[run].rows;
      ++run;
    }
    std::size_t column = 0;
    slot.episode_ids[r] = -1;
    const PackedEpoch* packed = nullptr;  // null: a fill row
    std::uint64_t global_row = 0;
    if (run < packed_plan.runs.size()) {
      packed = packed_plan.runs[run].packing.get();
      global_row = packed_plan.runs[run].first_row + (batch_row - run_start);
      ++slot.real_rows;
    }
    if (context_parallel) {
      slot.real_positions += decode_padded_row(at_length, packed, global_row, r, slot);
      continue;
    }
    for (std::uint64_t k = packed != nullptr ? packed->row_begin[global_row] : 0,
                       end = packed != nullptr ? packed->row_begin[global_row + 1] : 0;
         k < end; ++k) {
      const EpisodeWindows::Kept kept = windows.kept(packed->episodes[k], pieces_);
      const std::uint64_t episode = kept.episode;
      const std::size_t positions = kept.window.size() - 1;
      const std::size_t at = r * T + column;
      if (k == packed->row_begin[global_row]) slot.episode_ids[r] = static_cast<std::int64_t>(episode);
      NextTokenFields fields;
      fields.x = slot.x.data() + at;
      fields.weights = slot.token_weights.data() + at;
      fields.labels = slot.labels.data() + at;
      fields.positions = slot.position_ids.data() + at;
      windows.write_targets(kept.data, kept.window, positions, options_.with_mask, fields, options_.ignore_index);
      slot.add_sequence(positions);
      slot.segments[slot.segment_count++] = {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(column),
                                             static_cast<std::uint32_t>(positions), static_cast<std::int64_t>(episode)};
      column += positions;
    }
    slot.real_positions += column;
    finish_row_padding(slot, r, T, column, options_.pad_token_id, options_.ignore_index);
  }
}

std::size_t PackedBatchSource::decode_padded_row(const Length& at_length, const PackedEpoch* packed, std::uint64_t row,
                                                 std::size_t r, detail::BatchSlot& slot) const {
  const std::size_t T = at_length.block_size;
  const EpisodeWindows& windows = *at_length.windows;
  const std::size_t multiple = options_.sequence_multiple;
  const std::size_t cp = options_.split_ranks;  // 1: the whole rows
  const std::size_t rank = options_.split_rank;
  std::size_t column = 0;  // in the whole row, where the next sequence's padded span starts
  std::size_t real = 0;
  // A sequence's padded span [column, column + padded) of the whole row: all of it, or this
  // rank's chunks rank and 2·cp - 1 - rank of padded / (2·cp) positions, side by side from
  // column / cp of its share of the row.
  const auto place = [&](const EpisodeWindows::Kept* kept, std::size_t n, std::size_t padded) {
    const std::size_t at = r * (T / cp) + column / cp;
    if (cp == 1) return write_sequence_part(windows, kept, n, 0, padded, at, slot);
    const std::size_t chunk = padded / (2 * cp);
    write_sequence_part(windows, kept, n, rank * chunk, chunk, at, slot);
    write_sequence_part(windows, kept, n, (2 * cp - 1 - rank) * chunk, chunk, at + chunk, slot);
  };
  const auto padded_of = [multiple](std::size_t positions) { return (positions + multiple - 1) / multiple * multiple; };
  // A rank's chunks are too short for the hardware prefetcher to follow: the next
  // episode's are hinted while this one is written.
  const auto hint_chunks = [&](const EpisodeWindows::Kept& kept) {
    const std::size_t n = kept.window.size() - 1;
    const std::size_t chunk = padded_of(n) / (2 * cp);
    for (const std::size_t c : {rank, 2 * cp - 1 - rank}) {
      if (c * chunk < n) {
        windows.prefetch_range(kept.data, kept.window, c * chunk, std::min(chunk, n - c * chunk), options_.with_mask);
      }
    }
  };
  const std::uint64_t begin = packed != nullptr ? packed->row_begin[row] : 0;
  const std::uint64_t end = packed != nullptr ? packed->row_begin[row + 1] : 0;
  EpisodeWindows::Kept next;
  if (begin < end) next = windows.kept(packed->episodes[begin], pieces_);
  for (std::uint64_t k = begin; k < end; ++k) {
    const EpisodeWindows::Kept kept = next;
    if (k + 2 < end) split_.prefetch_record(EpisodeWindows::episode_of(packed->episodes[k + 2], pieces_));
    if (k + 1 < end) {
      next = windows.kept(packed->episodes[k + 1], pieces_);
      if (cp > 1) hint_chunks(next);
    }
    const std::size_t positions = kept.window.size() - 1;
    const std::size_t padded = padded_of(positions);
    if (k == begin) slot.episode_ids[r] = static_cast<std::int64_t>(kept.episode);
    place(&kept, positions, padded);
    slot.add_sequence(positions, padded);
    slot.segments[slot.segment_count++] = {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(column),
                                           static_cast<std::uint32_t>(positions),
                                           static_cast<std::int64_t>(kept.episode)};
    column += padded;
    real += positions;
  }
  if (column < T) {  // the row's trailing padding: a sequence of its own, a multiple of 2·cp too
    place(nullptr, 0, T - column);
    slot.add_sequence(T - column);
  }
  return real;
}

void PackedBatchSource::write_sequence_part(const EpisodeWindows& windows, const EpisodeWindows::Kept* kept,
                                            std::size_t real, std::size_t first, std::size_t count, std::size_t at,
                                            detail::BatchSlot& slot) const noexcept {
  NextTokenFields fields;
  fields.x = slot.x.data() + at;
  fields.weights = slot.token_weights.data() + at;
  fields.labels = slot.labels.data() + at;
  fields.positions = slot.position_ids.data() + at;
  const std::size_t end = first + count;
  std::size_t i = first;
  if (kept != nullptr && i < real) {
    const std::size_t n = std::min(end, real) - i;
    windows.write_targets(kept->data, kept->window, i, n, options_.with_mask, fields, options_.ignore_index);
    i += n;
  }
  if (i == end) return;
  const std::size_t d = i - first;
  NextTokenFields padding;
  padding.x = fields.x + d;
  padding.weights = fields.weights + d;
  padding.labels = fields.labels + d;
  padding.positions = fields.positions + d;
  write_padding_run(end - i, padding, options_.pad_token_id, options_.ignore_index, static_cast<std::int32_t>(i));
}

}  // namespace tokenfeed
