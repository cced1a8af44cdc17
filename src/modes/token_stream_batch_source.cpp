#include "modes/token_stream_batch_source.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

std::uint64_t samples_in_file(std::uint64_t tokens, std::size_t block_size, SamplingMode mode) {
  const std::uint64_t window = block_size + 1;
  if (mode == SamplingMode::epoch) return tokens / window;
  return tokens >= window ? tokens - window + 1 : 0;
}

}  // namespace

std::uint64_t TokenStreamBatchSource::sample_count(const TokenStreamSplit& split, std::size_t block_size,
                                                   SamplingMode mode) {
  if (split.range_starts() != nullptr) return samples_in_file(split.total_tokens(), block_size, mode);
  std::uint64_t total = 0;
  for (const StreamFile& f : split.files()) total += samples_in_file(f.tokens, block_size, mode);
  return total;
}

void TokenStreamBatchSource::check_document_boundaries(const TokenStreamSplit& split,
                                                       const std::optional<std::int64_t>& eos_token_id,
                                                       const std::string& where_eos) {
  if (eos_token_id) return;
  for (const StreamFile& f : split.files()) {
    if (f.document_starts) continue;
    const bool some_indexed = std::any_of(split.files().begin(), split.files().end(),
                                          [](const StreamFile& g) { return g.document_starts != nullptr; });
    throw Error(ErrorKind::config, "document_aware=true needs an end-of-text id for '" + f.map.path().string() +
                                       "', which has no index of its documents" +
                                       (some_indexed ? " (other files of the split have one: a Megatron .idx)" : "") +
                                       ": set eos_token_id in the config or in " + where_eos);
  }
}

TokenStreamBatchSource::TokenStreamBatchSource(const TokenStreamSplit& split, const EpochOrders& orders,
                                               Options options)
    : SampledRowSource(orders), split_(split), options_(std::move(options)), ranges_(split.range_starts() != nullptr) {
  std::vector<std::size_t> blocks{options_.block_size};
  std::vector<std::size_t> more = options_.block_sizes;
  if (options_.unit_tokens > 0) more.push_back(options_.unit_tokens - 1);  // the units' windows
  for (const std::size_t b : more) {
    if (std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);
  }
  for (const std::size_t block : blocks) {
    FirstSamples& table = first_samples_.emplace_back();
    table.block_size = block;
    table.total = sample_count(split, block, options_.mode);
    if (ranges_) {  // one stream: the concatenation of the split's runs of documents
      table.first.push_back(0);
      continue;
    }
    std::uint64_t next = 0;
    for (const StreamFile& f : split.files()) {
      table.first.push_back(next);
      next += samples_in_file(f.tokens, block, options_.mode);
    }
  }
}

std::uint64_t TokenStreamBatchSource::ids_at_length(std::size_t cols) const noexcept {
  for (const FirstSamples& table : first_samples_) {
    if (table.block_size == cols) return table.total;
  }
  return first_samples_.front().total;  // excluded (REQUIRES)
}

const std::vector<std::uint64_t>& TokenStreamBatchSource::first_samples(std::size_t block_size) const noexcept {
  for (const FirstSamples& table : first_samples_) {
    if (table.block_size == block_size) return table.first;
  }
  return first_samples_.front().first;  // excluded: a batch has one of the block sizes given
}

TokenStreamBatchSource::Location TokenStreamBatchSource::locate(std::uint64_t id,
                                                                std::size_t block_size) const noexcept {
  // The last file whose first sample is <= id and that has samples: upper_bound lands past
  // empty files that share a first id with the next one.
  const std::vector<std::uint64_t>& first_sample = first_samples(block_size);
  const auto it = std::upper_bound(first_sample.begin(), first_sample.end(), id);
  Location loc;
  loc.file = static_cast<std::size_t>(it - first_sample.begin()) - 1;
  const std::uint64_t local = id - first_sample[loc.file];
  if (options_.mode == SamplingMode::epoch) {
    loc.offset = local * (block_size + 1);
    loc.window_id = static_cast<std::int64_t>(id);
  } else {
    loc.offset = local;
    loc.window_id = static_cast<std::int64_t>(ranges_ ? local : split_.files()[loc.file].first_token + local);
  }
  return loc;
}

void TokenStreamBatchSource::read_ranges(std::uint64_t offset, std::size_t count, std::int64_t* out) const {
  for (std::size_t r = split_.range_of(offset), done = 0; done < count; ++r) {
    const DocumentRange& range = split_.ranges()[r];
    const std::uint64_t in_range = offset + done - range.first_token;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(count - done, range.tokens - in_range));
    split_.read(range.file, range.offset + in_range, n, out + done);
    const StreamFile& f = split_.files()[range.file];
    for (std::size_t i = 0; f.dtype == TokenDtype::int32 && i < n; ++i) {
      if (out[done + i] <= INT32_MAX) continue;
      throw Error(ErrorKind::format, "'" + f.map.path().string() + "': token " +
                                         std::to_string(range.offset + in_range + i) + " is " +
                                         std::to_string(static_cast<std::int32_t>(out[done + i])) +
                                         ", a negative id in an int32 file (its .idx says int32; token ids are never "
                                         "negative)");
    }
    done += n;
  }
}

void TokenStreamBatchSource::write_ranges_window(const Location& loc, std::size_t T,
                                                 const NextTokenFields& fields) const {
  read_ranges(loc.offset, T, fields.x);
  std::int64_t* targets = fields.y != nullptr ? fields.y : fields.labels;
  std::copy(fields.x + 1, fields.x + T, targets);
  read_ranges(loc.offset + T, 1, targets + T - 1);
  if (fields.weights != nullptr) std::fill(fields.weights, fields.weights + T, 1.0f);
  if (fields.positions != nullptr) std::iota(fields.positions, fields.positions + T, 0);
}

std::pair<TokenStreamBatchSource::Location, std::size_t> TokenStreamBatchSource::locate_row(
    std::int64_t id, std::size_t T) const noexcept {
  const auto u = static_cast<std::uint64_t>(id);
  if (options_.unit_tokens == 0) return {locate(u, T), T};
  // A piece of a unit: its unit's window, from the piece's offset on.
  const std::uint64_t unit_tokens = options_.unit_tokens, in_unit = u % unit_tokens;
  Location loc = locate(u / unit_tokens, options_.unit_tokens - 1);
  loc.offset += in_unit;
  loc.window_id = id;
  return {loc, static_cast<std::size_t>(std::min<std::uint64_t>(T + 1, unit_tokens - in_unit) - 1)};
}

std::int64_t TokenStreamBatchSource::read_token(const Location& loc) const {
  std::int64_t token = 0;
  if (ranges_) {
    read_ranges(loc.offset, 1, &token);
    return token;
  }
  split_.read(loc.file, loc.offset, 1, &token);
  // As a window's first input, which names the token's own offset when it is negative.
  if (split_.files()[loc.file].dtype == TokenDtype::int32) check_signed_window(loc, 1, &token, &token);
  return token;
}

void TokenStreamBatchSource::decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const {
  const std::size_t T = slot.cols;  // the batch's block size
  const bool contract = options_.contract_fields;
  std::int64_t* x = slot.x.data() + r * T;
  std::int64_t* y = slot.labels.data() + r * T;  // y is the labels here
  // Empty (null) without the contract fields; positions stay with the document fields.
  float* weights = slot.token_weights.empty() ? nullptr : slot.token_weights.data() + r * T;
  std::int32_t* positions = slot.position_ids.empty() ? nullptr : slot.position_ids.data() + r * T;
  std::int32_t* doc_ids = slot.doc_ids.empty() ? nullptr : slot.doc_ids.data() + r * T;
  // Positions [from, T): a row's padding, a sequence (and document) of its own.
  const auto pad_from = [&](std::size_t from, std::int64_t pad, std::int32_t doc) {
    std::fill(x + from, x + T, pad);
    std::fill(y + from, y + T, options_.ignore_index);
    if (weights != nullptr) std::fill(weights + from, weights + T, 0.0f);
    if (positions != nullptr) std::iota(positions + from, positions + T, 0);
    if (doc_ids != nullptr) std::fill(doc_ids + from, doc_ids + T, doc);
  };
  if (id < 0) {
    // A fill row (epoch mode without drop_last): nothing to learn from.
    slot.episode_ids[r] = -1;
    pad_from(0, 0, 0);
    slot.add_sequence(T);
    return;
  }
  const auto [loc, real] = locate_row(id, T);  // real < T: a unit's last piece, padded
  slot.episode_ids[r] = loc.window_id;
  const bool plain = !options_.document_aware;
  if (plain) slot.real_positions += real;
  NextTokenFields fields;
  fields.x = x;
  if (plain && contract) {
    // Every target is trained: the labels are the targets, with weight 1.
    fields.weights = weights;
    fields.labels = y;
    fields.positions = positions;
  } else {
    fields.y = y;
  }
  if (real == 0) {
    // A piece of one token: no target; x keeps it (the padding rule, below).
  } else if (ranges_) {
    write_ranges_window(loc, real, fields);
  } else {
    write_window(loc, real, fields);
    if (split_.files()[loc.file].dtype == TokenDtype::int32) check_signed_window(loc, real, x, y);
  }
  if (real < T) {
    // The piece's last token, a target only (y[real - 1] before any masking), stays in x's
    // first padding position, as sft_episode keeps an episode's.
    Location last = loc;
    last.offset += real;
    const std::int64_t token = real > 0 ? y[real - 1] : read_token(last);
    pad_from(real, options_.pad_token_id, 0);
    x[real] = token;
  }
  if (plain) {
    if (contract) {
      if (real > 0) slot.add_sequence(real);
      if (real < T) slot.add_sequence(T - real);
    }
    return;
  }
  const StreamFile& file = split_.files()[loc.file];
  if (ranges_) {
    apply_document_starts(*split_.range_starts(), loc.offset, y, doc_ids, positions, real, options_.ignore_index);
  } else if (file.document_starts) {
    apply_document_starts(*file.document_starts, loc.offset, y, doc_ids, positions, real, options_.ignore_index);
  } else {
    // Checked at open (check_document_boundaries): a file without document starts has an eos id.
    apply_document_boundaries(x, y, doc_ids, positions, real, options_.eos_token_id.value_or(-1),
                              options_.ignore_index);
  }
  if (real < T && real > 0) std::fill(doc_ids + real, doc_ids + T, doc_ids[real - 1] + 1);
  slot.real_positions += finish_documents(slot, r, real);
}

std::size_t TokenStreamBatchSource::finish_documents(detail::BatchSlot& slot, std::size_t r,
                                                     std::size_t real_cols) const {
  const std::size_t T = slot.cols;
  std::int64_t* y = slot.labels.data() + r * T;
  float* weights = slot.token_weights.empty() ? nullptr : slot.token_weights.data() + r * T;
  if (options_.sequence_multiple > 1) {
    std::int64_t* x = slot.x.data() + r * T;
    std::int32_t* doc_ids = slot.doc_ids.data() + r * T;
    std::int32_t* positions = slot.position_ids.data() + r * T;
    const std::vector<PaddedPiece> pieces = pad_documents(x, y, doc_ids, positions, T, options_.sequence_multiple,
                                                          options_.pad_token_id, options_.ignore_index, real_cols);
    std::size_t real = 0, column = 0;
    for (const PaddedPiece& piece : pieces) {
      slot.add_sequence(piece.real, piece.padded);
      real += piece.real;
      column += piece.padded;
    }
    if (column < T) {
      // A partial row's padding after its padded pieces: a sequence (and document) of its own.
      const std::int32_t doc = column > 0 ? doc_ids[column - 1] + 1 : 0;
      std::fill(x + column, x + T, options_.pad_token_id);
      std::fill(y + column, y + T, options_.ignore_index);
      std::fill(doc_ids + column, doc_ids + T, doc);
      std::iota(positions + column, positions + T, 0);
      slot.add_sequence(T - column);
    }
    if (weights != nullptr) {
      for (std::size_t i = 0; i < T; ++i) weights[i] = y[i] == options_.ignore_index ? 0.0f : 1.0f;
    }
    return real;
  }
  if (!options_.contract_fields) return real_cols;
  const std::int32_t* doc_ids = slot.doc_ids.data() + r * T;
  std::size_t start = 0;
  for (std::size_t i = 0; i < T; ++i) {
    weights[i] = y[i] == options_.ignore_index ? 0.0f : 1.0f;
    if (i + 1 == T || doc_ids[i + 1] != doc_ids[i]) {
      slot.add_sequence(i + 1 - start);  // one sequence per document piece in the row
      start = i + 1;
    }
  }
  return real_cols;
}

std::vector<PaddedPiece> pad_documents(std::int64_t* x, std::int64_t* y, std::int32_t* doc_ids,
                                       std::int32_t* position_ids, std::size_t cols, std::size_t multiple,
                                       std::int64_t pad_token_id, std::int64_t ignore_index, std::size_t real_cols) {
  const std::size_t window = std::min(cols, real_cols);  // the positions the window holds
  // Where each piece starts now, and what it keeps, in order.
  std::vector<std::size_t> starts;
  std::vector<PaddedPiece> pieces;
  std::size_t column = 0;  // where the next piece's padded span starts
  for (std::size_t start = 0; start < window && column < cols;) {
    std::size_t end = start + 1;
    while (end < window && doc_ids[end] == doc_ids[start]) ++end;
    const std::size_t real = std::min(end - start, cols - column);
    const std::size_t padded = (real + multiple - 1) / multiple * multiple;
    starts.push_back(start);
    pieces.push_back({real, padded});
    column += padded;
    start = end;
  }
  // Moved right from the last piece on: a piece's new place starts at or after its old one
  // and after the old places of the pieces before it, so nothing is overwritten unread.
  for (std::size_t k = pieces.size(); k-- > 0;) {
    column -= pieces[k].padded;
    const std::size_t from = starts[k], to = column, real = pieces[k].real;
    std::copy_backward(x + from, x + from + real, x + to + real);
    std::copy_backward(y + from, y + from + real, y + to + real);
    std::copy_backward(doc_ids + from, doc_ids + from + real, doc_ids + to + real);
    std::copy_backward(position_ids + from, position_ids + from + real, position_ids + to + real);
    const std::int32_t doc = doc_ids[to];
    const std::int32_t next_position = position_ids[to] + static_cast<std::int32_t>(real);
    for (std::size_t i = real; i < pieces[k].padded; ++i) {
      x[to + i] = pad_token_id;
      y[to + i] = ignore_index;
      doc_ids[to + i] = doc;
      position_ids[to + i] = next_position + static_cast<std::int32_t>(i - real);
    }
  }
  return pieces;
}

void TokenStreamBatchSource::prefetch_id(std::int64_t id) const noexcept {
  // A window over runs of documents is read without hints; under a sequence-length schedule
  // the id's window depends on its batch's block size, which this hint is not told.
  if (id < 0 || ranges_ || !options_.block_sizes.empty()) return;
  const Location loc = locate(static_cast<std::uint64_t>(id));
  const StreamFile& f = split_.files()[loc.file];
  NextTokenSource source;
  source.token_dtype = f.dtype;
  source.tokens = f.map.bytes().data() + f.data_offset + loc.offset * size_of(f.dtype);
  prefetch_next_token_run(source, options_.block_size);
}

void TokenStreamBatchSource::check_signed_window(const Location& loc, std::size_t T, const std::int64_t* x,
                                                 const std::int64_t* y) const {
  // An int32 token was read as its uint32 bits: a negative one is above INT32_MAX. x holds
  // tokens offset..offset+T-1 and y's last entry token offset+T (before any masking).
  constexpr std::int64_t kMax = INT32_MAX;
  std::size_t bad = T + 1;
  for (std::size_t i = 0; i < T; ++i) {
    if (x[i] > kMax) {
      bad = i;
      break;
    }
  }
  if (bad > T && y[T - 1] > kMax) bad = T;
  if (bad > T) return;
  const std::int64_t bits = bad < T ? x[bad] : y[T - 1];
  const StreamFile& f = split_.files()[loc.file];
  throw Error(ErrorKind::format, "'" + f.map.path().string() + "': token " + std::to_string(loc.offset + bad) + " is " +
                                     std::to_string(static_cast<std::int32_t>(static_cast<std::uint32_t>(bits))) +
                                     ", a negative id in an int32 file (its .idx says int32; token ids are never "
                                     "negative)");
}

void TokenStreamBatchSource::write_window(const Location& loc, std::size_t T,
                                          const NextTokenFields& fields) const noexcept {
  const StreamFile& f = split_.files()[loc.file];
  NextTokenSource source;
  source.token_dtype = f.dtype;
  source.tokens = f.map.bytes().data() + f.data_offset + loc.offset * size_of(f.dtype);
  if (reinterpret_cast<std::uintptr_t>(source.tokens) % size_of(f.dtype) == 0) {
    write_next_token_run(source, T, 0, fields, options_.ignore_index);
    return;
  }
  // An .npy file whose header leaves the data unaligned: read element by element.
  split_.read(loc.file, loc.offset, T, fields.x);
  std::int64_t* targets = fields.y != nullptr ? fields.y : fields.labels;
  split_.read(loc.file, loc.offset + 1, T, targets);
  if (fields.weights != nullptr) std::fill(fields.weights, fields.weights + T, 1.0f);
  if (fields.positions != nullptr) std::iota(fields.positions, fields.positions + T, 0);
}

void apply_document_boundaries(const std::int64_t* x, std::int64_t* y, std::int32_t* doc_ids,
                               std::int32_t* position_ids, std::size_t cols, std::int64_t eos_token_id,
                               std::int64_t ignore_index) noexcept {
  std::int32_t doc = 0;
  std::int32_t position = 0;
  for (std::size_t i = 0; i < cols; ++i) {
    doc_ids[i] = doc;
    position_ids[i] = position;
    if (x[i] == eos_token_id) {
      // The label after an end-of-text token starts the next document.
      y[i] = ignore_index;
      ++doc;
      position = 0;
    } else {
      ++position;
    }
  }
}

void apply_document_starts(const DocumentStarts& starts, std::uint64_t offset, std::int64_t* y, std::int32_t* doc_ids,
                           std::int32_t* position_ids, std::size_t cols, std::int64_t ignore_index) noexcept {
  std::uint64_t next = starts.next_start_after(offset);
  std::int32_t doc = 0;
  std::int32_t position = 0;
  for (std::size_t i = 0; i < cols; ++i) {
    const std::uint64_t token = offset + i;
    if (token == next) {
      ++doc;
      position = 0;
      next = starts.next_start_after(token);
    }
    doc_ids[i] = doc;
    position_ids[i] = position++;
    // The label of a document's last token is the next document's first.
    if (token + 1 == next) y[i] = ignore_index;
  }
}

}  // namespace tokenfeed
