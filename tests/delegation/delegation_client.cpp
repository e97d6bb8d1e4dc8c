// The delegation test's verbs program. It is built against the system's libibverbs, like any
// unmodified verbs program, and the driver (delegation_test.cpp) runs it with LD_LIBRARY_PATH at
// our library and EMURDMA_SYSTEM_LIBIBVERBS at the stand-in, one scenario per process (our
// library reads its environment once).
//
//   delegation_client list [--standin=loaded|absent] [--twice] [--threads=N] [--prefix]
//                          [--system-loaded=PATH] [NAME...]
//       the device list is exactly NAME..., in that order (listed twice, or first by N
//       threads at once; with --prefix it starts with NAME...); PATH is then loaded once,
//       in a namespace of its own
//   delegation_client rc [--standin=absent] NAME...
//                                  an RC exchange on each named device, one after the other
//                                  (engines started for one stay running during the next)
//   delegation_client srq [--standin=absent] NAME...
//                                  emurdma's exact SRQ counts on each named device
//   delegation_client errno        a verb refused on emuhw0 (the system library, whose libc
//                                  and errno are its namespace's) sets the program's errno as
//                                  the same refusal on emu0 does
//
// EMURDMA_TEST_STANDIN names the stand-in, EMURDMA_TEST_OUR_LIBRARY our library.
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/delegation/check.h"
#include "tests/delegation/rc_exchange.h"
#include "tests/delegation/srq_counts.h"
#include "tests/delegation/standin.h"

namespace delegation {
namespace {

std::string our_library() {
  const char* p = std::getenv("EMURDMA_TEST_OUR_LIBRARY");
  return p != nullptr ? p : "";
}

// Every scenario starts by checking that the program really runs on our library and that
// nothing was loaded for real HCAs yet: starting a program must not cost a dlmopen.
void check_start() {
  void* list = ::dlsym(RTLD_DEFAULT, "ibv_get_device_list");
  DELEGATION_CHECK(list != nullptr && address_in_file(list, our_library()),
                   "ibv_get_device_list is not served by %s (LD_LIBRARY_PATH?)",
                   our_library().c_str());
  // The namespace walk sees our library where the loader put it (else "not loaded" means
  // nothing).
  DELEGATION_CHECK(namespaces_holding(our_library()) == std::vector<long>{0},
                   "our library is not seen in the base namespace (and only there)");
  DELEGATION_CHECK(standin_namespaces().empty(),
                   "the system library was loaded before any device was asked for");
}

std::vector<std::string> device_names(ibv_device** list, int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    names.emplace_back(name != nullptr ? name : "(null)");
  }
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return "[" + s + "]";
}

// The stand-in is loaded once, in a namespace of its own, or not at all.
void check_standin(bool loaded) {
  const auto namespaces = standin_namespaces();
  if (!loaded) {
    DELEGATION_CHECK(namespaces.empty(), "the stand-in was loaded (in namespace %ld)",
                     namespaces.empty() ? -1L : namespaces[0]);
    return;
  }
  DELEGATION_CHECK(namespaces.size() == 1, "the stand-in is loaded in %zu namespaces",
                   namespaces.size());
  if (namespaces.size() != 1) return;
  DELEGATION_CHECK(namespaces[0] != 0,
                   "the stand-in is in the base namespace: it must be loaded with dlmopen");
  const uint64_t lists = standin_calls("ibv_get_device_list");
  DELEGATION_CHECK(lists >= 1, "the stand-in's ibv_get_device_list was never entered");
  // Every list the system library handed out went back to it when ours was freed: its heap is
  // not ours (a second libc in its namespace).
  DELEGATION_CHECK(standin_calls("ibv_free_device_list") == lists,
                   "the stand-in handed out %llu device lists and got %llu back",
                   static_cast<unsigned long long>(lists),
                   static_cast<unsigned long long>(standin_calls("ibv_free_device_list")));
}

// One round of listing: the names, in order, must be `expected` (or, with prefix, start with
// it: a host with real HCAs lists them after).
void list_once(const std::vector<std::string>& expected, bool prefix) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  // rdma-core answers NULL when there is no device at all; an empty list is as good.
  if (list == nullptr) {
    DELEGATION_CHECK(expected.empty(), "ibv_get_device_list returned NULL: %s",
                     std::strerror(errno));
    n = 0;
  } else {
    DELEGATION_CHECK(list[n] == nullptr, "the list is not NULL-terminated at %d", n);
  }
  const auto names = list != nullptr ? device_names(list, n) : std::vector<std::string>{};
  std::printf("devices: %s\n", joined(names).c_str());
  const bool match = prefix ? names.size() >= expected.size() &&
                                  std::equal(expected.begin(), expected.end(), names.begin())
                            : names == expected;
  DELEGATION_CHECK(match, "devices %s, expected %s%s", joined(names).c_str(),
                   joined(expected).c_str(), prefix ? " first" : "");
  if (list != nullptr) ibv_free_device_list(list);
}

int list_scenario(int argc, char** argv) {
  std::vector<std::string> expected;
  bool twice = false;
  int threads = 1;
  bool prefix = false;
  std::string system_library;
  int standin = -1;  // -1: not checked
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--twice") == 0) {
      twice = true;
    } else if (std::strcmp(argv[i], "--prefix") == 0) {
      prefix = true;
    } else if (std::strncmp(argv[i], "--system-loaded=", 16) == 0) {
      system_library = argv[i] + 16;
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else if (std::strcmp(argv[i], "--standin=loaded") == 0) {
      standin = 1;
    } else if (std::strcmp(argv[i], "--standin=absent") == 0) {
      standin = 0;
    } else {
      expected.emplace_back(argv[i]);
    }
  }
  if (threads > 1) {
    // First calls racing each other: the system library must still be loaded exactly once.
    std::vector<std::thread> racers;
    for (int t = 0; t < threads; ++t) racers.emplace_back([&] { list_once(expected, prefix); });
    for (auto& r : racers) r.join();
  }
  for (int round = 0; round < (twice ? 2 : 1); ++round) list_once(expected, prefix);
  if (!system_library.empty()) {
    const auto namespaces = namespaces_holding(system_library);
    DELEGATION_CHECK(namespaces.size() == 1 && namespaces[0] != 0,
                     "%s is not loaded once, in a namespace of its own (%zu namespaces)",
                     system_library.c_str(), namespaces.size());
  }
  if (standin >= 0) check_standin(standin == 1);
  return 0;
}

// Runs the RC exchange (or, with srq, the SRQ counts) on each named device.
int device_scenario(bool srq, int argc, char** argv) {
  // --standin=absent: everything below ran without loading the system library.
  const bool absent = argc > 0 && std::strcmp(argv[0], "--standin=absent") == 0;
  if (absent) {
    --argc;
    ++argv;
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  DELEGATION_CHECK(list != nullptr, "ibv_get_device_list: %s", std::strerror(errno));
  if (list == nullptr) return 1;
  const auto names = device_names(list, n);
  std::printf("devices: %s\n", joined(names).c_str());
  for (int i = 0; i < argc; ++i) {
    ibv_device* device = nullptr;
    for (int d = 0; d < n; ++d) {
      if (names[d] == argv[i]) device = list[d];
    }
    DELEGATION_CHECK(device != nullptr, "no device %s in %s", argv[i], joined(names).c_str());
    if (device == nullptr) continue;
    Serving serving;
    serving.standin = std::strcmp(argv[i], "emu0") != 0;
    serving.library = serving.standin ? standin_path() : our_library();
    if (srq) {
      srq_counts(device, serving);
    } else {
      rc_exchange(device, serving);
    }
  }
  ibv_free_device_list(list);
  if (absent) check_standin(false);
  return 0;
}

// ibv_create_cq with a negative size on `device`: the errno the program sees (0: none).
int refused_create_cq_errno(ibv_device* device) {
  ibv_context* context = ibv_open_device(device);
  DELEGATION_CHECK(context != nullptr, "ibv_open_device: %s", std::strerror(errno));
  if (context == nullptr) return 0;
  errno = 0;
  ibv_cq* cq = ibv_create_cq(context, -1, nullptr, nullptr, 0);
  const int error = errno;
  DELEGATION_CHECK(cq == nullptr, "ibv_create_cq(-1) succeeded on %s", ibv_get_device_name(device));
  if (cq != nullptr) ibv_destroy_cq(cq);
  ibv_close_device(context);
  return error;
}

int errno_scenario() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  DELEGATION_CHECK(list != nullptr, "ibv_get_device_list: %s", std::strerror(errno));
  if (list == nullptr) return 1;
  int soft = -1, system = -1;
  for (int d = 0; d < n; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    if (name == "emu0") soft = refused_create_cq_errno(list[d]);
    if (name == "emuhw0") system = refused_create_cq_errno(list[d]);
  }
  ibv_free_device_list(list);
  DELEGATION_CHECK(soft > 0, "emu0 refused without errno (%d)", soft);
  DELEGATION_CHECK(system == soft, "errno after the refusal on emuhw0 is %d (%s), on emu0 %d (%s)",
                   system, std::strerror(system), soft, std::strerror(soft));
  std::printf("refused on both devices with errno %d\n", soft);
  return 0;
}

}  // namespace
}  // namespace delegation

int main(int argc, char** argv) {
  using namespace delegation;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s list|rc|srq ...\n", argv[0]);
    return 2;
  }
  check_start();
  if (std::strcmp(argv[1], "list") == 0) {
    list_scenario(argc - 2, argv + 2);
  } else if (std::strcmp(argv[1], "rc") == 0) {
    device_scenario(false, argc - 2, argv + 2);
  } else if (std::strcmp(argv[1], "srq") == 0) {
    device_scenario(true, argc - 2, argv + 2);
  } else if (std::strcmp(argv[1], "errno") == 0) {
    errno_scenario();
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", argv[1]);
    return 2;
  }
  if (failures() != 0) {
    std::fprintf(stderr, "%d check(s) failed\n", failures().load());
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
