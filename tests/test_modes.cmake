# The modes a program test runs in: shm and tcp always; netns (TCP across two network namespaces)
# for every program locally, and in CI for a chosen few.
#
# The netns leg runs the same TCP transport as the tcp leg; what it adds is two hosts' addresses
# (GIDs from another namespace's interface, the CM gateway's dial with the job secret, routes).
# That is proved by one program per way of connecting, not by every program again: in CI the
# netns entries (about 7 minutes of a CI machine's two cores) shrink to the ones listed here,
# each the representative of what crosses the namespaces differently:
# - out-of-band TCP exchange of GIDs (rdma-core's pingpongs, perftest): RC and UD pingpongs, a
#   bandwidth sweep of every size, an atomic, 128 QPs on one connection (own queues, one SRQ);
# - rdma_cm across hosts (perftest -R, rping, udaddy's SIDR, rsockets);
# - DAT's CM (dtest, its secret variant, dtestx's UD extension, dapltest's transactions);
# - UCX's own address exchange (one RC and one UD transport).
# EMURDMA_NETNS_ALL=ON (the default outside CI, where CI=true is not set) registers every netns
# entry; docs/ci.md says so.
set(emurdma_netns_default ON)
if("$ENV{CI}" STREQUAL "true")
  set(emurdma_netns_default OFF)
endif()
option(EMURDMA_NETNS_ALL "every program test also across two network namespaces (else CI's few)"
       ${emurdma_netns_default})
set(EMURDMA_NETNS_IN_CI
    Programs.ibv_rc_pingpong Programs.ibv_ud_pingpong_e Programs.ib_write_bw_a
    Programs.ib_atomic_bw_cas Programs.ib_send_bw_srq_R Programs.ib_read_lat_R
    Programs.ib_send_bw_q128 Programs.ib_send_bw_srq_q128
    DatPrograms.dtest DatPrograms.dtestcm_secret DatPrograms.dtestx_ud
    DatPrograms.dapltest_trans_rdma
    RdmaCmPrograms.rping RdmaCmPrograms.udaddy RdmaCmPrograms.rstream
    Middleware.ucx_perftest.tag_bw.rc_verbs Middleware.ucx_perftest.ucp_get.ud_verbs)

# emurdma_test_modes(<out-var> <test name without /mode> <modes>...): <modes> without netns
# when this test's netns entry is not wanted.
function(emurdma_test_modes out test)
  set(modes ${ARGN})
  if(NOT EMURDMA_NETNS_ALL AND NOT test IN_LIST EMURDMA_NETNS_IN_CI)
    list(REMOVE_ITEM modes netns)
  endif()
  set(${out} ${modes} PARENT_SCOPE)
endfunction()
