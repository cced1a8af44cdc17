// dataset_metadata.json: read_dataset_metadata on the bytes as the file.
#include <cstddef>
#include <cstdint>

#include "dataset/dataset_metadata.hpp"
#include "fuzz_support.hpp"
#include "tokenfeed/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  const auto dir = fuzz::scratch_dir() / "meta";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "dataset_metadata.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    (void)read_dataset_metadata(dir);
  } catch (const Error&) {
  }
  return 0;
}
