// path_view_probe CALL PATH [CALL PATH...]: makes each libc call on PATH and prints
// "CALL PATH: RESULT" (the file type, the content's first line, the resolved name, the sorted
// entries, or "error <ERRNO NAME>"), for tests/path_view/run_probe.sh to check what a program
// sees through the device view. Calls: stat lstat statx access fopen open openw realpath
// readlink opendir.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string error() {
  return std::string("error ") + strerrorname_np(errno);
}

std::string type_of(mode_t mode) {
  if (S_ISCHR(mode)) return "chr";
  if (S_ISDIR(mode)) return "dir";
  if (S_ISREG(mode)) return "reg";
  if (S_ISLNK(mode)) return "lnk";
  return "other";
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

std::string probe(const std::string& call, const char* path) {
  struct stat st {};
  if (call == "stat") return stat(path, &st) == 0 ? type_of(st.st_mode) : error();
  if (call == "lstat") return lstat(path, &st) == 0 ? type_of(st.st_mode) : error();
  if (call == "statx") {
    struct statx stx {};
    return statx(AT_FDCWD, path, 0, STATX_TYPE, &stx) == 0 ? type_of(stx.stx_mode) : error();
  }
  if (call == "access") return access(path, R_OK | W_OK) == 0 ? "ok" : error();
  if (call == "fopen") {
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) return error();
    char line[256] = {};
    const bool got = std::fgets(line, sizeof(line), f) != nullptr;
    std::fclose(f);
    return got ? first_line(line) : "";
  }
  if (call == "open" || call == "openw") {
    const int fd = open(path, call == "open" ? O_RDONLY : O_WRONLY);
    if (fd < 0) return error();
    char buf[256] = {};
    const ssize_t n = call == "open" ? read(fd, buf, sizeof(buf) - 1) : 0;
    close(fd);
    return call == "open" ? (n < 0 ? error() : first_line(buf)) : "ok";
  }
  if (call == "realpath") {
    char resolved[PATH_MAX];
    return realpath(path, resolved) != nullptr ? resolved : error();
  }
  if (call == "readlink") {
    char target[PATH_MAX] = {};
    return readlink(path, target, sizeof(target) - 1) >= 0 ? target : error();
  }
  if (call == "opendir") {
    DIR* dir = opendir(path);
    if (dir == nullptr) return error();
    std::vector<std::string> names;
    while (dirent* e = readdir(dir)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.emplace_back(e->d_name);
      }
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
    return out;
  }
  return "unknown call";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 != 1) {
    std::fprintf(stderr, "usage: path_view_probe CALL PATH [CALL PATH...]\n");
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::printf("%s %s: %s\n", argv[i], argv[i + 1], probe(argv[i], argv[i + 1]).c_str());
  }
  return 0;
}
