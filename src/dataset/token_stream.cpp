#include "dataset/token_stream.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "dataset/datatrove_index.hpp"
#include "dataset/document_split.hpp"
#include "dataset/megatron_index.hpp"
#include "util/hash.hpp"
#include "io/npy.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDocsSuffix = ".docs.npy";

// NAME.docs.npy: the document offsets of shard NAME.npy (or NAME.bin), never a shard.
bool is_docs_file(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.size() > kDocsSuffix.size() && name.ends_with(kDocsSuffix);
}

bool is_shard_file(const fs::directory_entry& entry) {
  const std::string ext = entry.path().extension().string();
  return entry.is_regular_file() && (ext == ".bin" || ext == ".npy" || ext == ".ds") && !is_docs_file(entry.path());
}

// NAME.ds.index: the document ends of datatrove's NAME.ds, never a shard.
bool is_datatrove_index(const fs::path& path) { return path.string().ends_with(".ds.index"); }

[[noreturn]] void fail_file(const fs::path& path, const std::string& why) {
  throw Error(ErrorKind::format, "'" + path.string() + "': " + why);
}

// Checks that `h`, the header of `map`, describes a 1-D C-order array of `width`-byte
// elements (`what`: "tokens", "offsets") that fills the file. Throws Error(format) naming it.
void check_1d_npy(const NpyHeader& h, const MappedFile& map, const fs::path& path, std::uint64_t width,
                  const char* what) {
  if (h.fortran_order) fail_file(path, "Fortran order is not supported (save a C-order array)");
  if (h.shape.size() != 1)
    fail_file(path, "expected a 1-D array, got " + std::to_string(h.shape.size()) + " dimensions");
  const std::uint64_t n = h.shape[0];
  if (n > (UINT64_MAX - h.data_offset) / width || map.size() != h.data_offset + n * width) {
    fail_file(path, "file size " + std::to_string(map.size()) + " bytes does not match its header (" +
                        std::to_string(n) + " " + what + " of " + std::to_string(width) + " bytes after a " +
                        std::to_string(h.data_offset) + "-byte header): truncated or corrupt");
  }
}

// Flat tokens of `dtype` filling the file (a .bin, or a .npy without a header).
StreamFile open_raw(const fs::path& path, MappedFile map, TokenDtype dtype) {
  StreamFile f;
  f.map = std::move(map);
  f.format = StreamFileFormat::raw;
  f.dtype = dtype;
  const std::size_t width = size_of(dtype);
  if (f.map.size() % width != 0) {
    throw Error(ErrorKind::format, "'" + path.string() + "': size " + std::to_string(f.map.size()) +
                                       " bytes is not a multiple of " + std::to_string(width) + " (token dtype " +
                                       to_string(dtype) + ")");
  }
  f.tokens = f.map.size() / width;
  return f;
}

// A .npy file; one without the .npy magic is a headerless memmap (OLMo-core, nanoGPT),
// read as flat tokens of the dtype given.
StreamFile open_npy(const fs::path& path, std::optional<TokenDtype> given) {
  MappedFile map(path);
  if (!has_npy_magic(map.bytes())) {
    if (given) return open_raw(path, std::move(map), *given);
    throw Error(ErrorKind::config, "'" + path.string() +
                                       "' has no .npy header (not a .npy file, or a headerless memmap as OLMo-core "
                                       "writes); to read it as flat tokens set token_dtype (uint16 or uint32) in the "
                                       "config or in dataset_metadata.json");
  }
  StreamFile f;
  f.map = std::move(map);
  f.format = StreamFileFormat::npy;
  const NpyHeader h = parse_npy_header(f.map.bytes(), path.string());
  if (h.descr == "<u2" || h.descr == "=u2") {
    f.dtype = TokenDtype::uint16;
  } else if (h.descr == "<u4" || h.descr == "=u4") {
    f.dtype = TokenDtype::uint32;
  } else {
    fail_file(path, "dtype '" + h.descr + "' is not a little-endian uint16 or uint32 ('<u2' or '<u4')");
  }
  check_1d_npy(h, f.map, path, size_of(f.dtype), "tokens");
  f.data_offset = h.data_offset;
  f.tokens = h.shape[0];
  return f;
}

// Checks `path`, the document offsets of `shard`: uint64, 1-D, first 0, strictly
// increasing, each below the shard's token count. Returns how many documents it holds.
std::uint64_t check_docs_file(const fs::path& path, const StreamFile& shard) {
  const MappedFile map(path);
  const NpyHeader h = parse_npy_header(map.bytes(), path.string());
  if (h.descr != "<u8" && h.descr != "=u8") {
    fail_file(path, "dtype '" + h.descr + "' is not little-endian uint64 ('<u8'), as document offsets are");
  }
  check_1d_npy(h, map, path, 8, "offsets");
  const auto fail = [&](const std::string& why) {
    throw Error(ErrorKind::format, "'" + path.string() + "': document offsets of '" +
                                       shard.map.path().filename().string() + "' (" + std::to_string(shard.tokens) +
                                       " tokens) " + why);
  };
  const std::uint64_t n = h.shape[0];
  if (n == 0 && shard.tokens > 0) fail("are empty; the first document starts at 0");
  const std::byte* data = map.bytes().data() + h.data_offset;
  std::uint64_t previous = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t offset = 0;
    std::memcpy(&offset, data + 8 * i, 8);
    if (i == 0 && offset != 0) fail("start at " + std::to_string(offset) + ", not 0");
    if (i > 0 && offset <= previous) {
      fail("are not strictly increasing: entry " + std::to_string(i) + " is " + std::to_string(offset) + " after " +
           std::to_string(previous));
    }
    if (offset >= shard.tokens)
      fail("hold " + std::to_string(offset) + " at entry " + std::to_string(i) + ", past the shard's last token");
    previous = offset;
  }
  return n;
}

StreamFile open_bin(const fs::path& path, std::optional<TokenDtype> dtype) {
  if (!dtype) {
    throw Error(ErrorKind::config, "'" + path.string() +
                                       "': the token dtype of a .bin file is not known; set token_dtype "
                                       "(uint16 or uint32) in the config or in dataset_metadata.json");
  }
  return open_raw(path, MappedFile(path), *dtype);
}

// A Megatron pair: NAME.bin read in place, its dtype and documents from NAME.idx.
StreamFile open_megatron(const fs::path& bin, const fs::path& idx) {
  StreamFile f;
  f.map = MappedFile(bin);
  f.format = StreamFileFormat::megatron;
  auto index = std::make_shared<const MegatronIndex>(MegatronIndex::open(idx, f.map));
  f.dtype = index->dtype();
  f.tokens = index->tokens();
  f.documents = index->documents();
  f.document_starts = std::move(index);
  return f;
}

// A datatrove file: NAME.ds read in place, its token size from NAME.ds.metadata (else the
// dtype given), its documents from NAME.ds.index.
StreamFile open_datatrove(const fs::path& ds, std::optional<TokenDtype> given) {
  std::error_code ec;
  const fs::path meta_path = ds.string() + ".metadata";
  std::optional<DatatroveMetadata> meta;
  if (fs::exists(meta_path, ec)) {
    const MappedFile text(meta_path);
    const auto chars = text.bytes();
    meta = parse_datatrove_metadata(std::string_view(reinterpret_cast<const char*>(chars.data()), chars.size()),
                                    meta_path.string());
  } else if (!given) {
    throw Error(ErrorKind::config, "'" + ds.string() +
                                       "': the token size of a datatrove file without its .ds.metadata is not known; "
                                       "set token_dtype (uint16 or uint32) in the config or in dataset_metadata.json");
  }
  StreamFile f = open_raw(ds, MappedFile(ds), meta ? meta->dtype : *given);
  f.format = StreamFileFormat::datatrove;
  if (meta && meta->tokens != f.tokens) {
    fail_file(meta_path, "token count " + std::to_string(meta->tokens) + ", but '" + ds.filename().string() +
                             "' holds " + std::to_string(f.tokens) + " tokens of " + to_string(f.dtype));
  }
  if (meta) f.tokenizer = meta->tokenizer;
  const fs::path index_path = ds.string() + ".index";
  if (!fs::exists(index_path, ec)) {
    fail_file(ds, "has no '" + index_path.filename().string() + "' beside it (datatrove's document ends)");
  }
  auto index = std::make_shared<const DatatroveIndex>(DatatroveIndex::open(index_path, f.tokens));
  f.documents = index->documents();
  f.document_starts = std::move(index);
  return f;
}

// The files of a split: its token files, and the NAME.docs.npy and NAME.idx beside them.
struct SplitFiles {
  std::vector<fs::path> shards, docs, indexes;
  bool flat = false;
};

// Megatron pairs placed directly in `dataset_dir` (no train.bin, no train/): the pairs of
// `split` (val: those whose name starts with `val_prefix`; train: the others), sorted by
// name. Empty when the directory holds no .idx (or no val_prefix for val). A .bin without
// its .idx there is refused (it is no pair, and would silently be left out).
std::vector<fs::path> loose_pairs(const fs::path& dataset_dir, const std::string& split,
                                  const std::string& val_prefix) {
  std::error_code ec;
  if (fs::exists(dataset_dir / "train.bin", ec) || fs::is_directory(dataset_dir / "train", ec)) return {};
  std::vector<fs::path> bins, indexes;
  for (const auto& entry : fs::directory_iterator(dataset_dir, ec)) {
    if (!entry.is_regular_file()) continue;
    if (entry.path().extension() == ".idx") indexes.push_back(entry.path());
    if (entry.path().extension() == ".bin") bins.push_back(entry.path());
  }
  if (indexes.empty()) return {};
  std::vector<fs::path> pairs;
  for (const fs::path& bin : bins) {
    if (!fs::exists(fs::path(bin).replace_extension(".idx"), ec)) {
      throw Error(ErrorKind::format, "'" + bin.string() +
                                         "' has no NAME.idx beside it, in a dataset_dir of Megatron pairs (NAME.bin + "
                                         "NAME.idx): add its index or move it out");
    }
    const bool val = !val_prefix.empty() && bin.filename().string().starts_with(val_prefix);
    if (val == (split == "val")) pairs.push_back(bin);
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

SplitFiles list_split_files(const fs::path& dataset_dir, const std::string& split, const std::string& val_prefix) {
  std::error_code ec;
  SplitFiles files;
  const fs::path flat = dataset_dir / (split + ".bin");
  const fs::path dir = dataset_dir / split;
  if (!fs::is_regular_file(flat, ec) && !fs::is_directory(dir, ec)) {
    files.shards = loose_pairs(dataset_dir, split, val_prefix);
    if (!files.shards.empty()) {
      for (const fs::path& bin : files.shards) files.indexes.push_back(fs::path(bin).replace_extension(".idx"));
      return files;
    }
  }
  if (fs::is_regular_file(flat, ec)) {
    if (fs::is_directory(dir, ec)) {
      throw Error(ErrorKind::format,
                  "'" + dataset_dir.string() + "' holds both " + split + ".bin and " + split + "/; use one layout");
    }
    files.shards.push_back(flat);
    if (fs::exists(dataset_dir / (split + ".idx"), ec)) files.indexes.push_back(dataset_dir / (split + ".idx"));
    files.flat = true;
    return files;
  }
  if (!fs::is_directory(dir, ec)) {
    throw Error(ErrorKind::io,
                "split '" + split + "' not found: neither '" + flat.string() + "' nor '" + dir.string() + "' exists");
  }
  // An episode-indexed split's tokens.bin and mask.bin are *.bin files too; reading them
  // as token streams would train on masks as if they were tokens.
  if (fs::exists(dir / "episodes.idx", ec)) {
    throw Error(ErrorKind::format, "'" + dir.string() +
                                       "' is an episode-indexed split (it holds episodes.idx), not "
                                       "a token stream; use dataset_mode=sft_episode or sft_packed");
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (is_shard_file(entry)) files.shards.push_back(entry.path());
    if (entry.is_regular_file() && is_docs_file(entry.path())) files.docs.push_back(entry.path());
    if (entry.is_regular_file() && entry.path().extension() == ".idx") files.indexes.push_back(entry.path());
    if (entry.is_regular_file() && is_datatrove_index(entry.path())) {
      const fs::path ds = entry.path().parent_path() / entry.path().stem();
      if (!fs::is_regular_file(ds, ec)) {
        throw Error(ErrorKind::format, "'" + entry.path().string() + "' holds document ends, but its token file '" +
                                           ds.filename().string() + "' is not beside it");
      }
    }
  }
  std::sort(files.shards.begin(), files.shards.end());
  if (files.shards.empty())
    throw Error(ErrorKind::format, "'" + dir.string() + "' holds no *.bin, *.npy or *.ds shard files");
  return files;
}

// The index that makes `shard` a Megatron pair: NAME.idx beside NAME.bin.
std::optional<fs::path> index_of(const fs::path& shard, const std::vector<fs::path>& indexes) {
  if (shard.extension() != ".bin") return std::nullopt;
  fs::path idx = shard;
  idx.replace_extension(".idx");
  if (std::find(indexes.begin(), indexes.end(), idx) == indexes.end()) return std::nullopt;
  return idx;
}

// An index without its NAME.bin is an error naming it.
void check_indexes_paired(const SplitFiles& files) {
  for (const fs::path& idx : files.indexes) {
    fs::path bin = idx;
    bin.replace_extension(".bin");
    if (std::find(files.shards.begin(), files.shards.end(), bin) == files.shards.end()) {
      throw Error(ErrorKind::format, "'" + idx.string() + "' is an index without its data file '" +
                                         bin.filename().string() +
                                         "' beside it (a Megatron dataset is NAME.bin + "
                                         "NAME.idx)");
    }
  }
}

// The document starts of a split chosen by hash, in the offsets of the concatenation of
// its runs: every run's first token, and the starts its file's index gives inside it.
class RangeStarts final : public DocumentStarts {
 public:
  RangeStarts(std::vector<DocumentRange> ranges, const std::vector<StreamFile>& files, std::uint64_t total)
      : ranges_(std::move(ranges)), total_(total) {
    for (const DocumentRange& r : ranges_) {
      first_document_.push_back(documents_);
      documents_ += r.documents;
      files_.push_back(files[r.file].document_starts);
    }
  }

  std::uint64_t next_start_after(std::uint64_t token) const noexcept override {
    if (token >= total_) return UINT64_MAX;
    const std::size_t r = range_holding(token);
    const DocumentRange& range = ranges_[r];
    const std::uint64_t next = files_[r]->next_start_after(range.offset + (token - range.first_token));
    if (next < range.offset + range.tokens) return range.first_token + (next - range.offset);
    return r + 1 < ranges_.size() ? ranges_[r + 1].first_token : UINT64_MAX;
  }

  std::uint64_t document_start(std::uint64_t d) const noexcept override {
    if (d >= documents_) return total_;
    const auto it = std::upper_bound(first_document_.begin(), first_document_.end(), d);
    const auto r = static_cast<std::size_t>(it - first_document_.begin()) - 1;
    const DocumentRange& range = ranges_[r];
    const std::uint64_t start = files_[r]->document_start(range.first_document + (d - first_document_[r]));
    return range.first_token + (std::clamp(start, range.offset, range.offset + range.tokens) - range.offset);
  }

  void check_intact() const override {
    for (const auto& f : files_) f->check_intact();
  }

  // The run holding concatenation offset `token` (the last whose first token is <= it).
  std::size_t range_holding(std::uint64_t token) const noexcept {
    const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), token,
                                     [](std::uint64_t t, const DocumentRange& r) { return t < r.first_token; });
    return static_cast<std::size_t>(it - ranges_.begin()) - 1;
  }

 private:
  std::vector<DocumentRange> ranges_;
  std::vector<std::shared_ptr<const DocumentStarts>> files_;  // each run's file's index
  std::vector<std::uint64_t> first_document_;                 // each run's first document in the split
  std::uint64_t documents_ = 0;
  std::uint64_t total_ = 0;
};

// With val_fraction: the dataset has no val split of its own (its val is train's documents
// chosen by hash), and every file of train indexes its documents.
void check_hash_split(const fs::path& dataset_dir, const std::vector<StreamFile>& files,
                      const std::string& val_prefix) {
  std::error_code ec;
  if (fs::exists(dataset_dir / "val.bin", ec) || fs::exists(dataset_dir / "val", ec) ||
      !loose_pairs(dataset_dir, "val", val_prefix).empty()) {
    throw Error(ErrorKind::config, "config key 'val_fraction' makes val a fraction of train's documents, but '" +
                                       dataset_dir.string() + "' has a val split of its own; unset val_fraction");
  }
  for (const StreamFile& f : files) {
    if (f.document_starts) continue;
    throw Error(ErrorKind::format, "'" + f.map.path().string() +
                                       "' does not index its documents (neither a Megatron NAME.bin + NAME.idx pair "
                                       "nor a datatrove NAME.ds + NAME.ds.index), so config key 'val_fraction' cannot "
                                       "choose its documents");
  }
}

}  // namespace

std::size_t TokenStreamSplit::range_of(std::uint64_t token) const noexcept {
  return static_cast<const RangeStarts&>(*range_starts_).range_holding(token);
}

bool TokenStreamSplit::has_split(const fs::path& dataset_dir, const std::string& split, const std::string& val_prefix,
                                 DocumentHashSplit by_hash) {
  if (by_hash.fraction > 0.0 && split == "val") return has_split(dataset_dir, "train", val_prefix);
  std::error_code ec;
  if (fs::is_regular_file(dataset_dir / (split + ".bin"), ec)) return true;
  if (!fs::is_directory(dataset_dir / split, ec)) return !loose_pairs(dataset_dir, split, val_prefix).empty();
  for (const auto& entry : fs::directory_iterator(dataset_dir / split, ec)) {
    if (is_shard_file(entry)) return true;
  }
  return false;
}

TokenStreamSplit TokenStreamSplit::open(const fs::path& dataset_dir, const std::string& split,
                                        std::optional<TokenDtype> bin_dtype, const std::string& val_prefix,
                                        DocumentHashSplit by_hash) {
  if (by_hash.fraction > 0.0) return open_by_hash(dataset_dir, split, bin_dtype, val_prefix, by_hash);
  const SplitFiles files = list_split_files(dataset_dir, split, val_prefix);
  check_indexes_paired(files);
  TokenStreamSplit result;
  result.flat_ = files.flat;
  Hasher hasher;
  for (const fs::path& path : files.shards) {
    const std::optional<fs::path> idx = index_of(path, files.indexes);
    StreamFile f = idx                          ? open_megatron(path, *idx)
                   : path.extension() == ".npy" ? open_npy(path, bin_dtype)
                   : path.extension() == ".ds"  ? open_datatrove(path, bin_dtype)
                                                : open_bin(path, bin_dtype);
    f.first_token = result.total_tokens_;
    result.total_tokens_ += f.tokens;
    hasher.add(path.filename().string());
    hasher.add(f.tokens);
    hasher.add(std::string_view(to_string(f.dtype)));
    // A Megatron file's documents decide document-aware rows (the other files' do not).
    if (f.document_starts) hasher.add(*f.documents);
    result.files_.push_back(std::move(f));
  }
  result.fingerprint_ = hasher.digest();
  // Each NAME.docs.npy belongs to the shard NAME.npy or NAME.bin beside it.
  for (const fs::path& path : files.docs) {
    const std::string name = path.filename().string();
    const std::string stem = name.substr(0, name.size() - kDocsSuffix.size());
    const auto shard = std::find_if(result.files_.begin(), result.files_.end(),
                                    [&stem](const StreamFile& f) { return f.map.path().stem().string() == stem; });
    if (shard == result.files_.end()) {
      throw Error(ErrorKind::format, "'" + path.string() + "' holds document offsets, but its token shard '" + stem +
                                         ".npy' (or '" + stem + ".bin') is not beside it");
    }
    if (shard->document_starts) {
      throw Error(ErrorKind::format, "'" + path.string() + "' gives document offsets to '" +
                                         shard->map.path().filename().string() + "', whose index gives them already");
    }
    shard->documents = check_docs_file(path, *shard);
  }
  return result;
}

TokenStreamSplit TokenStreamSplit::open_by_hash(const fs::path& dataset_dir, const std::string& split,
                                                std::optional<TokenDtype> bin_dtype, const std::string& val_prefix,
                                                DocumentHashSplit by_hash) {
  TokenStreamSplit result = open(dataset_dir, "train", bin_dtype, val_prefix);
  check_hash_split(dataset_dir, result.files_, val_prefix);
  result.ranges_ = choose_documents(result.files_, by_hash.fraction, by_hash.seed, split == "val");
  result.total_tokens_ = result.ranges_.empty() ? 0 : result.ranges_.back().first_token + result.ranges_.back().tokens;
  if (split == "train" && result.ranges_.empty()) {
    throw Error(ErrorKind::config, "config key 'val_fraction' (" + std::to_string(by_hash.fraction) +
                                       ") leaves train no document of '" + dataset_dir.string() +
                                       "': every document was chosen for val; lower it or change val_seed");
  }
  result.range_starts_ = std::make_shared<const RangeStarts>(result.ranges_, result.files_, result.total_tokens_);
  Hasher hasher;
  hasher.add(result.fingerprint_);
  hasher.add(std::string_view(split == "val" ? "val by document hash" : "train by document hash"));
  std::uint64_t fraction_bits = 0;
  std::memcpy(&fraction_bits, &by_hash.fraction, 8);
  hasher.add(fraction_bits);
  hasher.add(by_hash.seed);
  hasher.add(static_cast<std::uint64_t>(result.ranges_.size()));
  hasher.add(result.total_tokens_);
  result.fingerprint_ = hasher.digest();
  return result;
}

std::optional<TokenDtype> TokenStreamSplit::common_dtype() const noexcept {
  for (const StreamFile& f : files_) {
    if (f.dtype != files_.front().dtype) return std::nullopt;
  }
  return files_.empty() ? std::nullopt : std::optional<TokenDtype>(files_.front().dtype);
}

void TokenStreamSplit::read(std::size_t file, std::uint64_t offset, std::size_t count,
                            std::int64_t* out) const noexcept {
  const StreamFile& f = files_[file];
  const std::byte* base = f.map.bytes().data() + f.data_offset;
  if (f.dtype == TokenDtype::uint16) {
    for (std::size_t i = 0; i < count; ++i) {
      std::uint16_t v;
      std::memcpy(&v, base + 2 * (offset + i), 2);
      out[i] = v;
    }
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t v;
      std::memcpy(&v, base + 4 * (offset + i), 4);
      out[i] = v;
    }
  }
}

std::uint32_t TokenStreamSplit::token_at(std::size_t file, std::uint64_t offset) const noexcept {
  std::int64_t v = 0;
  read(file, offset, 1, &v);
  return static_cast<std::uint32_t>(v);
}

void TokenStreamSplit::check_intact() const {
  for (const StreamFile& f : files_) {
    f.map.check_intact();
    if (f.document_starts) f.document_starts->check_intact();
  }
}

void TokenStreamSplit::will_need(std::size_t file, std::uint64_t offset, std::size_t count) const noexcept {
  const StreamFile& f = files_[file];
  const std::size_t width = size_of(f.dtype);
  f.map.will_need(f.data_offset + static_cast<std::size_t>(offset) * width, count * width);
}

}  // namespace tokenfeed
