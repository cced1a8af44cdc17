// A record of a config's nested lists in neutral form, whichever door it came through: an
// XML element's attributes and its listed children (<source name="chat" weight="3" .../>,
// <stage until_step="N"> with its <weight source="NAME">W</weight>), or one dict of a
// Python mapping's list (`mixture`, `stages`: the dict's items, a stage's `weights` dict),
// every value as the text XML would give. The schemas (mixture_schema, stage_list) read
// only this, so that a key is parsed, checked and defaulted once for both doors.
//
// Thread-safety: a plain value.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tokenfeed {

struct ConfigRecord {
  // The record's keys and their texts, in the order given: an XML element's attributes, a
  // dict's items (a None value left out: absent).
  std::vector<std::pair<std::string, std::string>> keys;
  // The named values the record lists (name, text): a mixture stage's weights by source.
  std::vector<std::pair<std::string, std::string>> entries;
};

// Throws Error(config) "WHERE: key 'KEY' is given twice" for a key the record repeats (an
// XML element may repeat an attribute; a dict cannot).
void refuse_repeated_keys(const std::string& where, const ConfigRecord& record);

}  // namespace tokenfeed
