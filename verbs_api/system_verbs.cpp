// Delegation to the system's rdma-core (real HCAs).
//
// Why dlmopen(LM_ID_NEWLM): the system libibverbs dlopen()s its providers (libmlx5 ...), which
// resolve ibv_* and verbs_* symbols against "libibverbs.so.1". In the base namespace that name
// is us (LD_LIBRARY_PATH points at our library), so the providers would bind to the wrong
// library. In a fresh link-map namespace the system library and everything it loads see only
// each other. The cost is a second copy of libc, libnl and friends (a few milliseconds and a
// few MiB), so the load is lazy: nothing happens until the first system_symbol() call, which
// verbs_api makes from ibv_get_device_list only when EMURDMA_DEVICES is not `soft`. Programs
// that only use emu0 never pay for it.
//
// Why by absolute path: dlmopen("libibverbs.so.1") would search LD_LIBRARY_PATH and find us.
//
// The second namespace has its own libc heap. Nothing allocated there is ever freed here or the
// other way round: every object of a system device is created and destroyed by the system
// library (verbs_api forwards the destroy verbs too), and the handle is never closed, because
// objects of the system library may be alive until the process exits.
#include "verbs_api/system_verbs.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"

namespace verbs_api {
namespace {

constexpr const char* kOverrideVariable = "EMURDMA_SYSTEM_LIBIBVERBS";
constexpr const char* kLibraryName = "libibverbs.so.1";

struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId&) const = default;
};

// stat() follows symlinks, so libibverbs.so.1 -> libibverbs.so.1.14.44.0 compares as the file.
std::optional<FileId> file_id(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

// The object this code lives in: our libibverbs.so.1 (or an executable linking these sources).
struct Self {
  std::string path;
  std::optional<FileId> id;
  Lmid_t namespace_id = LM_ID_BASE;
};

const Self& self() {
  static const Self s = [] {
    Self out;
    Dl_info info{};
    link_map* map = nullptr;
    if (::dladdr1(reinterpret_cast<void*>(&system_symbol), &info, reinterpret_cast<void**>(&map),
                  RTLD_DL_LINKMAP) != 0) {
      if (info.dli_fname != nullptr) {
        out.path = info.dli_fname;
        out.id = file_id(info.dli_fname);
      }
      // glibc's dlopen handles are link_map pointers, so dlinfo accepts the one dladdr1 gives.
      Lmid_t lmid = LM_ID_BASE;
      if (map != nullptr && ::dlinfo(map, RTLD_DI_LMID, &lmid) == 0) out.namespace_id = lmid;
    }
    return out;
  }();
  return s;
}

// EMURDMA_NO_SYSTEM_VERBS builds (the delegation test's stand-in) never delegate, and they
// list their own device whatever EMURDMA_DEVICES says (it is the same environment as ours).
// Neither does a copy of emurdma loaded outside the base namespace: that copy is somebody's
// "system library" (another emurdma build a user pointed EMURDMA_SYSTEM_LIBIBVERBS at), and a
// chain of copies each loading the next would exhaust glibc's 16 namespaces.
bool delegation_disabled() {
#ifdef EMURDMA_NO_SYSTEM_VERBS
  return true;
#else
  return self().namespace_id != LM_ID_BASE;
#endif
}

DeviceSelection parse_selection() {
  const char* value = std::getenv("EMURDMA_DEVICES");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "all") == 0) {
    return DeviceSelection::kAll;
  }
  if (std::strcmp(value, "soft") == 0) return DeviceSelection::kSoft;
  if (std::strcmp(value, "hw") == 0) return DeviceSelection::kHw;
  base::init_logging();
  spdlog::error("EMURDMA_DEVICES={} is not one of soft, hw, all: using all", value);
  return DeviceSelection::kAll;
}

// Directories where the distribution puts libibverbs.so.1, most specific first. The multiarch
// directory is the one the running libc was loaded from (/lib/x86_64-linux-gnu on Debian,
// /lib64 on Fedora): that is where the loader found the system's libraries for this ABI.
std::vector<std::string> search_directories() {
  std::vector<std::string> dirs;
  auto add = [&dirs](std::string dir) {
    for (const auto& d : dirs) {
      if (d == dir) return;
    }
    dirs.push_back(std::move(dir));
  };
  Dl_info info{};
  // gnu_get_libc_version, not malloc: allocators and sanitizers interpose malloc.
  if (::dladdr(reinterpret_cast<void*>(&::gnu_get_libc_version), &info) != 0 &&
      info.dli_fname != nullptr && info.dli_fname[0] == '/') {
    std::string libc_dir = info.dli_fname;
    libc_dir.erase(libc_dir.rfind('/'));
    const std::string leaf = libc_dir.substr(libc_dir.rfind('/') + 1);
    if (leaf.find('-') != std::string::npos) {  // a multiarch triplet: x86_64-linux-gnu
      add("/lib/" + leaf);
      add("/usr/lib/" + leaf);
    }
    add(libc_dir);
  }
  for (const char* dir : {"/usr/lib64", "/lib64", "/usr/lib", "/lib"}) add(dir);
  return dirs;
}

// The path to load, or nullopt (logged) when there is none.
std::optional<std::string> find_system_library() {
  const Self& me = self();
  if (const char* forced = std::getenv(kOverrideVariable); forced != nullptr && *forced != '\0') {
    const auto id = file_id(forced);
    if (!id) {
      spdlog::info("{}={}: no such file; real HCAs are not available", kOverrideVariable, forced);
      return std::nullopt;
    }
    if (me.id && *id == *me.id) {
      spdlog::warn("{}={} is this emurdma library itself; real HCAs are not available",
                   kOverrideVariable, forced);
      return std::nullopt;
    }
    // With a '/' in it dlmopen takes the name as a path; without one it would search
    // LD_LIBRARY_PATH, which finds us.
    return std::strchr(forced, '/') != nullptr ? std::string(forced) : "./" + std::string(forced);
  }
  for (const auto& dir : search_directories()) {
    const std::string candidate = dir + "/" + kLibraryName;
    const auto id = file_id(candidate.c_str());
    if (!id) continue;
    if (me.id && *id == *me.id) {
      spdlog::debug("{}: our own library, not the system's", candidate);
      continue;
    }
    return candidate;
  }
  spdlog::info(
      "no system {} found (searched the system library directories; set {} to name "
      "one): real HCAs are not available, emu0 is",
      kLibraryName, kOverrideVariable);
  return std::nullopt;
}

void* load_system_library() {
  base::init_logging();
  const auto path = find_system_library();
  if (!path) return nullptr;
  void* handle = ::dlmopen(LM_ID_NEWLM, path->c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    spdlog::warn("cannot load the system {} ({}): {}; real HCAs are not available", kLibraryName,
                 *path, why != nullptr ? why : "unknown error");
    return nullptr;
  }
  // Anything can be called libibverbs.so.1; without the device list it is useless to us.
  if (::dlvsym(handle, "ibv_get_device_list", "IBVERBS_1.1") == nullptr) {
    spdlog::warn(
        "{} has no ibv_get_device_list@IBVERBS_1.1: not a libibverbs; real HCAs are not "
        "available",
        *path);
    // Never dlclose: its constructors ran in a namespace we cannot tidy up reliably.
    return nullptr;
  }
  Lmid_t lmid = -1;
  ::dlinfo(handle, RTLD_DI_LMID, &lmid);
  spdlog::info("real HCAs: delegating to {} (link-map namespace {})", *path, lmid);
  return handle;
}

void* system_library() {
  // A function-local static: loaded once, and concurrent first callers wait for that one load.
  static void* const handle = load_system_library();
  return handle;
}

// `soname` from the system's library directories, loaded beside the system libibverbs.
void* load_companion(const char* soname) {
  void* verbs = system_library();
  if (verbs == nullptr) return nullptr;
  Lmid_t lmid = LM_ID_BASE;
  if (::dlinfo(verbs, RTLD_DI_LMID, &lmid) != 0) return nullptr;
  for (const auto& dir : search_directories()) {
    const std::string candidate = dir + "/" + soname;
    if (!file_id(candidate.c_str())) continue;
    void* handle = ::dlmopen(lmid, candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      spdlog::warn("cannot load the system {} ({}): {}", soname, candidate,
                   why != nullptr ? why : "unknown error");
      return nullptr;
    }
    spdlog::info("real HCAs: delegating to {} (link-map namespace {})", candidate, lmid);
    return handle;
  }
  spdlog::info("no system {} found: real HCAs are not available through it", soname);
  return nullptr;
}

}  // namespace

int system_errno() {
  void* handle = system_library();
  if (handle == nullptr) return EIO;
  // The handle's lookup scope includes its dependencies: the namespace's own libc.
  static auto* const location = reinterpret_cast<int* (*)()>(::dlsym(handle, "__errno_location"));
  return location != nullptr ? *location() : EIO;
}

void* system_companion(const char* soname) {
  if (soname == nullptr || device_selection() == DeviceSelection::kSoft) return nullptr;
  // Few names, each loaded once (handles are never closed, as the system libibverbs').
  static std::mutex mutex;
  static std::vector<std::pair<std::string, void*>> loaded;
  std::lock_guard lock(mutex);
  for (const auto& [name, handle] : loaded) {
    if (name == soname) return handle;
  }
  void* handle = load_companion(soname);
  loaded.emplace_back(soname, handle);
  return handle;
}

DeviceSelection device_selection() {
  if (delegation_disabled()) return DeviceSelection::kSoft;
  static const DeviceSelection selection = parse_selection();
  return selection;
}

void* system_symbol(const char* name, const char* version) {
  if (device_selection() == DeviceSelection::kSoft) return nullptr;
  void* handle = system_library();
  if (handle == nullptr || name == nullptr || version == nullptr) return nullptr;
  void* symbol = ::dlvsym(handle, name, version);
  if (symbol == nullptr) spdlog::debug("system libibverbs has no {}@{}", name, version);
  return symbol;
}

}  // namespace verbs_api
