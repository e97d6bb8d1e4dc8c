// The *_str helpers, rate conversions and fork support: pure functions of their arguments,
// with no device involved.
#include "emu/names.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

EMURDMA_EXPORT const char* ibv_node_type_str(enum ibv_node_type node_type) {
  switch (node_type) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

EMURDMA_EXPORT const char* ibv_port_state_str(enum ibv_port_state port_state) {
  switch (port_state) {
    case IBV_PORT_NOP:
      return "PORT_NOP";
    case IBV_PORT_DOWN:
      return "PORT_DOWN";
    case IBV_PORT_INIT:
      return "PORT_INIT";
    case IBV_PORT_ARMED:
      return "PORT_ARMED";
    case IBV_PORT_ACTIVE:
      return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "PORT_ACTIVE_DEFER";
    default:
      return "invalid state";
  }
}

EMURDMA_EXPORT const char* ibv_event_type_str(enum ibv_event_type event) {
  if (event < IBV_EVENT_CQ_ERR || event > IBV_EVENT_WQ_FATAL) return "unknown";
  return emu::event_name(event);
}

EMURDMA_EXPORT const char* ibv_wc_status_str(enum ibv_wc_status status) {
  if (status < IBV_WC_SUCCESS || status > IBV_WC_TM_RNDV_INCOMPLETE) return "unknown";
  return emu::wc_status_name(status);
}

namespace {

struct RateRow {
  ibv_rate rate;
  int mult;  // multiple of 2.5 Gb/s, or -1 when the rate is not one
  int mbps;
};

constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, -1, 14062},
    {IBV_RATE_56_GBPS, -1, 56250},      {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},    {IBV_RATE_25_GBPS, 10, 25781},
    {IBV_RATE_100_GBPS, 40, 103125},    {IBV_RATE_200_GBPS, 80, 206250},
    {IBV_RATE_300_GBPS, 120, 309375},   {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

EMURDMA_EXPORT int ibv_rate_to_mult(enum ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

EMURDMA_EXPORT enum ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& r : kRates) {
    if (r.mult == mult && mult > 0) return r.rate;
  }
  return IBV_RATE_MAX;
}

EMURDMA_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

EMURDMA_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// Fork: emu0 registers ordinary memory and needs no madvise(MADV_DONTFORK); a real HCA may,
// so the request is handed on when a system library is present.
EMURDMA_EXPORT int ibv_fork_init(void) {
  if (auto* fn = EMURDMA_SYSTEM_FN(ibv_fork_init, "IBVERBS_1.1")) return fn();
  return 0;
}

EMURDMA_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) {
  if (auto* fn = EMURDMA_SYSTEM_FN(ibv_is_fork_initialized, "IBVERBS_1.13")) return fn();
  return IBV_FORK_UNNEEDED;
}

EMURDMA_EXPORT int ibv_dontfork_range(void* base, size_t size) {
  if (auto* fn = EMURDMA_SYSTEM_FN(ibv_dontfork_range, "IBVERBS_1.1")) return fn(base, size);
  return 0;
}

EMURDMA_EXPORT int ibv_dofork_range(void* base, size_t size) {
  if (auto* fn = EMURDMA_SYSTEM_FN(ibv_dofork_range, "IBVERBS_1.1")) return fn(base, size);
  return 0;
}
