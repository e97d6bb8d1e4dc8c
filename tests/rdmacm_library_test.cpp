// The library as programs see it: its exports against the system librdmacm's, the
// event names, and what is refused or not wired yet.
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

constexpr const char* kSystemLibrary = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

// name@version of every symbol the library defines, version nodes included.
std::set<std::string> defined_symbols(const std::string& path) {
  std::set<std::string> out;
  std::string command = "objdump -T " + path;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char line[1024];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    std::string text(line);
    if (text.find("*UND*") != std::string::npos) continue;
    if (text.find(" DF ") == std::string::npos && text.find(" DO ") == std::string::npos) continue;
    std::istringstream fields(text);
    std::string field, version, name;
    while (fields >> field) {
      version = name;
      name = field;
    }
    out.insert(name + "@" + version);
  }
  pclose(pipe);
  return out;
}

}  // namespace

TEST(RdmaCmLibrary, ExportsEverySystemSymbolWithItsVersion) {
  // librdmacm1 is a setup dependency (scripts/setup.sh): its absence is a failure.
  ASSERT_TRUE(std::ifstream(kSystemLibrary).good()) << kSystemLibrary << " missing";
  std::set<std::string> system = defined_symbols(kSystemLibrary);
  std::set<std::string> ours = defined_symbols(EMURDMA_RDMACM_PATH);
  ASSERT_GT(system.size(), 70u);
  EXPECT_EQ(ours, system);
  EXPECT_TRUE(system.count("rdma_init_qp_attr@RDMACM_1.2"));
}

TEST(RdmaCmLibrary, EventStrGivesLibrdmacmsNames) {
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED), "RDMA_CM_EVENT_ADDR_RESOLVED");
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_REJECTED), "RDMA_CM_EVENT_REJECTED");
  EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(99)), "UNKNOWN EVENT");
}

TEST(RdmaCmLibrary, ConnectionCallsNeedTheirStates) {
  // The kernel's rules: connect needs a resolved route, accept and reject a connection request,
  // disconnect a connection (or an attempt); each is EINVAL otherwise.
  AsyncId a;
  EXPECT_FAILS_WITH(rdma_connect(a.id, nullptr), EINVAL);
  EXPECT_FAILS_WITH(rdma_accept(a.id, nullptr), EINVAL);
  EXPECT_FAILS_WITH(rdma_reject(a.id, nullptr, 0), EINVAL);
  EXPECT_FAILS_WITH(rdma_disconnect(a.id), EINVAL);
}

TEST(RdmaCmLibrary, ListenOnAnUnboundIdBindsTheWildcardAndAPort) {
  // rdma_listen on an idle id binds it to INADDR_ANY and an ephemeral port first (the kernel).
  AsyncId a;
  ASSERT_EQ(rdma_listen(a.id, 4), 0) << strerror(errno);
  EXPECT_EQ(rdma_get_local_addr(a.id)->sa_family, AF_INET);
  EXPECT_NE(rdma_get_src_port(a.id), 0);
  EXPECT_FAILS_WITH(rdma_connect(a.id, nullptr), EINVAL);  // a listener does not connect
}

TEST(RdmaCmLibrary, MulticastIsNotOffered) {
  AsyncId a(RDMA_PS_UDP);
  sockaddr_in group = ipv4("239.1.1.1");
  EXPECT_FAILS_WITH(rdma_join_multicast(a.id, as_sockaddr(group), nullptr), EOPNOTSUPP);
  rdma_cm_join_mc_attr_ex attr{};
  attr.addr = as_sockaddr(group);
  EXPECT_FAILS_WITH(rdma_join_multicast_ex(a.id, &attr, nullptr), EOPNOTSUPP);
  EXPECT_FAILS_WITH(rdma_leave_multicast(a.id, as_sockaddr(group)), EADDRNOTAVAIL);
}

TEST(RdmaCmLibrary, EceIsKeptLocallyAndNoneComesFromThePeer) {
  AsyncId a;
  ibv_ece ece{};
  EXPECT_FAILS_WITH(rdma_set_local_ece(a.id, &ece), EINVAL);  // vendor 0
  ece.vendor_id = 0x15b3;
  ece.options = 1;
  EXPECT_EQ(rdma_set_local_ece(a.id, &ece), 0);
  ibv_ece remote{1, 2, 3};
  EXPECT_EQ(rdma_get_remote_ece(a.id, &remote), 0);
  EXPECT_EQ(remote.vendor_id, 0u);
  EXPECT_EQ(remote.options, 0u);
}

TEST(RdmaCmLibrary, IbPortSpaceIsRefused) {
  rdma_cm_id* id = nullptr;
  EXPECT_FAILS_WITH(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_IB), EPROTONOSUPPORT);
  EXPECT_FAILS_WITH(rdma_create_id(nullptr, &id, nullptr, static_cast<rdma_port_space>(0x999)),
                    EINVAL);
}
