#include "transports/shm/shm_bulk_write.h"

#include <algorithm>
#include <cstring>

namespace transports::shm {

void BulkWrite::begin(const FrameHeader& header, const DirectTarget& target, uint64_t index) {
  active_ = true;
  activity_.writes.fetch_add(1, std::memory_order_relaxed);
  header_ = header;
  target_ = target;
  index_ = index;
  done_ = 0;
  lost_ = false;
}

void BulkWrite::begin_remote(const FrameHeader& header, const uint8_t* state_word,
                             const RemoteIov* iov, uint32_t count, pid_t pid,
                             const DirectTarget& target, uint64_t index) {
  std::copy(iov, iov + count, pieces_);
  remote_.emplace(pid, state_word, pieces_, count);
  begin(header, target, index);
}

void BulkWrite::begin_mapped(const FrameHeader& header, const uint8_t* state_word,
                             const RemoteIov* pieces, const uint32_t* objects, uint32_t count,
                             const DirectTarget& target, uint64_t index) {
  std::copy(pieces, pieces + count, pieces_);
  std::copy(objects, objects + count, objects_);
  for (pinned_ = 0; pinned_ < count; ++pinned_) side_.pin(objects_[pinned_]);
  mapped_.emplace(state_word, pieces_, count);
  begin(header, target, index);
}

bool BulkWrite::copy_piece(FrameSink* sink, uint64_t bytes) {
  ByReferencePayload& from = record();
  const size_t len = static_cast<size_t>(std::min<uint64_t>(from.size(), bytes));
  if (len == 0) return true;
  if (!lost_ && sink != nullptr && sink->hold_region(target_.region_key)) {
    from.read(target_.addr + done_, len);
    sink->release_region(target_.region_key);
    // The peer's memory could not be read: the rest is not copied (as zeros) either; the
    // delivery that follows reports it and takes the link down.
    if (from.failed()) from.skip(from.size());
  } else {
    // The region went (or the sink did): nothing more is written there.
    lost_ = true;
    from.skip(len);
  }
  done_ += len;
  return from.size() == 0;
}

void BulkWrite::end() {
  for (uint32_t i = 0; i < pinned_; ++i) side_.unpin(objects_[i]);
  pinned_ = 0;
  remote_.reset();
  mapped_.reset();
  if (active_) activity_.writes.fetch_sub(1, std::memory_order_relaxed);
  active_ = false;
}

bool record_dst_qpn(const uint8_t* body, uint32_t body_bytes, uint32_t kind, uint32_t* qpn,
                    uint64_t* payload_bytes) {
  if (kind == kFrameShort) {
    ShortFrame sf;
    if (body_bytes < sizeof sf) return false;
    std::memcpy(&sf, body, sizeof sf);
    *qpn = sf.dst_qpn;
    *payload_bytes = sf.length;
    return true;
  }
  if (kind != kFrameInline && kind != kFrameRemote && kind != kFrameMapped) return false;
  FrameRecord fr;
  if (body_bytes < sizeof fr) return false;
  std::memcpy(&fr, body, sizeof fr);
  *qpn = fr.header.dst_qpn;
  *payload_bytes = fr.payload_bytes;
  return true;
}

}  // namespace transports::shm
