// The polling interface of ibv_cq_ex (start_poll / next_poll / end_poll and the read_*
// accessors): each step takes one completion from the engine into the CQ's current entry.
#include "emu/cq.h"
#include "verbs_api/internal.h"

namespace verbs_api {

namespace {

int take_one(ibv_cq_ex* cq) {
  EmuCq* c = to_emu(cq);
  int n = c->engine->poll(1, &c->current, c->engine->timestamps() ? &c->current_stamp : nullptr);
  if (n < 0) return -n;
  if (n == 0) return ENOENT;  // ibv_start_poll(3): the CQ is empty
  cq->status = c->current.status;
  cq->wr_id = c->current.wr_id;
  return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return take_one(cq);
}

int next_poll(ibv_cq_ex* cq) {
  return take_one(cq);
}
void end_poll(ibv_cq_ex*) {}

const ibv_wc& cur(ibv_cq_ex* cq) {
  return to_emu(cq)->current;
}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) {
  return cur(cq).opcode;
}
uint32_t read_vendor_err(ibv_cq_ex* cq) {
  return cur(cq).vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* cq) {
  return cur(cq).byte_len;
}
__be32 read_imm_data(ibv_cq_ex* cq) {
  return cur(cq).imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* cq) {
  return cur(cq).qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* cq) {
  return cur(cq).src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* cq) {
  return cur(cq).wc_flags;
}
uint32_t read_slid(ibv_cq_ex* cq) {
  return cur(cq).slid;
}
uint8_t read_sl(ibv_cq_ex* cq) {
  return cur(cq).sl;
}
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) {
  return cur(cq).dlid_path_bits;
}
// Completion timestamps (emu/cq.h): device cycles of kHcaCoreClockKhz (device_profile.h),
// and wall-clock ns.
// Defined only on a CQ created with the matching wc flag; 0 on any other.
uint64_t read_completion_ts(ibv_cq_ex* cq) {
  return to_emu(cq)->current_stamp;
}
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
  EmuCq* c = to_emu(cq);
  return c->engine->timestamps() ? emu::completion_wallclock_ns(c->current_stamp) : 0;
}
// VLANs, flow tags and tag matching are refused at creation (EOPNOTSUPP).

uint16_t read_cvlan(ibv_cq_ex*) {
  return 0;
}
uint32_t read_flow_tag(ibv_cq_ex*) {
  return 0;
}
void read_tm_info(ibv_cq_ex*, ibv_wc_tm_info* info) {
  if (info != nullptr) *info = ibv_wc_tm_info{};
}

}  // namespace

void install_cq_ex_ops(EmuCq* c) {
  ibv_cq_ex& cq = c->cq;
  cq.comp_mask = 0;
  cq.start_poll = start_poll;
  cq.next_poll = next_poll;
  cq.end_poll = end_poll;
  cq.read_opcode = read_opcode;
  cq.read_vendor_err = read_vendor_err;
  cq.read_byte_len = read_byte_len;
  cq.read_imm_data = read_imm_data;
  cq.read_qp_num = read_qp_num;
  cq.read_src_qp = read_src_qp;
  cq.read_wc_flags = read_wc_flags;
  cq.read_slid = read_slid;
  cq.read_sl = read_sl;
  cq.read_dlid_path_bits = read_dlid_path_bits;
  cq.read_completion_ts = read_completion_ts;
  cq.read_cvlan = read_cvlan;
  cq.read_flow_tag = read_flow_tag;
  cq.read_tm_info = read_tm_info;
  cq.read_completion_wallclock_ns = read_completion_wallclock_ns;
}

// ibv_query_rt_values_ex(3): the free-running clock of completion timestamps, in cycles, as
// mlx5 reports it (tv_sec 0, tv_nsec the cycle count).
int query_rt_values_op(ibv_context*, ibv_values_ex* values) {
  if (values == nullptr) return EINVAL;
  uint32_t answered = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = static_cast<long>(emu::completion_clock_ns());
    answered |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = answered;
  return 0;
}

}  // namespace verbs_api
