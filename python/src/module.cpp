// tokenfeed._tokenfeed: the nanobind bindings behind `import tokenfeed` (python/tokenfeed/
// re-exports them and adds the pure-Python helpers). One file per concern, each with its
// bind_TOPIC (bindings.hpp):
//
//   errors.cpp          tokenfeed.Error and a subclass per ErrorKind, ConversationError
//   logging.cpp         set_logging
//   batch.cpp           Batch: numpy views of the loader's pooled buffers, never copies
//   loader.cpp          Loader and its iterators, GIL-free; stats.cpp: Loader.stats()
//   config.cpp          configs from a path or a mapping (mixture.cpp: mixture, stages)
//   dataset_writer.cpp  DatasetWriter, dataset_metadata.json
//   tokenizers.cpp      SpecialTokenIds, Tokenizer, make_tokenizer
//   chat.cpp            the chat template's functions
//   rl.cpp              RL prompts and the group batcher behind RLLoader
//   audit.cpp           read_audit_log: the library's audit-log reader
//   output_dir.cpp      a preparation's staging directory, output check and token dtype
//   prepare_text.cpp    _prepare_text: prepare-text with Python's tokenizer and parquet reader
//   inspect.cpp         _inspect: the library's dataset inspection as a dict (tokenfeed.inspect)
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/version.hpp"

namespace nb = nanobind;

NB_MODULE(_tokenfeed, m) {
  using namespace tokenfeed_python;
  m.doc() = "tokenfeed's C++ core; use the `tokenfeed` package, which re-exports it.";
  m.attr("__version__") = tokenfeed::version();
  m.attr("MAX_HELD_BATCHES") = tokenfeed::Loader::kMaxHeldBatches;
  m.attr("IGNORE_INDEX") = tokenfeed::kIgnoreIndex;
  m.attr("DEFAULT_SYSTEM_TEXT") = std::string(tokenfeed::kDefaultSystemText);
  bind_errors(m);
  bind_logging(m);
  bind_batch(m);
  bind_loader(m);
  bind_dataset_writer(m);
  bind_tokenizers(m);
  bind_chat(m);
  bind_rl(m);
  bind_audit(m);
  bind_output_dir(m);
  bind_prepare_text(m);
  bind_inspect(m);
}
