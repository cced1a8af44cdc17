#include "io/json_journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "util/bounded_json.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace {

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

}  // namespace

JsonJournal::JsonJournal(std::filesystem::path path, std::uint64_t keep_bytes) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(ErrorKind::io, "cannot open '" + path_.string() + "' for appending: " + errno_text());
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd_);
    throw Error(ErrorKind::io, "cannot read the size of '" + path_.string() + "': " + why);
  }
  if (static_cast<std::uint64_t>(st.st_size) < keep_bytes) {
    ::close(fd_);
    throw Error(ErrorKind::format, "'" + path_.string() + "' holds " + std::to_string(st.st_size) +
                                       " bytes, fewer than the " + std::to_string(keep_bytes) + " read from it");
  }
  if (static_cast<std::uint64_t>(st.st_size) != keep_bytes && ::ftruncate(fd_, static_cast<off_t>(keep_bytes)) != 0) {
    const std::string why = errno_text();
    ::close(fd_);
    throw Error(ErrorKind::io, "cannot cut back '" + path_.string() + "': " + why);
  }
  bytes_ = keep_bytes;
}

JsonJournal::~JsonJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonJournal::append(std::string_view line) {
  std::string bytes;
  bytes.reserve(line.size() + 1);
  bytes.append(line);
  bytes += '\n';
  const char* data = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(ErrorKind::io, "cannot append to '" + path_.string() + "': " + errno_text());
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  bytes_ += bytes.size();
}

std::uint64_t read_json_journal(const std::filesystem::path& path,
                                const std::function<void(const nlohmann::json&)>& on_line) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "cannot open '" + path.string() + "' for reading");
  std::uint64_t complete = 0;
  std::uint64_t number = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no '\n' after it: a torn last line
    ++number;
    try {
      on_line(parse_bounded_json(line));
    } catch (const JsonParseError& e) {
      throw Error(ErrorKind::format, "'" + path.string() + "' line " + std::to_string(number) + ": " + e.what());
    }
    complete += line.size() + 1;
  }
  if (in.bad()) throw Error(ErrorKind::io, "error while reading '" + path.string() + "'");
  return complete;
}

}  // namespace tokenfeed
