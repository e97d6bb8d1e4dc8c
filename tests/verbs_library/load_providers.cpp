// Loads the system's librdmacm, libmlx5 and libefa (linked with BIND_NOW against
// libibverbs.so.1) into a process whose libibverbs is the drop-in, and fails if any of their
// imports does not resolve or if the libibverbs in use is not the drop-in.
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "verbs_api/emurdma_verbs.h"

int main() {
  int failures = 0;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&emu_query_srq_counts), &info) == 0) {
    std::printf("FAIL: the drop-in is not loaded\n");
    return 1;
  }
  std::printf("libibverbs: %s\n", info.dli_fname);
  for (const char* lib : {"librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"}) {
    void* handle = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* err = dlerror();
      // A library that is not installed proves nothing either way; an unresolved symbol fails.
      if (err != nullptr && std::strstr(err, "cannot open shared object") != nullptr) {
        std::printf("skip %s: %s\n", lib, err);
        continue;
      }
      std::printf("FAIL %s: %s\n", lib, err ? err : "?");
      ++failures;
      continue;
    }
    std::printf("ok %s\n", lib);
  }
  // librdmacm's device scan goes through ibv_get_device_list of the drop-in.
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  std::printf("%d device(s)%s\n", n, list ? "" : " (list failed)");
  if (list != nullptr) ibv_free_device_list(list);
  return failures == 0 ? 0 : 1;
}
