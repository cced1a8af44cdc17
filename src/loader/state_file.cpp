#include "tokenfeed/state_file.hpp"

#include <string>

#include "io/regular_file.hpp"

namespace tokenfeed {

void save_state_file(const Loader& loader, const std::filesystem::path& path) {
  write_file_atomically(path, loader.save_state() + "\n", "state file");
}

void load_state_file(Loader& loader, const std::filesystem::path& path) {
  loader.load_state(read_regular_file(path, "state file"));
}

}  // namespace tokenfeed
