#include "dat_api/core/verbs_extension.h"

#include <dlfcn.h>

namespace dat_api {

void* verbs_extension_symbol(const char* name) {
  // Asked of the loaded libibverbs.so.1 itself, because the registry may have loaded us (and so
  // it) without RTLD_GLOBAL, which keeps it out of RTLD_DEFAULT's scope.
  void* lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void* sym = dlsym(lib != nullptr ? lib : RTLD_DEFAULT, name);
  if (lib != nullptr) dlclose(lib);  // drops the reference NOLOAD took; the library stays
  return sym;
}

}  // namespace dat_api
