#include "config/config_record.hpp"

#include <functional>
#include <set>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

void refuse_repeated_keys(const std::string& where, const ConfigRecord& record) {
  std::set<std::string, std::less<>> seen;
  for (const auto& [key, text] : record.keys) {
    if (!seen.insert(key).second) throw Error(ErrorKind::config, where + ": key '" + key + "' is given twice");
  }
}

}  // namespace tokenfeed
