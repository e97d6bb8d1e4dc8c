#include "tests/delegation/standin.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

namespace delegation {
namespace {

// The dynamic linker's rendezvous with debuggers (<link.h>): since glibc 2.35 it chains one
// r_debug_extended per link-map namespace. It is found through the executable's DT_DEBUG
// entry, not through the _r_debug symbol, which a PIE executable reaches as a copy taken at
// start-up. Probing namespace ids with dlmopen(id, ..., RTLD_NOLOAD) instead is not safe:
// glibc 2.36 leaves its loader lock held when the id is not in use, and every other thread's
// next dlopen or dladdr then blocks forever.
r_debug_extended* rendezvous() {
  for (ElfW(Dyn)* d = _DYNAMIC; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_DEBUG) return reinterpret_cast<r_debug_extended*>(d->d_un.d_ptr);
  }
  return nullptr;
}

bool same_file(const char* a, const char* b) {
  struct stat sa {
  }, sb{};
  return ::stat(a, &sa) == 0 && ::stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

const std::string& standin_path() {
  static const std::string path = [] {
    const char* p = std::getenv("EMURDMA_TEST_STANDIN");
    return std::string(p != nullptr ? p : "");
  }();
  return path;
}

std::vector<long> namespaces_holding(const std::string& path) {
  // The lists are read without the loader's lock: the client asks only while no thread of its
  // own loads or unloads anything.
  std::vector<long> found;
  r_debug_extended* head = rendezvous();
  if (head == nullptr) {
    // Without it every "not loaded" check would pass blindly.
    std::fprintf(stderr, "FAIL: no DT_DEBUG rendezvous in this executable\n");
    std::abort();
  }
  for (r_debug_extended* r = head; r != nullptr; r = r->base.r_version >= 2 ? r->r_next : nullptr) {
    for (link_map* l = r->base.r_map; l != nullptr; l = l->l_next) {
      if (l->l_name == nullptr || l->l_name[0] != '/' || !same_file(l->l_name, path.c_str())) {
        continue;
      }
      Lmid_t lmid = -1;
      // glibc's dlopen handles are link_map pointers, so dlinfo accepts one.
      if (::dlinfo(l, RTLD_DI_LMID, &lmid) == 0) found.push_back(lmid);
    }
  }
  return found;
}

std::vector<long> standin_namespaces() {
  return namespaces_holding(standin_path());
}

void* standin_symbol(const char* name, const char* version) {
  const auto namespaces = standin_namespaces();
  if (namespaces.size() != 1) return nullptr;
  // RTLD_NOLOAD in the namespace that holds it: a reference to the loaded stand-in, never a load.
  void* h = ::dlmopen(namespaces[0], standin_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* symbol = ::dlvsym(h, name, version);
  ::dlclose(h);  // the stand-in stays loaded: our library holds its own reference
  return symbol;
}

uint64_t standin_calls(const char* name) {
  // The counter exists only in the stand-in, under a version our real library does not have.
  auto* calls = reinterpret_cast<uint64_t (*)(const char*)>(
      standin_symbol("emurdma_standin_calls", "EMURDMA_STANDIN_1.0"));
  return calls != nullptr ? calls(name) : 0;
}

bool address_in_file(const void* fn, const std::string& path) {
  Dl_info info{};
  if (::dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return false;
  return same_file(info.dli_fname, path.c_str());
}

}  // namespace delegation
