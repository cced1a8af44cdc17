// Dataset open and validation over fuzzer-made files: the input is a flags byte, the
// lengths of episodes.idx and tokens.bin (little-endian uint16 each), then episodes.idx,
// tokens.bin and mask.bin. The split is opened as the loader opens it; when it opens, every
// episode's tokens and mask are read, and a loader takes a few batches from it.
#include <cstddef>
#include <cstdint>

#include "dataset/episode_dataset.hpp"
#include "fuzz_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  fuzz::quiet_logs();
  if (size < 5) return 0;
  const std::uint8_t flags = data[0];
  const std::size_t idx_len = std::min<std::size_t>(data[1] | (data[2] << 8), size - 5);
  const std::size_t tok_len = std::min<std::size_t>(data[3] | (data[4] << 8), size - 5 - idx_len);
  const char* p = reinterpret_cast<const char*>(data) + 5;
  const auto dataset = fuzz::scratch_dir() / "dataset";
  const auto train = dataset / "train";
  std::filesystem::remove_all(dataset);
  std::filesystem::create_directories(train);
  fuzz::write_file(train / "episodes.idx", std::string_view(p, idx_len));
  fuzz::write_file(train / "tokens.bin", std::string_view(p + idx_len, tok_len));
  if (flags & 1)
    fuzz::write_file(train / "mask.bin", std::string_view(p + idx_len + tok_len, size - 5 - idx_len - tok_len));

  EpisodeSplitOptions options;
  if (flags & 2) options.token_dtype = (flags & 4) ? TokenDtype::uint32 : TokenDtype::uint16;
  if (flags & 8) options.mask_dtype = (flags & 16) ? MaskDtype::float32 : MaskDtype::uint8;
  options.want_mask = true;
  try {
    const EpisodeSplit split = EpisodeSplit::open(train, options);
    std::vector<std::int64_t> tokens;
    std::vector<float> mask;
    for (std::uint64_t e = 0; e < split.num_episodes(); ++e) {
      const std::uint64_t n = std::min<std::uint64_t>(split.spans()[e].length, 1 << 16);
      tokens.resize(n);
      split.read_tokens(e, 0, n, tokens.data());
      if (split.has_mask()) {
        mask.resize(n);
        split.read_mask(e, 0, n, mask.data());
      }
    }
  } catch (const Error&) {
    return 0;
  }
  Config c;
  c.dataset_dir = dataset;
  c.batch_size = 1 + (flags >> 5 & 1);
  c.block_size = 8;
  c.pad_token_id = 0;
  c.token_dtype = options.token_dtype;
  c.mask_dtype = options.mask_dtype;
  c.use_loss_mask = true;
  c.epoch_drop_last = false;
  c.dataset_mode = (flags & 64) ? DatasetMode::sft_packed : DatasetMode::sft_episode;
  c.decode_threads = 1;
  c.prefetch_depth = 1;
  c.audit_log_dir.clear();
  try {
    Loader loader(c);
    for (int i = 0; i < 3; ++i) (void)loader.get_batch();
  } catch (const Error&) {
  }
  return 0;
}
