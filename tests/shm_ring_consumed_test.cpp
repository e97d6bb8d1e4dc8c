// The ring's read index (RingControl::consumed): what the producer learns of how far the
// consumer has read, for the ACK timer's "slow, not silent" (Link::frames_unread,
// emu/completer.cpp). A record is unread until a drain pass that read it publishes the index;
// padding that a record forced counts as read with it.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>

#include "transports/shm/shm_ring.h"
#include "transports/shm/shm_wire.h"

namespace {

namespace shm = transports::shm;

constexpr size_t kCapacity = 4096;

struct Ring {
  Ring() {
    control.capacity = kCapacity;
    control.seq_salt = 0x0123456789abcdefull;
  }
  shm::RingControl control{};
  alignas(shm::kCacheUnit) std::array<uint8_t, kCapacity> data{};
};

void push(shm::RingProducer& producer, uint32_t size) {
  uint8_t* body = producer.reserve(size);
  ASSERT_NE(body, nullptr);
  std::memset(body, 0x5a, size - sizeof(shm::RecordHead));
  producer.commit(1);
}

// Reads every published record, as one drain pass does, and publishes how far it read.
int drain(shm::RingConsumer& consumer) {
  int records = 0;
  shm::RecordHead head{};
  uint64_t available = 0;
  while (consumer.front(&head, &available) != nullptr) {
    consumer.pop(head.size);
    ++records;
  }
  if (records != 0) consumer.publish_consumed();
  return records;
}

TEST(ShmRingConsumed, AFreshRingHasNothingUnread) {
  auto ring = std::make_unique<Ring>();
  shm::RingProducer producer(&ring->control, ring->data.data());
  EXPECT_FALSE(producer.consumer_behind());
}

TEST(ShmRingConsumed, ARecordIsUnreadUntilADrainPassReadsIt) {
  auto ring = std::make_unique<Ring>();
  shm::RingProducer producer(&ring->control, ring->data.data());
  shm::RingConsumer consumer(&ring->control, ring->data.data());
  push(producer, 64);
  push(producer, 128);
  EXPECT_TRUE(producer.consumer_behind());
  // Read but not yet published (the pass has not ended): still unread for the producer.
  shm::RecordHead head{};
  uint64_t available = 0;
  ASSERT_NE(consumer.front(&head, &available), nullptr);
  consumer.pop(head.size);
  EXPECT_TRUE(producer.consumer_behind());
  EXPECT_EQ(drain(consumer), 1);
  EXPECT_FALSE(producer.consumer_behind());
  // The consumer's read index is not the space it hands back (an eighth of the ring at a time).
  EXPECT_EQ(ring->control.head.load(), 0u);
  push(producer, 64);
  EXPECT_TRUE(producer.consumer_behind());
  EXPECT_EQ(drain(consumer), 1);
  EXPECT_FALSE(producer.consumer_behind());
}

TEST(ShmRingConsumed, PaddingBeforeAWrappedRecordCountsAsReadWithIt) {
  auto ring = std::make_unique<Ring>();
  shm::RingProducer producer(&ring->control, ring->data.data());
  shm::RingConsumer consumer(&ring->control, ring->data.data());
  // 3 x 1024 B and 640 B, read and handed back, leave 384 B at the end of the 4 KiB area,
  // where the next 512 B record cannot start.
  for (int i = 0; i < 3; ++i) push(producer, 1024);
  EXPECT_EQ(drain(consumer), 3);
  consumer.release();
  push(producer, 640);
  EXPECT_EQ(drain(consumer), 1);
  consumer.release();
  push(producer, 512);  // padding of 384 B, then the record at offset 0
  EXPECT_TRUE(producer.consumer_behind());
  EXPECT_EQ(drain(consumer), 1);
  EXPECT_FALSE(producer.consumer_behind());
}

}  // namespace
