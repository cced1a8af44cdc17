// contract_fields: with it off, sft_episode and token_stream batches carry only their own
// view (x, y, mask, document fields), identical to the view with it on, and the contract's
// extra fields are empty; with it on, sft_episode's mask and token weights share one buffer.
// fields: the fields a trainer chooses are those the loader of every field gives, written
// by the decoders (unchanged by what the trainer does to a batch), and no other is handed
// out.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

template <typename T>
std::vector<T> copy_of(std::span<const T> s) {
  return {s.begin(), s.end()};
}

// The fields a trainer using the mode's own view reads, for `steps` batches.
struct View {
  std::vector<std::int64_t> x, y, ids;
  std::vector<float> mask;
  std::vector<std::int32_t> doc_ids, position_ids;
  std::vector<std::size_t> real_positions;
};

View read_view(const Config& c, std::size_t steps, bool with_positions) {
  Loader loader(c);
  View v;
  for (std::size_t s = 0; s < steps; ++s) {
    Batch b = loader.get_batch();
    auto append = [](auto& to, auto from) { to.insert(to.end(), from.begin(), from.end()); };
    append(v.x, b.x());
    append(v.y, b.y());
    append(v.ids, b.episode_ids());
    append(v.mask, b.mask());
    append(v.doc_ids, b.doc_ids());
    if (with_positions) append(v.position_ids, b.position_ids());
    v.real_positions.push_back(b.real_positions());
  }
  return v;
}

// Reads `steps` batches with the contract fields and without: the view must not change,
// and without them the contract's extra fields are empty. Returns a batch made without.
Batch check_without_contract(const Config& on, std::size_t steps, bool with_positions) {
  Config off = on;
  off.contract_fields = false;
  const View full = read_view(on, steps, with_positions);
  const View view = read_view(off, steps, with_positions);
  CHECK(full.x == view.x);
  CHECK(full.y == view.y);
  CHECK(full.ids == view.ids);
  CHECK(full.mask == view.mask);
  CHECK(full.doc_ids == view.doc_ids);
  CHECK(full.position_ids == view.position_ids);
  CHECK(full.real_positions == view.real_positions);

  Loader loader(off);
  Batch b = loader.get_batch();
  CHECK(b.token_weights().empty());
  CHECK(b.cu_seqlens().empty());
  CHECK(b.num_sequences() == 0);
  CHECK(b.max_seqlen() == 0);
  CHECK(b.y().size() == b.rows() * b.cols());
  return b;  // a batch outlives its loader
}

std::vector<TestEpisode> masked_episodes(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TestEpisode> episodes(count);
  for (std::size_t id = 0; id < count; ++id) {
    const std::size_t n = 2 + rng() % 20;
    for (std::size_t p = 0; p < n; ++p) {
      episodes[id].tokens.push_back(static_cast<std::uint32_t>(100 * id + p + 1));
      episodes[id].mask.push_back(static_cast<std::uint8_t>(rng() % 3 != 0));
    }
  }
  return episodes;
}

}  // namespace

TEST_CASE("contract_fields: sft_episode with it off gives the same x, y and mask and no contract fields") {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(40, 7));
  for (const bool mask : {true, false}) {
    CAPTURE(mask);
    Config on = make_config(dir.path(), 4, 12);
    on.use_loss_mask = mask;
    on.epoch_drop_last = false;  // the last batch has fill rows
    const Batch b = check_without_contract(on, 13, false);
    CHECK(b.labels().empty());
    CHECK(b.position_ids().empty());
    CHECK(b.has_mask() == mask);
  }
}

TEST_CASE("contract_fields: sft_episode with the mask writes it once, as the token weights") {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(10, 3));
  Config c = make_config(dir.path(), 2, 12);
  c.use_loss_mask = true;
  Loader loader(c);
  Batch b = loader.get_batch();
  REQUIRE(b.has_mask());
  CHECK(b.mask().data() == b.token_weights().data());
  CHECK(b.mask().size() == b.token_weights().size());
  for (std::size_t i = 0; i < b.labels().size(); ++i) {
    CHECK(b.labels()[i] == (b.mask()[i] != 0.0f ? b.y()[i] : c.ignore_index));
  }
}

TEST_CASE("contract_fields: token_stream with it off keeps y and the document fields") {
  TempDir dir;
  std::vector<std::uint16_t> tokens(500);
  std::mt19937 rng(11);
  for (auto& t : tokens) t = static_cast<std::uint16_t>(rng() % 7);  // 0 is the end of text
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 0})");
  {
    std::ofstream out(dir / "train.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  for (const bool documents : {true, false}) {
    CAPTURE(documents);
    Config on = make_config(dir.path(), 3, 16);
    on.dataset_mode = DatasetMode::token_stream;
    on.pad_token_id.reset();
    on.document_aware = documents;
    const Batch b = check_without_contract(on, 9, documents);
    CHECK(b.labels().data() == b.y().data());  // y is the labels in this mode, kept
    CHECK(b.position_ids().empty() == !documents);
    CHECK(b.doc_ids().empty() == !documents);
  }
}

TEST_CASE("contract_fields: a config key, and false is refused for sft_packed") {
  Config c;
  set_config_value(c, "contract_fields", "false");
  CHECK_FALSE(c.contract_fields);
  CHECK_THROWS_WITH_AS(set_config_value(c, "contract_fields", "sometimes"), doctest::Contains("contract_fields"), Error);

  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(20, 5));
  Config packed = make_config(dir.path(), 2, 16);
  packed.dataset_mode = DatasetMode::sft_packed;
  packed.contract_fields = false;
  CHECK_THROWS_WITH_AS(Loader{packed}, doctest::Contains("'contract_fields' cannot be false with dataset_mode=sft_packed"),
                       Error);
}

namespace {

// Every field of a loader's batches, as a trainer reads them.
struct AllFields {
  View view;
  std::vector<std::int64_t> labels;
  std::vector<float> weights;
  std::vector<std::int32_t> positions, cu_seqlens;
  std::vector<std::size_t> num_sequences, max_seqlen;
};

// Every field of `steps` batches (those the config's fields chose; the others stay empty),
// each read once.
AllFields read_all(const Config& c, std::size_t steps) {
  Loader loader(c);
  AllFields f;
  const auto append = [](auto& to, auto from_span) { to.insert(to.end(), from_span.begin(), from_span.end()); };
  for (std::size_t s = 0; s < steps; ++s) {
    Batch b = loader.get_batch();
    if (b.has_field(BatchField::labels)) append(f.labels, b.labels());
    if (b.has_field(BatchField::position_ids)) append(f.positions, b.position_ids());
    if (b.has_field(BatchField::cu_seqlens)) {
      append(f.cu_seqlens, b.cu_seqlens());
      f.num_sequences.push_back(b.num_sequences());
      f.max_seqlen.push_back(b.max_seqlen());
    }
    if (b.has_field(BatchField::token_weights)) append(f.weights, b.token_weights());
    if (b.has_field(BatchField::x)) append(f.view.x, b.x());
    if (b.has_field(BatchField::y)) append(f.view.y, b.y());
    if (b.has_field(BatchField::mask)) append(f.view.mask, b.mask());
  }
  return f;
}

BatchFields fields_of(std::initializer_list<BatchField> fields) {
  BatchFields set = 0;
  for (const BatchField f : fields) set |= batch_field_bit(f);
  return set;
}

}  // namespace

TEST_CASE("fields: sft_episode writes the chosen fields as the loader of every field does, and no other" *
          doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(60, 9));
  for (const Truncation truncation : {Truncation::right, Truncation::split}) {
    for (const bool mask : {true, false}) {
      Config c = make_config(dir.path(), 3, 8);
      c.use_loss_mask = mask;
      c.truncation = truncation;
      c.epoch_drop_last = false;  // batches with fill rows
      c.prefetch_depth = 4;
      c.decode_threads = 2;
      const AllFields every = read_all(c, 40);
      using F = BatchField;
      for (const BatchFields chosen :
           {fields_of({F::x, F::y, F::mask}), fields_of({F::x, F::labels}), fields_of({F::position_ids}),
            fields_of({F::tokens, F::labels, F::token_weights, F::position_ids, F::cu_seqlens})}) {
        CAPTURE(mask);
        CAPTURE(static_cast<int>(truncation));
        CAPTURE(chosen);
        Config some = c;
        some.fields = chosen;
        const AllFields got = read_all(some, 40);
        const auto same_if = [chosen](F field, const auto& whole, const auto& part) {
          if ((chosen & batch_field_bit(field)) != 0) {
            CHECK(whole == part);
          } else {
            CHECK(part.empty());
          }
        };
        same_if(F::x, every.view.x, got.view.x);
        same_if(F::y, every.view.y, got.view.y);
        same_if(F::mask, every.view.mask, got.view.mask);
        same_if(F::labels, every.labels, got.labels);
        same_if(F::token_weights, every.weights, got.weights);
        same_if(F::position_ids, every.positions, got.positions);
        same_if(F::cu_seqlens, every.cu_seqlens, got.cu_seqlens);
        same_if(F::cu_seqlens, every.num_sequences, got.num_sequences);
        same_if(F::cu_seqlens, every.max_seqlen, got.max_seqlen);
      }
    }
  }
}

TEST_CASE("fields: reading a field not chosen is an error naming it, in every mode") {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(20, 3));
  for (const DatasetMode mode : {DatasetMode::sft_episode, DatasetMode::sft_packed}) {
    Config c = make_config(dir.path(), 2, 8);
    c.dataset_mode = mode;
    c.fields = fields_of({BatchField::x, BatchField::y});
    Loader loader(c);
    Batch b = loader.get_batch();
    CHECK(b.x().size() == 16);
    CHECK(b.has_field(BatchField::y));
    CHECK_FALSE(b.has_field(BatchField::labels));
    const std::string message = error_of([&] { (void)b.labels(); }, ErrorKind::usage);
    CHECK(message.find("'labels'") != std::string::npos);
    CHECK(message.find("'x,y'") != std::string::npos);
    CHECK(message.find("config key 'fields'") != std::string::npos);
    for (const auto& read : std::initializer_list<std::function<void()>>{
             [&] { (void)b.tokens(); }, [&] { (void)b.mask(); }, [&] { (void)b.token_weights(); },
             [&] { (void)b.position_ids(); }, [&] { (void)b.cu_seqlens(); }, [&] { (void)b.cu_seqlens_padded(); },
             [&] { (void)b.num_sequences(); }, [&] { (void)b.max_seqlen(); }}) {
      CHECK_THROWS_AS(read(), Error);
    }
  }
}

TEST_CASE("fields: a batch is complete when it is popped, whatever the trainer does to it") {
  // The labels a trainer reads first after changing x in place (noise, masking) are the
  // decoder's, not derived from the changed x.
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(30, 5));
  Config c = make_config(dir.path(), 3, 8);
  c.use_loss_mask = true;
  c.prefetch_depth = 2;
  const AllFields every = read_all(c, 12);
  Loader loader(c);
  std::vector<std::int64_t> labels;
  for (int step = 0; step < 12; ++step) {
    Batch b = loader.get_batch();
    const std::span<const std::int64_t> x = b.x();
    std::fill(const_cast<std::int64_t*>(x.data()), const_cast<std::int64_t*>(x.data() + x.size()), 0);
    if (step >= 6) labels.insert(labels.end(), b.labels().begin(), b.labels().end());  // read late
  }
  CHECK(labels == std::vector<std::int64_t>(every.labels.begin() + 6 * 24, every.labels.end()));
}

TEST_CASE("fields: a config key of field names, each known and named once") {
  Config c;
  set_config_value(c, "fields", " x, y ,mask");
  CHECK(c.fields == fields_of({BatchField::x, BatchField::y, BatchField::mask}));
  const auto entries = config_entries(c);
  CHECK(std::find(entries.begin(), entries.end(), std::pair<std::string, std::string>{"fields", "x,y,mask"}) !=
        entries.end());
  set_config_value(c, "fields", "");
  CHECK(c.fields == kEveryBatchField);
  CHECK(error_of([&] { set_config_value(c, "fields", "x,logits"); }).find("unknown field 'logits'") !=
        std::string::npos);
  CHECK(error_of([&] { set_config_value(c, "fields", "x,,y"); }).find("an empty name") != std::string::npos);
  CHECK(error_of([&] { set_config_value(c, "fields", "y,x,y"); }).find("'y' is named twice") != std::string::npos);
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(4, 1));
  Config off = make_config(dir.path(), 1, 8);
  off.contract_fields = false;
  off.fields = fields_of({BatchField::x, BatchField::labels});
  CHECK(error_of([&] { Loader l(off); }).find("contract_fields is false") != std::string::npos);
}
