#include "formats/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <system_error>

namespace tessera::formats {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a regular file; on success fills fd and size.
Status open_regular(const std::string& path, Fd& f, size_t& size) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                  "cannot open '" + path + "': " + std::generic_category().message(err));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return Status(ErrorCode::kIo, "'" + path + "' is not a regular file");
  size = static_cast<size_t>(st.st_size);
  return Status::ok_status();
}

}  // namespace

Expected<MappedFile> map_file(const std::string& path) {
  Fd f;
  size_t size = 0;
  if (Status s = open_regular(path, f, size); !s.ok()) return s;
  if (size == 0) return Status(ErrorCode::kCorruptData, "'" + path + "' is empty");
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    return Status(ErrorCode::kIo,
                  "cannot mmap '" + path + "': " + std::generic_category().message(err));
  }
  MappedFile out;
  out.mapping = std::shared_ptr<void>(m, [size](void* p) { ::munmap(p, size); });
  out.data = static_cast<const uint8_t*>(m);
  out.size = size;
  return out;
}

Expected<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  Fd f;
  size_t size = 0;
  if (Status s = open_regular(path, f, size); !s.ok()) return s;
  if (size > max_bytes)
    return Status(ErrorCode::kCorruptData, "'" + path + "' has " + std::to_string(size) +
                                               " bytes, more than the limit of " +
                                               std::to_string(max_bytes));
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(f.fd, out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      return Status(ErrorCode::kIo, "cannot read '" + path + "'" +
                                        (err ? ": " + std::generic_category().message(err)
                                             : std::string(": file shrank while reading")));
    }
    done += static_cast<size_t>(n);
  }
  return out;
}

std::string printable(std::string_view s, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max_chars) out += "...";
  return out;
}

int json_nesting_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}')
      --depth;
  }
  return max_depth;
}

}  // namespace tessera::formats
