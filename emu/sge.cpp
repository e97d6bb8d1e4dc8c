#include "emu/sge.h"

namespace emu {

namespace {

ScatterResult check(const MrTable& mrs, Pd* pd, const ibv_sge* sge, uint32_t n, uint64_t end) {
  uint64_t room = 0;
  for (uint32_t i = 0; i < n && room < end; ++i) {
    if (!mrs.check(sge[i].lkey, pd, sge[i].addr, sge[i].length, IBV_ACCESS_LOCAL_WRITE)) {
      return ScatterResult::kProtection;
    }
    room += sge[i].length;
  }
  return room < end ? ScatterResult::kTooLong : ScatterResult::kOk;
}

// Calls copy(dst, n) for each piece of [offset, offset+len) of the SGE list, in order.
template <typename Copy>
void walk(const ibv_sge* sge, uint32_t n, uint64_t offset, uint64_t len, Copy&& copy) {
  for (uint32_t i = 0; i < n && len > 0; ++i) {
    uint64_t seg = sge[i].length;
    if (offset >= seg) {
      offset -= seg;
      continue;
    }
    uint64_t chunk = std::min(seg - offset, len);
    copy(reinterpret_cast<void*>(sge[i].addr + offset), chunk);
    len -= chunk;
    offset = 0;
  }
}

}  // namespace

ScatterResult scatter(const MrTable& mrs, Pd* pd, const ibv_sge* sge, uint32_t n, uint32_t offset,
                      PayloadSource& payload, uint64_t len) {
  if (n == 1 && offset == 0) {  // most receives: one SGE, no GRH before the payload
    if (!mrs.check(sge[0].lkey, pd, sge[0].addr, sge[0].length, IBV_ACCESS_LOCAL_WRITE)) {
      return len == 0 ? ScatterResult::kOk : ScatterResult::kProtection;
    }
    if (len > sge[0].length) return ScatterResult::kTooLong;
    if (len == 0) return ScatterResult::kOk;
    payload.read(reinterpret_cast<void*>(sge[0].addr), len);
    return ScatterResult::kOk;
  }
  ScatterResult r = check(mrs, pd, sge, n, offset + len);
  if (r != ScatterResult::kOk) return r;
  walk(sge, n, offset, len, [&](void* dst, uint64_t chunk) { payload.read(dst, chunk); });
  return ScatterResult::kOk;
}

uint64_t rnr_timer_ns(uint8_t code) {
  // In units of 10 us, for codes 0..31 (code 0 is the longest, 655.36 ms).
  static constexpr uint32_t kTensOfMicros[32] = {
      65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
      48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return uint64_t{kTensOfMicros[code & 31]} * 10'000;
}

}  // namespace emu
