// Our libibverbs.so.1 and librdmacm.so.1 run threads of their own (transports, progress, CM
// events) that may outlive the last dlclose of the module that loaded them: Open MPI unloads its
// OFI component, and with it libfabric and us, at MPI_Finalize. They must then stay mapped
// (-z nodelete), or those threads run into unmapped code. This program, linked to neither,
// loads each library given, opens emu0 through it (starting the engine), closes everything,
// dlcloses it, and fails unless the library is still loaded afterwards.
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstdio>

namespace {

using GetDeviceList = ibv_device** (*)(int*);
using FreeDeviceList = void (*)(ibv_device**);
using OpenDevice = ibv_context* (*)(ibv_device*);
using CloseDevice = int (*)(ibv_context*);

// Opens and closes the first device (emu0) through the library's own symbols.
bool use_device(void* lib) {
  auto get = reinterpret_cast<GetDeviceList>(dlsym(lib, "ibv_get_device_list"));
  auto free_list = reinterpret_cast<FreeDeviceList>(dlsym(lib, "ibv_free_device_list"));
  auto open = reinterpret_cast<OpenDevice>(dlsym(lib, "ibv_open_device"));
  auto close = reinterpret_cast<CloseDevice>(dlsym(lib, "ibv_close_device"));
  if (!get || !free_list || !open || !close) return false;
  int n = 0;
  ibv_device** list = get(&n);
  if (list == nullptr || n < 1) return false;
  ibv_context* ctx = open(list[0]);
  free_list(list);
  return ctx != nullptr && close(ctx) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    const char* path = argv[i];
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::printf("FAIL %s: %s\n", path, dlerror());
      ++failures;
      continue;
    }
    // librdmacm has no ibv_* of its own: dlsym finds them in its dependency, our libibverbs.
    if (!use_device(lib)) {
      std::printf("FAIL %s: could not open and close emu0 through it\n", path);
      ++failures;
    }
    dlclose(lib);
    if (dlopen(path, RTLD_NOW | RTLD_NOLOAD) == nullptr) {
      std::printf("FAIL %s: unmapped by its last dlclose (link it with -z nodelete)\n", path);
      ++failures;
    } else {
      std::printf("ok %s stays loaded after its last dlclose\n", path);
    }
  }
  return failures == 0 && argc > 1 ? 0 : 1;
}
