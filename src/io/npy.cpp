#include "io/npy.hpp"

#include <cstdio>
#include <cstring>
#include <string_view>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) text += ",";
    if (i + 1 < shape.size()) text += " ";
  }
  return text + ")";
}

std::size_t descr_size(const std::string& descr) { return static_cast<std::size_t>(std::stoul(descr.substr(2))); }

}  // namespace

std::string npy_header(const std::string& descr, const std::vector<std::uint64_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a
  // multiple of 64 bytes and ended by a newline, as numpy writes it.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  const auto length = static_cast<std::uint16_t>(dict.size());
  std::string header(kMagic, 6);
  header += {'\x01', '\x00', static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
  return header + dict;
}

NpyWriter::NpyWriter(const std::filesystem::path& path, std::string descr, std::vector<std::uint64_t> shape)
    : path_(path) {
  expected_bytes_ = descr_size(descr);
  for (const std::uint64_t d : shape) expected_bytes_ *= d;
  const std::string header = npy_header(descr, shape);
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) throw Error(ErrorKind::io, "cannot create '" + path.string() + "': " + std::strerror(errno));
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size()) {
    throw Error(ErrorKind::io, "cannot write '" + path.string() + "': " + std::strerror(errno));
  }
}

NpyWriter::~NpyWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void NpyWriter::append(std::span<const std::byte> bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    throw Error(ErrorKind::io, "cannot write '" + path_.string() + "': " + std::strerror(errno));
  }
  written_bytes_ += bytes.size();
}

void NpyWriter::finish() {
  if (file_ == nullptr) return;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw Error(ErrorKind::io, "cannot close '" + path_.string() + "': " + std::strerror(errno));
  if (written_bytes_ != expected_bytes_) {
    throw Error(ErrorKind::io, "'" + path_.string() + "': wrote " + std::to_string(written_bytes_) +
                                   " bytes of data, expected " + std::to_string(expected_bytes_));
  }
}

bool has_npy_magic(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= 6 && std::memcmp(bytes.data(), kMagic, 6) == 0;
}

NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& file) {
  const auto fail = [&](const std::string& what) { throw Error(ErrorKind::format, "'" + file + "': " + what); };
  if (bytes.size() < 10 || !has_npy_magic(bytes)) fail("not a .npy file (bad magic)");
  const auto major = static_cast<unsigned>(bytes[6]);
  std::size_t header_len = 0;
  std::size_t prefix = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(bytes[8]) | (static_cast<std::size_t>(bytes[9]) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail("truncated .npy header");
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<std::size_t>(bytes[8 + static_cast<std::size_t>(i)]);
    prefix = 12;
  } else {
    fail("unsupported .npy version " + std::to_string(major));
  }
  if (bytes.size() < prefix + header_len) fail("truncated .npy header");
  const std::string header(reinterpret_cast<const char*>(bytes.data()) + prefix, header_len);

  NpyHeader result;
  result.data_offset = prefix + header_len;
  // The header is a Python dict literal; read the three keys numpy writes.
  const auto value_of = [&](const std::string& key) -> std::string_view {
    const std::size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) fail("header lacks '" + key + "'");
    std::size_t v = header.find(':', k);
    if (v == std::string::npos) fail("header key '" + key + "' has no value");
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    return std::string_view(header).substr(v);
  };
  std::string_view descr = value_of("descr");
  if (descr.empty() || descr.front() != '\'' || descr.find('\'', 1) == std::string_view::npos) {
    fail("header 'descr' is not a quoted string");
  }
  result.descr = std::string(descr.substr(1, descr.find('\'', 1) - 1));
  const std::string_view order = value_of("fortran_order");
  if (order.substr(0, 4) == "True") {
    result.fortran_order = true;
  } else if (order.substr(0, 5) != "False") {
    fail("header 'fortran_order' is neither True nor False");
  }
  std::string_view shape = value_of("shape");
  if (shape.empty() || shape.front() != '(' || shape.find(')') == std::string_view::npos) {
    fail("header 'shape' is not a tuple");
  }
  shape = shape.substr(1, shape.find(')') - 1);
  std::uint64_t dim = 0;
  bool in_number = false;
  for (const char c : shape) {
    if (c >= '0' && c <= '9') {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (dim > (UINT64_MAX - digit) / 10) fail("header 'shape' overflows");
      dim = dim * 10 + digit;
      in_number = true;
    } else if (c == ',' || c == ' ' || c == 'L') {
      if (in_number && c != 'L') {
        result.shape.push_back(dim);
        dim = 0;
        in_number = false;
      }
    } else {
      fail("header 'shape' holds an unexpected character");
    }
  }
  if (in_number) result.shape.push_back(dim);
  return result;
}

}  // namespace tokenfeed
