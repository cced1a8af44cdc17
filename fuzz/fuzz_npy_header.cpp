// The .npy header of token-stream files: parse_npy_header on the bytes, and the whole
// token-stream open (header against file size) on them as a scratch train/x.npy.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_support.hpp"
#include "io/npy.hpp"
#include "dataset/token_stream.hpp"
#include "tokenfeed/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  try {
    (void)parse_npy_header(std::as_bytes(std::span(data, size)), "fuzz.npy");
  } catch (const Error&) {
  }
  const auto dataset = fuzz::scratch_dir() / "npy";
  std::filesystem::create_directories(dataset / "train");
  fuzz::write_file(dataset / "train" / "x.npy", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const TokenStreamSplit split = TokenStreamSplit::open(dataset, "train", std::nullopt);
    (void)split.total_tokens();
  } catch (const Error&) {
  }
  return 0;
}
