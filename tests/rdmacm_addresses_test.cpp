// Addresses (rdma_getaddrinfo(3), rdma_bind_addr(3), rdma_resolve_addr(3),
// rdma_resolve_route(3)) and devices (rdma_get_devices(3)) on emu0.
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

// An address of the documentation range (TEST-NET-2) that no interface here holds.
constexpr const char* kRemote = "198.51.100.7";

bool is_interface_address(const sockaddr_in& a) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.sin_addr.s_addr)
      found = true;
  }
  freeifaddrs(list);
  return found;
}

std::string device_name(rdma_cm_id* id) {
  return id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : "";
}

}  // namespace

TEST(RdmaCmAddrInfo, NumericIpv4ActiveGivesTheDestination) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  EXPECT_EQ(res->ai_flags & RAI_PASSIVE, 0);
  EXPECT_EQ(res->ai_src_addr, nullptr);
  ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_in));
  auto* dst = reinterpret_cast<sockaddr_in*>(res->ai_dst_addr);
  EXPECT_EQ(ntohs(dst->sin_port), 7471);
  EXPECT_EQ(dst->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  rdma_freeaddrinfo(res);
}

TEST(RdmaCmAddrInfo, NumericIpv6) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_NUMERICHOST;
  hints.ai_qp_type = IBV_QPT_RC;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("::1", "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_family, AF_INET6);
  ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_in6));
  auto* dst = reinterpret_cast<sockaddr_in6*>(res->ai_dst_addr);
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&dst->sin6_addr));
  EXPECT_EQ(ntohs(dst->sin6_port), 7471);
  rdma_freeaddrinfo(res);
}

TEST(RdmaCmAddrInfo, PassiveGivesAWildcardSource) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_family = AF_INET;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_flags & RAI_PASSIVE, RAI_PASSIVE);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  ASSERT_EQ(res->ai_src_len, sizeof(sockaddr_in));
  auto* src = reinterpret_cast<sockaddr_in*>(res->ai_src_addr);
  EXPECT_EQ(src->sin_addr.s_addr, htonl(INADDR_ANY));
  EXPECT_EQ(ntohs(src->sin_port), 7471);
  rdma_freeaddrinfo(res);
}

TEST(RdmaCmAddrInfo, UdpPortSpaceGivesAUdQp) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_UDP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP);
  rdma_freeaddrinfo(res);
}

TEST(RdmaCmAddrInfo, SourceFromTheHintsIsKept) {
  sockaddr_in src = ipv4("127.0.0.1", 0);
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_src_addr = as_sockaddr(src);
  hints.ai_src_len = sizeof(src);
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  ASSERT_EQ(res->ai_src_len, sizeof(sockaddr_in));
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof(src)), 0);
  rdma_freeaddrinfo(res);
}

TEST(RdmaCmAddrInfo, BadInputGivesLibrdmacmsErrors) {
  rdma_addrinfo* res = nullptr;
  EXPECT_FAILS_WITH(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), EINVAL);
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_NUMERICHOST;
  // getaddrinfo's own code comes back, as librdmacm returns it.
  EXPECT_EQ(rdma_getaddrinfo("not-a-number", "7471", &hints, &res), EAI_NONAME);
  hints = {};
  hints.ai_flags = RAI_FAMILY;
  hints.ai_family = AF_IB;
  EXPECT_FAILS_WITH(rdma_getaddrinfo("::1", "7471", &hints, &res), EAFNOSUPPORT);
}

TEST(RdmaCmDevices, GetDevicesListsEmu0) {
  int count = -1;
  ibv_context** list = rdma_get_devices(&count);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(count, 1);
  EXPECT_EQ(list[count], nullptr);
  bool emu0 = false;
  for (int i = 0; i < count; ++i)
    emu0 |= std::string(ibv_get_device_name(list[i]->device)) == "emu0";
  EXPECT_TRUE(emu0);
  // Opened once per process: the same contexts again.
  ibv_context** again = rdma_get_devices(nullptr);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again[0], list[0]);
  rdma_free_devices(again);
  rdma_free_devices(list);
}

TEST(RdmaCmBind, LocalAddressBindsTheIdToEmu0) {
  AsyncId a;
  sockaddr_in addr = ipv4("127.0.0.1", 20886);
  ASSERT_EQ(rdma_bind_addr(a.id, as_sockaddr(addr)), 0) << strerror(errno);
  EXPECT_EQ(device_name(a.id), "emu0");
  EXPECT_EQ(a.id->port_num, 1);
  EXPECT_NE(a.id->pd, nullptr);
  EXPECT_EQ(ntohs(rdma_get_src_port(a.id)), 20886);
  EXPECT_EQ(rdma_get_local_addr(a.id)->sa_family, AF_INET);
  EXPECT_FAILS_WITH(rdma_bind_addr(a.id, as_sockaddr(addr)), EINVAL);  // bound already
}

TEST(RdmaCmBind, WildcardBindsNoDeviceAndPortZeroIsChosen) {
  AsyncId a;
  sockaddr_in6 any = ipv6("::", 0);
  ASSERT_EQ(rdma_bind_addr(a.id, as_sockaddr(any)), 0);
  EXPECT_EQ(a.id->verbs, nullptr);  // rdma_bind_addr(3): a wildcard binds no device
  EXPECT_GE(ntohs(rdma_get_src_port(a.id)), 32768);
}

TEST(RdmaCmBind, NonLocalAddressIsEaddrnotavail) {
  sockaddr_in addr = ipv4(kRemote, 20887);
  if (is_interface_address(addr)) GTEST_SKIP() << kRemote << " is local here";
  AsyncId a;
  EXPECT_FAILS_WITH(rdma_bind_addr(a.id, as_sockaddr(addr)), EADDRNOTAVAIL);
}

TEST(RdmaCmBind, RefusesNoAddressAndForeignFamilies) {
  AsyncId a;
  EXPECT_FAILS_WITH(rdma_bind_addr(a.id, nullptr), EINVAL);
  sockaddr_storage ib{};
  ib.ss_family = AF_IB;
  EXPECT_FAILS_WITH(rdma_bind_addr(a.id, reinterpret_cast<sockaddr*>(&ib)), EAFNOSUPPORT);
}

TEST(RdmaCmBind, SamePortTwiceInOneProcessIsEaddrinuse) {
  AsyncId first, second, wildcard, udp(RDMA_PS_UDP);
  sockaddr_in addr = ipv4("127.0.0.1", 20888);
  ASSERT_EQ(rdma_bind_addr(first.id, as_sockaddr(addr)), 0);
  EXPECT_FAILS_WITH(rdma_bind_addr(second.id, as_sockaddr(addr)), EADDRINUSE);
  sockaddr_in any = ipv4("0.0.0.0", 20888);
  EXPECT_FAILS_WITH(rdma_bind_addr(wildcard.id, as_sockaddr(any)), EADDRINUSE);
  // Port spaces are apart: the UDP space's 20888 is free.
  EXPECT_EQ(rdma_bind_addr(udp.id, as_sockaddr(addr)), 0);
  // Freed with its id.
  rdma_destroy_id(first.id);
  first.id = nullptr;
  EXPECT_EQ(rdma_bind_addr(second.id, as_sockaddr(addr)), 0);
}

// rdma_cm ports are held for the whole network namespace: a port another process holds is
// EADDRINUSE here (whatever the addresses: docs/usage.md, "Connection manager"), and free again
// once that process is gone.
TEST(RdmaCmBind, PortHeldByAnotherProcessIsEaddrinuseUntilItEnds) {
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A wildcard bind attaches no device: the child touches no verbs state.
    rdma_cm_id* id = nullptr;
    rdma_event_channel* channel = rdma_create_event_channel();
    sockaddr_in any = ipv4("0.0.0.0", 20891);
    char verdict = (channel != nullptr && rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0 &&
                    rdma_bind_addr(id, as_sockaddr(any)) == 0)
                       ? 'y'
                       : 'n';
    if (write(ready[1], &verdict, 1) != 1) _exit(2);
    char end;
    if (read(done[0], &end, 1) < 0) _exit(2);
    _exit(0);
  }
  char verdict = 0;
  ASSERT_EQ(read(ready[0], &verdict, 1), 1);
  ASSERT_EQ(verdict, 'y');
  AsyncId mine, later;
  sockaddr_in addr = ipv4("127.0.0.1", 20891);
  EXPECT_FAILS_WITH(rdma_bind_addr(mine.id, as_sockaddr(addr)), EADDRINUSE);
  ASSERT_EQ(write(done[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(rdma_bind_addr(later.id, as_sockaddr(addr)), 0) << strerror(errno);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
}

TEST(RdmaCmBind, ReuseAddrOnBothIdsSharesThePort) {
  AsyncId first, second;
  int on = 1;
  ASSERT_EQ(rdma_set_option(first.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on)),
            0);
  ASSERT_EQ(rdma_set_option(second.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on)),
            0);
  sockaddr_in addr = ipv4("127.0.0.1", 20889);
  ASSERT_EQ(rdma_bind_addr(first.id, as_sockaddr(addr)), 0);
  EXPECT_EQ(rdma_bind_addr(second.id, as_sockaddr(addr)), 0);
}

TEST(RdmaCmResolve, Loopback4ResolvesAddressAndRoute) {
  AsyncId a;
  resolve_loopback(a);
  EXPECT_EQ(device_name(a.id), "emu0");
  EXPECT_EQ(a.id->port_num, 1);
  auto* src = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(a.id));
  EXPECT_EQ(src->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(ntohs(src->sin_port), 0);  // an ephemeral rdma_cm port
  EXPECT_EQ(ntohs(rdma_get_dst_port(a.id)), 7471);
  ASSERT_EQ(a.id->route.num_paths, 1);
  ASSERT_NE(a.id->route.path_rec, nullptr);
  const ibv_sa_path_rec& path = *a.id->route.path_rec;
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(a.id->verbs, 1, 0, &gid), 0);
  EXPECT_EQ(std::memcmp(&path.sgid, &gid, sizeof(gid)), 0);  // emu0's GID
  // The destination's GID as RoCE derives it: ::ffff:127.0.0.1.
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(path.dgid.raw, mapped, 16), 0);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(a.id->verbs, 1, &port), 0);
  EXPECT_EQ(path.mtu, port.active_mtu);
  EXPECT_EQ(path.rate, IBV_RATE_100_GBPS);  // emu0's port: 4x EDR
  EXPECT_EQ(path.pkey, htons(0xffff));
}

TEST(RdmaCmResolve, Ipv6LoopbackResolves) {
  AsyncId a;
  sockaddr_in6 dst = ipv6("::1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  a.expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  auto* src = reinterpret_cast<sockaddr_in6*>(rdma_get_local_addr(a.id));
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&src->sin6_addr));
  ASSERT_EQ(rdma_resolve_route(a.id, 2000), 0);
  a.expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_EQ(device_name(a.id), "emu0");
}

TEST(RdmaCmResolve, NonLocalDestinationResolvesFromTheRoutesSource) {
  sockaddr_in dst = ipv4(kRemote, 7471);
  // The kernel is the oracle: the source a UDP socket gets on the route, or its error.
  int probe = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in route_src{};
  socklen_t len = sizeof(route_src);
  int route_error = 0;
  if (connect(probe, as_sockaddr(dst), sizeof(dst)) != 0 ||
      getsockname(probe, as_sockaddr(route_src), &len) != 0)
    route_error = errno;
  close(probe);

  AsyncId a;
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  if (route_error != 0) {
    a.expect_event(RDMA_CM_EVENT_ADDR_ERROR, -route_error);
    return;
  }
  a.expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  auto* src = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(a.id));
  EXPECT_EQ(src->sin_addr.s_addr, route_src.sin_addr.s_addr);
  EXPECT_EQ(device_name(a.id), "emu0");
  ASSERT_EQ(rdma_resolve_route(a.id, 2000), 0);
  a.expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
}

TEST(RdmaCmResolve, RouteBeforeAddressIsEinval) {
  AsyncId a;
  EXPECT_FAILS_WITH(rdma_resolve_route(a.id, 2000), EINVAL);
  EXPECT_FAILS_WITH(rdma_resolve_addr(a.id, nullptr, nullptr, 2000), EINVAL);
}
