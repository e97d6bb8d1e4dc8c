// The shared-memory transport (transports/shm) at the wire level: its rings, GIDs and
// segments on their own, the attach handshake refusing another user, hostile records written
// by a hand-made peer, reading a peer's memory in place, and dropped connections. The engine
// running over shm is tested in transport_engine_test.cpp; nothing here goes through a QP.
#include "transports/shm/shm_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emu/poll_demand.h"
#include "emu/transport.h"
#include "tests/memfd_buffer.h"
#include "tests/run_length.h"
#include "tests/shm_test_peers.h"
#include "tests/spare_descriptors.h"
#include "transports/auto/auto_transport.h"
#include "transports/shm/guarded_copy.h"
#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_link.h"
#include "transports/shm/shm_payload.h"
#include "transports/shm/shm_ring.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_wire.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/test_support.h"

namespace {

using namespace std::chrono_literals;
using namespace shm_test;
using Clock = std::chrono::steady_clock;
using emu::FrameHeader;
using emu::FrameOp;
using emu::Gid;
using emu::Link;
using emu::Transport;
using emu_test::MemfdBuffer;
using transports::shm::FrameRecord;
using transports::shm::RecordHead;
using transports::shm::RemoteIov;
using transports::shm::RingConsumer;
using transports::shm::RingControl;
using transports::shm::RingProducer;
using transports::shm::Segment;
namespace shm = transports::shm;

// =============================================================================================
// Rings

// A ring in private memory, laid out as in a segment: control block, then the data area.
template <size_t Capacity>
struct TestRing {
  static_assert((Capacity & (Capacity - 1)) == 0, "a ring's capacity is a power of two");
  TestRing() {
    control.capacity = Capacity;
    control.seq_salt = 0x5eed5eed12345678ull;
  }
  RingProducer producer() { return RingProducer(&control, data.data()); }
  RingConsumer consumer() { return RingConsumer(&control, data.data()); }

  RingControl control{};
  alignas(shm::kCacheUnit) std::array<uint8_t, Capacity> data{};
};

constexpr size_t kSmallRing = 4096;
constexpr size_t kStressRing = 16384;

// Writes a record of `size` bytes (head included) whose body is `fill`, and publishes it.
bool push(RingProducer& producer, uint32_t size, uint32_t kind, uint8_t fill) {
  uint8_t* body = producer.reserve(size);
  if (body == nullptr) return false;
  std::memset(body, fill, size - sizeof(RecordHead));
  producer.commit(kind);
  return true;
}

// What front() shows of the oldest record, copied so the caller may pop it afterwards.
struct Popped {
  bool present = false;
  uint32_t size = 0;
  uint32_t kind = 0;
  std::vector<uint8_t> body;
  const uint8_t* at = nullptr;  // where the record lay in the data area
};

// Consumes the oldest record and hands its space back, as one drain pass of one record does.
Popped pop(RingConsumer& consumer) {
  Popped p;
  uint64_t available = 0;
  RecordHead head{};
  const uint8_t* rec = consumer.front(&head, &available);
  if (rec == nullptr) return p;
  p.present = true;
  p.size = head.size;
  p.kind = head.kind;
  p.at = rec;
  if (p.size >= sizeof(RecordHead) && p.size <= available) {
    const uint8_t* body = rec + sizeof(RecordHead);
    p.body.assign(body, body + (p.size - sizeof(RecordHead)));
  }
  consumer.pop(p.size);
  consumer.release();
  return p;
}

TEST(ShmRing, RecordsArriveInOrderWithTheirKindsAndBytes) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  EXPECT_TRUE(consumer.empty());
  EXPECT_FALSE(pop(consumer).present);
  // Several laps of the ring, a few records at a time, sizes from the smallest to the largest.
  uint32_t sent = 0, received = 0;
  // Every size up to max_record(), in a scrambled order.
  const uint32_t largest_body = producer.max_record() - sizeof(RecordHead);
  const auto size_of = [&](uint32_t i) {
    return shm::record_size(sizeof(RecordHead) + (i * 37) % (largest_body + 1));
  };
  while (received < 200) {
    for (int k = 0; k < 3; ++k, ++sent) {
      ASSERT_TRUE(push(producer, size_of(sent), 1 + sent % 7, static_cast<uint8_t>(sent)));
    }
    EXPECT_FALSE(consumer.empty());
    while (received < sent) {
      SCOPED_TRACE("record " + std::to_string(received));
      Popped p = pop(consumer);
      ASSERT_TRUE(p.present);
      EXPECT_EQ(p.size, size_of(received));
      EXPECT_EQ(p.kind, 1 + received % 7);
      EXPECT_EQ(p.body,
                std::vector<uint8_t>(p.size - sizeof(RecordHead), static_cast<uint8_t>(received)));
      ++received;
    }
    EXPECT_TRUE(consumer.empty());
  }
}

TEST(ShmRing, RecordThatWouldCrossTheEndIsPrecededByPaddingAndArrivesWhole) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  // Move both indices to offset 3008.
  for (uint32_t size : {1024u, 1024u, 960u}) ASSERT_TRUE(push(producer, size, 1, 0));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pop(consumer).present);
  ASSERT_TRUE(push(producer, 1024, 2, 0xa1));  // 3008..4032: fits before the end
  ASSERT_TRUE(push(producer, 192, 3, 0xb2));   // 4032..4224 would cross: padding, then at 0
  // The padding record the producer left at 4032 runs exactly to the end.
  RecordHead padding;
  std::memcpy(&padding, ring->data.data() + 4032, sizeof padding);
  EXPECT_EQ(padding.kind, shm::kPaddingRecord);
  EXPECT_EQ(padding.size, kSmallRing - 4032);
  EXPECT_EQ(padding.seq, shm::record_seq(4032, ring->control.seq_salt));

  Popped first = pop(consumer);
  ASSERT_TRUE(first.present);
  EXPECT_EQ(first.kind, 2u);
  EXPECT_EQ(first.body, std::vector<uint8_t>(1024 - sizeof(RecordHead), 0xa1));
  Popped wrapped = pop(consumer);  // the padding is skipped, never shown
  ASSERT_TRUE(wrapped.present);
  EXPECT_EQ(wrapped.kind, 3u);
  EXPECT_EQ(wrapped.size, 192u);
  EXPECT_EQ(wrapped.at, ring->data.data());
  EXPECT_EQ(wrapped.body, std::vector<uint8_t>(192 - sizeof(RecordHead), 0xb2));
  EXPECT_TRUE(consumer.empty());
}

TEST(ShmRing, RecordEndingExactlyAtTheEndNeedsNoPadding) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(push(producer, 1024, 1, 0));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pop(consumer).present);
  ASSERT_TRUE(push(producer, 1024, 5, 0x11));  // 3072..4096
  ASSERT_TRUE(push(producer, 64, 6, 0x22));    // at 0, nothing to pad
  Popped last_before_end = pop(consumer);
  EXPECT_EQ(last_before_end.at, ring->data.data() + 3072);
  EXPECT_EQ(last_before_end.kind, 5u);
  Popped at_start = pop(consumer);
  EXPECT_EQ(at_start.at, ring->data.data());
  EXPECT_EQ(at_start.kind, 6u);
  EXPECT_EQ(at_start.body, std::vector<uint8_t>(64 - sizeof(RecordHead), 0x22));
}

// Fills an empty ring of kSmallRing bytes completely: four records of kind 1, 1024 bytes each.
void fill_to_the_brim(RingProducer& producer) {
  ASSERT_EQ(producer.max_record(), 1024u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(push(producer, 1024, 1, 0));
}

// The head of the oldest record, which must be there (it is not consumed).
RecordHead front_head(RingConsumer& consumer) {
  uint64_t available = 0;
  RecordHead head{};
  EXPECT_NE(consumer.front(&head, &available), nullptr);
  return head;
}

TEST(ShmRing, ReserveRefusesWhenFullAndSucceedsOnceTheConsumerPops) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  fill_to_the_brim(producer);
  EXPECT_EQ(producer.reserve(64), nullptr);
  EXPECT_EQ(producer.reserve(1024), nullptr);
  ASSERT_TRUE(pop(consumer).present);  // 1024 bytes free, at the start
  EXPECT_EQ(producer.reserve(producer.max_record() + 64), nullptr);  // never more
  ASSERT_TRUE(push(producer, 1024, 2, 0x5a));                        // exactly the room left
  EXPECT_EQ(producer.reserve(64), nullptr);
  // What was queued before and after the full ring comes out intact and in order.
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(pop(consumer).kind, 1u);
  Popped after = pop(consumer);
  EXPECT_EQ(after.kind, 2u);
  EXPECT_EQ(after.body, std::vector<uint8_t>(1024 - sizeof(RecordHead), 0x5a));
  EXPECT_TRUE(consumer.empty());
}

TEST(ShmRing, MaxRecordIsAQuarterOfTheRingAndIsEnforced) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  EXPECT_EQ(producer.max_record(), kSmallRing / 4);
  EXPECT_EQ(producer.reserve(producer.max_record() + 64), nullptr);  // even in an empty ring
  EXPECT_NE(producer.reserve(producer.max_record()), nullptr);
}

// Records start on cache lines: a size that is not a whole number of lines is refused.
TEST(ShmRing, ReserveRefusesSizesThatAreNotWholeLines) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  EXPECT_EQ(shm::record_size(sizeof(RecordHead) + 1), shm::kRecordAlign);
  EXPECT_EQ(producer.reserve(shm::kRecordAlign - 8), nullptr);
  EXPECT_EQ(producer.reserve(shm::kRecordAlign + 8), nullptr);
  EXPECT_NE(producer.reserve(shm::kRecordAlign), nullptr);
}

// The wake-up protocol (shm_ring.h): the producer learns of a sleeping consumer when it
// reserves its next record, once per announcement.
TEST(ShmRing, ConsumerSleepingIsTakenExactlyOnceAfterAnnounce) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  EXPECT_FALSE(producer.take_consumer_sleeping());
  ASSERT_TRUE(consumer.announce_sleep(consumer.next_index()));
  EXPECT_FALSE(producer.take_consumer_sleeping());  // nothing sent yet: nobody to wake
  ASSERT_TRUE(push(producer, 64, 1, 0));
  EXPECT_TRUE(producer.take_consumer_sleeping());
  EXPECT_FALSE(producer.take_consumer_sleeping());  // one doorbell per announcement
  ASSERT_TRUE(push(producer, 64, 1, 1));
  EXPECT_FALSE(producer.take_consumer_sleeping());  // publishing alone asks for no doorbell
  RecordHead head{};
  uint64_t available = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_NE(consumer.front(&head, &available), nullptr);
    consumer.pop(head.size);
  }
  ASSERT_TRUE(consumer.announce_sleep(consumer.next_index()));
  consumer.cancel_sleep();
  ASSERT_TRUE(push(producer, 64, 1, 2));
  EXPECT_FALSE(producer.take_consumer_sleeping());  // taken back before the producer looked
}

// A record reserved but not yet published keeps the consumer awake: it sees nothing to read
// yet, and the producer, which looked at the flag when it reserved, would ring no doorbell.
TEST(ShmRing, AConsumerMayNotSleepPastARecordBeingWritten) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  ASSERT_NE(producer.reserve(shm::kRecordAlign), nullptr);
  EXPECT_TRUE(consumer.empty());
  EXPECT_FALSE(consumer.announce_sleep(consumer.next_index()));
  producer.commit(1);
  EXPECT_FALSE(producer.take_consumer_sleeping());
  RecordHead head{};
  uint64_t available = 0;
  ASSERT_NE(consumer.front(&head, &available), nullptr);
  consumer.pop(head.size);
  EXPECT_TRUE(consumer.announce_sleep(consumer.next_index()));  // all read: it may sleep
  // A stale index (a drain that moved on since) refuses, and sets nothing.
  consumer.cancel_sleep();
  EXPECT_FALSE(consumer.announce_sleep(0));
  ASSERT_TRUE(push(producer, 64, 1, 0));
  EXPECT_FALSE(producer.take_consumer_sleeping());
}

TEST(ShmRing, ReleaseReportsAWaitingProducerExactlyOnce) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  fill_to_the_brim(producer);
  EXPECT_FALSE(producer.wait_for_room(1024));  // full: the producer may sleep
  // A quarter of the ring is more than the eighth pop() keeps back: handed back at once.
  EXPECT_TRUE(consumer.pop(front_head(consumer).size));   // the producer's doorbell must ring
  EXPECT_FALSE(consumer.pop(front_head(consumer).size));  // once only
  EXPECT_FALSE(consumer.release());
  EXPECT_NE(producer.reserve(1024), nullptr);
}

TEST(ShmRing, SmallRecordsGoBackToTheProducerAtRelease) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  // Fill the ring with 64-byte records.
  size_t pushed = 0;
  while (push(producer, 64, 1, 0)) ++pushed;
  EXPECT_EQ(pushed, kSmallRing / 64);
  EXPECT_FALSE(producer.wait_for_room(64));
  uint64_t available = 0;
  RecordHead head{};
  ASSERT_NE(consumer.front(&head, &available), nullptr);
  EXPECT_EQ(available, kSmallRing);
  EXPECT_FALSE(consumer.pop(head.size));  // kept back until release
  EXPECT_EQ(producer.reserve(64), nullptr);
  EXPECT_TRUE(consumer.release());  // the waiting producer must be rung
  EXPECT_FALSE(consumer.release());
  EXPECT_NE(producer.reserve(64), nullptr);
}

// A consumer that reads past records it has not finished with (a large write copied in
// pieces, the frames that wait for it) holds them: the producer gets nothing back from the held
// record on, however far the consumer reads, until the hold is lifted.
TEST(ShmRing, NothingFromAHeldRecordOnGoesBackToTheProducer) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  while (push(producer, 64, 1, 0)) {
  }
  uint64_t available = 0;
  RecordHead head{};
  ASSERT_NE(consumer.front(&head, &available), nullptr);
  consumer.hold(consumer.next_index());
  while (consumer.front(&head, &available) != nullptr) consumer.pop(head.size);
  EXPECT_FALSE(consumer.release());
  EXPECT_FALSE(producer.wait_for_room(64)) << "space of a held record went back";
  consumer.unhold();
  EXPECT_TRUE(consumer.release());  // the producer waits: rung
  EXPECT_NE(producer.reserve(64), nullptr);
}

TEST(ShmRing, ReleaseAsksForNoDoorbellWhenNoProducerWaits) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  ASSERT_TRUE(push(producer, 64, 1, 0));
  EXPECT_FALSE(consumer.pop(front_head(consumer).size));
  EXPECT_FALSE(consumer.release());
  // A producer that finds room while announcing it waits is told to retry, not to sleep.
  EXPECT_TRUE(producer.wait_for_room(64));
}

// The consumer polls the place where the next record will start; after a few laps that place
// holds old bytes, here made to look like record heads: at every line of every body, the head
// a record starting there in this lap would have had (the right sequence word for that index,
// a plausible size and kind), and a head without the ring's salt. None of them may ever be
// read as a record.
TEST(ShmRing, OldBytesThatLookLikeRecordsAreNeverDelivered) {
  auto ring = std::make_unique<TestRing<kSmallRing>>();
  RingProducer producer = ring->producer();
  RingConsumer consumer = ring->consumer();
  const uint64_t salt = ring->control.seq_salt;
  uint64_t index = 0;  // the producer's, followed here
  for (uint32_t i = 0; i < 500; ++i) {
    // Sizes that move the record starts around, so they land inside older bodies.
    const uint32_t size = shm::record_size(sizeof(RecordHead) + 8 + (i * 104729) % 900);
    if (index % kSmallRing + size > kSmallRing) index += kSmallRing - index % kSmallRing;
    uint8_t* body = producer.reserve(size);
    ASSERT_NE(body, nullptr) << "record " << i;
    for (uint32_t line = shm::kRecordAlign; line < size; line += shm::kRecordAlign) {
      const uint64_t at = index + line;
      const RecordHead lookalike{shm::record_seq(at, salt), 64, 3};
      const RecordHead unsalted{at + 1, 64, 3};
      std::memcpy(body + line - sizeof(RecordHead), &lookalike, sizeof lookalike);
      if (line + sizeof(RecordHead) < size) {
        std::memcpy(body + line, &unsalted, sizeof unsalted);
      }
    }
    producer.commit(1);
    index += size;
    Popped p = pop(consumer);
    ASSERT_TRUE(p.present) << "record " << i;
    EXPECT_EQ(p.kind, 1u) << "record " << i;
    EXPECT_EQ(p.size, size) << "record " << i;
    uint64_t available = 0;
    RecordHead head{};
    EXPECT_EQ(consumer.front(&head, &available), nullptr) << "a record after " << i;
    EXPECT_TRUE(consumer.empty());
  }
}

// Sleeps (bounded) until the eventfd is rung, then clears it. False when the limit passed.
bool wait_doorbell(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return false;
    uint64_t count;
    [[maybe_unused]] ssize_t r = ::read(fd, &count, sizeof count);
    return true;
  }
}

// The stress record: a sequence number, a checksum of the filler, the filler.
struct StressHead {
  uint64_t seq;
  uint32_t checksum;
  uint32_t filler_bytes;
};

// Mostly small records, as the transport's traffic is, and one in eight of any size up to
// max_record, scrambled so that wraps and full rings fall anywhere.
uint32_t stress_size(uint64_t seq, uint32_t max_record) {
  const uint64_t fixed = sizeof(RecordHead) + sizeof(StressHead);
  const uint64_t spread = seq % 8 == 0 ? max_record - fixed : 128;
  return shm::record_size(fixed + (seq * 2654435761u) % (spread + 1));
}

uint8_t stress_byte(uint64_t seq, size_t i) {
  return static_cast<uint8_t>(seq * 31 + i * 7 + (i >> 8));
}

uint32_t fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// Two threads, the full wake-up protocol of docs/wire.md: a consumer that finds the ring empty
// announces it sleeps and blocks on its doorbell; a producer that finds it full asks to be
// woken and blocks on its own. A lost wake-up shows as a doorbell that never rings. The short
// mode (tests/run_length.h) sends a fifth of the records: the 16 KiB ring still fills and
// empties, and each side sleeps, tens of thousands of times.
TEST(ShmRing, TwoThreadStressDeliversEveryRecordIntactAndInOrder) {
  const uint64_t kRecords = emu_test::test_scale<uint64_t>(1'000'000, 200'000);
  constexpr int kSpinsBeforeSleep = 64;
  const auto deadline = Clock::now() + 100s;
  // Small enough that the ring is often full as well as often empty.
  auto ring_storage = std::make_unique<TestRing<kStressRing>>();
  TestRing<kStressRing>& ring_ref = *ring_storage;
  const uint32_t max_record = ring_ref.producer().max_record();
  // A wake-up that takes this long was lost (they take microseconds).
  const auto doorbell_limit = [&] { return std::min(deadline, Clock::now() + 10s); };
  const int consumer_bell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int producer_bell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(consumer_bell, 0);
  ASSERT_GE(producer_bell, 0);
  std::atomic<bool> stop{false};
  std::string producer_failure;

  std::thread producer_thread([&] {
    RingProducer producer = ring_ref.producer();
    std::vector<uint8_t> filler;
    for (uint64_t seq = 0; seq < kRecords && !stop.load(std::memory_order_relaxed); ++seq) {
      const uint32_t size = stress_size(seq, max_record);
      uint8_t* body;
      int spins = 0;
      while ((body = producer.reserve(size)) == nullptr) {
        if (++spins < kSpinsBeforeSleep) {
          std::this_thread::yield();
          continue;
        }
        spins = 0;
        if (producer.wait_for_room(size)) continue;  // room appeared as we asked
        if (!wait_doorbell(producer_bell, doorbell_limit()) ||
            stop.load(std::memory_order_relaxed)) {
          producer_failure = "no wake-up for room at record " + std::to_string(seq);
          stop.store(true);
          ring(consumer_bell);
          return;
        }
      }
      const uint32_t filler_bytes = size - sizeof(RecordHead) - sizeof(StressHead);
      uint8_t* out = body + sizeof(StressHead);
      for (uint32_t i = 0; i < filler_bytes; ++i) out[i] = stress_byte(seq, i);
      const StressHead head{seq, fnv1a(out, filler_bytes), filler_bytes};
      std::memcpy(body, &head, sizeof head);
      producer.commit(1 + seq % 5);
      if (producer.take_consumer_sleeping()) ring(consumer_bell);
    }
  });

  RingConsumer consumer = ring_ref.consumer();
  uint64_t expected = 0;
  uint64_t bad_records = 0;
  std::string first_bad;
  std::string consumer_failure;
  int spins = 0;
  while (expected < kRecords && !stop.load(std::memory_order_relaxed)) {
    uint64_t available = 0;
    RecordHead rec{};
    const uint8_t* at = consumer.front(&rec, &available);
    if (at == nullptr) {
      // The end of a drain pass: the space goes back.
      if (consumer.release()) ring(producer_bell);
      if (++spins < kSpinsBeforeSleep) {
        std::this_thread::yield();
        continue;
      }
      spins = 0;
      // A record reserved since we looked: no sleep.
      if (!consumer.announce_sleep(consumer.next_index())) continue;
      if (!wait_doorbell(consumer_bell, doorbell_limit())) {
        consumer_failure = "no wake-up for record " + std::to_string(expected);
        break;
      }
      continue;
    }
    const uint32_t size = rec.size;
    StressHead head{};
    std::string problem;
    if (size != stress_size(expected, max_record) || size > available) {
      problem = "size " + std::to_string(size);
    } else if (rec.kind != 1 + expected % 5) {
      problem = "kind " + std::to_string(rec.kind);
    } else {
      const uint8_t* body = at + sizeof(RecordHead);
      std::memcpy(&head, body, sizeof head);
      const uint8_t* filler = body + sizeof head;
      bool filler_ok = head.filler_bytes == size - sizeof(RecordHead) - sizeof head;
      for (uint32_t i = 0; filler_ok && i < head.filler_bytes; ++i) {
        filler_ok = filler[i] == stress_byte(expected, i);
      }
      if (head.seq != expected) {
        problem = "sequence " + std::to_string(head.seq);
      } else if (!filler_ok || head.checksum != fnv1a(filler, head.filler_bytes)) {
        problem = "bytes";
      }
    }
    if (!problem.empty() && bad_records++ == 0) {
      first_bad = "record " + std::to_string(expected) + ": bad " + problem;
    }
    if (consumer.pop(size)) ring(producer_bell);
    ++expected;
  }
  if (!consumer_failure.empty()) {
    stop.store(true);
    ring(producer_bell);
  }
  producer_thread.join();
  ::close(consumer_bell);
  ::close(producer_bell);
  EXPECT_EQ(producer_failure, "");
  EXPECT_EQ(consumer_failure, "");
  EXPECT_EQ(expected, kRecords);
  EXPECT_EQ(bad_records, 0u) << first_bad;
  EXPECT_TRUE(consumer.empty());
}

// =============================================================================================
// GIDs

TEST(ShmGid, AddressRoundTripsThroughTheDocumentedLayout) {
  const shm::ShmAddress address{0xa1b2c3d4, 0x00012345, 0x4321};
  const Gid gid = shm::gid_of(address, 0x7f000001);
  const std::array<uint8_t, 16> expected = {0xa1, 0xb2, 0xc3, 0xd4, 0x00, 0x01, 0x23, 0x45,
                                            0x43, 0x21, 0xff, 0xff, 0x7f, 0x00, 0x00, 0x01};
  EXPECT_EQ(gid.raw, expected);
  const auto back = shm::address_of(gid);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, address);
  // Without a TCP listener the address part is the same.
  EXPECT_EQ(shm::address_of(shm::gid_of(address, 0)), address);
}

TEST(ShmGid, HostTagIsNonZeroAndStable) {
  const uint32_t tag = shm::local_host_tag();
  EXPECT_NE(tag, 0u);
  EXPECT_EQ(shm::local_host_tag(), tag);
  auto t = transports::shm::make_shm_transport();
  ASSERT_NE(t, nullptr);
  const auto address = shm::address_of(t->local_gid());
  ASSERT_TRUE(address.has_value());
  EXPECT_EQ(address->host_tag, tag);
  EXPECT_EQ(address->pid, static_cast<uint32_t>(::getpid()));
}

TEST(ShmGid, GidsThatAreNotSharedMemoryAddressesAreRefused) {
  const Gid valid = shm::gid_of({0x01020304, 77, 9}, 0);
  ASSERT_TRUE(shm::address_of(valid).has_value());
  Gid no_host = valid;
  std::fill(no_host.raw.begin(), no_host.raw.begin() + 4, 0);
  EXPECT_FALSE(shm::address_of(no_host).has_value());
  Gid no_pid = valid;
  std::fill(no_pid.raw.begin() + 4, no_pid.raw.begin() + 8, 0);
  EXPECT_FALSE(shm::address_of(no_pid).has_value());
  Gid no_marker = valid;
  no_marker.raw[10] = 0;
  EXPECT_FALSE(shm::address_of(no_marker).has_value());
  EXPECT_FALSE(shm::address_of(Gid{}).has_value());
  // A plain TCP GID (bytes 0-7 zero) is not a shm GID.
  EXPECT_FALSE(shm::address_of(transports::tcp::tcp_gid_of({0x7f000001, 4791})).has_value());
}

TEST(ShmGid, SocketNamesDifferPerProcessAndInstance) {
  const shm::ShmAddress base{0x11223344, 100, 1};
  shm::ShmAddress other_pid = base, other_instance = base, other_host = base;
  other_pid.pid = 101;
  other_instance.instance = 2;
  other_host.host_tag = 0x11223345;
  const std::set<std::string> names = {shm::socket_name(base), shm::socket_name(other_pid),
                                       shm::socket_name(other_instance),
                                       shm::socket_name(other_host)};
  EXPECT_EQ(names.size(), 4u);
  EXPECT_EQ(shm::socket_name(base), shm::socket_name(shm::ShmAddress{0x11223344, 100, 1}));
}

TEST(ShmGid, TwoTransportsOfOneProcessHaveDifferentGids) {
  auto a = transports::shm::make_shm_transport();
  auto b = transports::shm::make_shm_transport();
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->local_gid(), b->local_gid());
  const auto address_a = shm::address_of(a->local_gid());
  const auto address_b = shm::address_of(b->local_gid());
  ASSERT_TRUE(address_a && address_b);
  EXPECT_NE(shm::socket_name(*address_a), shm::socket_name(*address_b));
}

// Whether something accepts TCP connections at ep (a plain connect, closed at once).
bool tcp_listening(const transports::tcp::TcpEndpoint& ep) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(ep.port);
  sa.sin_addr.s_addr = htonl(ep.ipv4);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

TEST(ShmGid, AutoTransportGidCarriesItsTcpListener) {
  auto t = transports::make_auto_transport("127.0.0.1");
  ASSERT_NE(t, nullptr);
  const Gid gid = t->local_gid();
  const auto address = shm::address_of(gid);
  ASSERT_TRUE(address.has_value()) << "the default transport's GID names shared memory";
  EXPECT_EQ(address->host_tag, shm::local_host_tag());
  EXPECT_EQ(address->pid, static_cast<uint32_t>(::getpid()));
  Gid tcp_part = gid;
  std::fill(tcp_part.raw.begin(), tcp_part.raw.begin() + 8, 0);
  const auto ep = transports::tcp::tcp_endpoint_of(tcp_part);
  ASSERT_TRUE(ep.has_value()) << "bytes 8-15 are a TCP GID";
  EXPECT_EQ(ep->ipv4, 0x7f000001u);
  EXPECT_EQ(ep->port, address->instance);
  EXPECT_TRUE(tcp_listening(*ep)) << "port " << ep->port;
}

// =============================================================================================
// Segments

// The segment header as docs/wire.md describes it (shm_segment.cpp keeps its own copy
// private): the tests below build segments by hand to make each field wrong in turn.
struct alignas(shm::kCacheUnit) SegmentHeaderImage {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
};
constexpr uint64_t kSegmentMagic = 0x6d68732d756d65ull;  // "emu-shm"
constexpr uint64_t kTestRingBytes = 4096;

size_t segment_bytes(uint64_t ring_bytes) {
  return sizeof(SegmentHeaderImage) + 2 * shm::ring_footprint(ring_bytes);
}

// A memfd holding `bytes` bytes, its header (if it fits) and both rings' capacities.
int handmade_segment(size_t bytes, uint64_t magic, uint32_t version, uint64_t ring_bytes) {
  const int fd = ::memfd_create("shm-test-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  // Sealed at its size, as Segment::create makes it: only the field under test is wrong.
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    ::close(fd);
    return -1;
  }
  if (bytes == 0) return fd;
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    return -1;
  }
  if (bytes >= sizeof(SegmentHeaderImage)) {
    new (base) SegmentHeaderImage{magic, version, 0, ring_bytes};
  }
  for (int ring_index = 0; ring_index < 2; ++ring_index) {
    const size_t at = sizeof(SegmentHeaderImage) + ring_index * shm::ring_footprint(ring_bytes);
    if (at + sizeof(RingControl) > bytes) break;
    new (static_cast<uint8_t*>(base) + at) RingControl{};
    reinterpret_cast<RingControl*>(static_cast<uint8_t*>(base) + at)->capacity = ring_bytes;
  }
  ::munmap(base, bytes);
  return fd;
}

// Attaches fd and closes it; returns whether the segment was accepted and why not.
bool attaches(int fd, std::string* why) {
  auto segment = Segment::attach(fd, why);
  ::close(fd);
  return segment != nullptr;
}

TEST(ShmSegment, CreatedMemfdIsPrivateToItsUserAndSizedForTwoRings) {
  int fd = -1;
  std::string why;
  // A memfd starts as 0777 less the umask: with none, only the transport's fchmod protects it.
  const mode_t umask_before = ::umask(0);
  auto segment = Segment::create(kTestRingBytes, &fd, &why);
  ::umask(umask_before);
  ASSERT_NE(segment, nullptr) << why;
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(static_cast<size_t>(st.st_size), segment_bytes(kTestRingBytes));
  for (auto d : {Segment::kDialerToAcceptor, Segment::kAcceptorToDialer}) {
    EXPECT_EQ(segment->control(d)->capacity, kTestRingBytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(segment->control(d)) % shm::kCacheUnit, 0u);
  }
  EXPECT_NE(segment->data(Segment::kDialerToAcceptor), segment->data(Segment::kAcceptorToDialer));

  // The peer's mapping is the same memory: a record written on one side is read on the other.
  auto peer = Segment::attach(fd, &why);
  ASSERT_NE(peer, nullptr) << why;
  ::close(fd);
  const auto d = Segment::kDialerToAcceptor;
  EXPECT_EQ(segment->sync_key(d),
            peer->sync_key(d));  // for TSan, one ring (transports/tsan_sync.h)
  RingProducer producer(segment->control(d), segment->data(d), segment->sync_key(d));
  RingConsumer consumer(peer->control(d), peer->data(d), peer->sync_key(d));
  ASSERT_TRUE(push(producer, 64, 4, 0x3c));
  Popped p = pop(consumer);
  EXPECT_EQ(p.kind, 4u);
  EXPECT_EQ(p.body, std::vector<uint8_t>(64 - sizeof(RecordHead), 0x3c));
  EXPECT_TRUE(consumer.empty());
}

// A down link gives its shared pages back but keeps the segment's address range
// (ShmLink::release): a poll that still looks at its ring without the link's locks reads zeros,
// "nothing published", where an unmapped page would end the process.
TEST(ShmSegment, AnUnsharedSegmentReadsAsEmptyRingsInThisProcessOnly) {
  int fd = -1;
  std::string why;
  auto segment = Segment::create(kTestRingBytes, &fd, &why);
  ASSERT_NE(segment, nullptr) << why;
  auto peer = Segment::attach(fd, &why);
  ASSERT_NE(peer, nullptr) << why;
  ::close(fd);
  const auto d = Segment::kDialerToAcceptor;
  RingProducer producer(segment->control(d), segment->data(d), segment->sync_key(d));
  RingConsumer consumer(peer->control(d), peer->data(d), peer->sync_key(d));
  const shm::RingLook look = consumer.look();
  EXPECT_FALSE(look.published(consumer.next_index()));
  ASSERT_TRUE(push(producer, 64, 4, 0x3c));
  EXPECT_TRUE(look.published(consumer.next_index()));

  peer->unshare();
  EXPECT_FALSE(look.published(consumer.next_index()));
  EXPECT_EQ(peer->control(d)->capacity, 0u);
  // The creator's mapping still holds the record: only the unsharing process let go.
  EXPECT_TRUE((shm::RingLook{segment->data(d), kTestRingBytes, look.salt}.published(0)));
  EXPECT_EQ(segment->control(d)->capacity, kTestRingBytes);
}

// Kilobytes of the mapping that holds `address` which this process has mapped to pages
// (/proc/self/smaps, Rss), or -1 when no mapping holds it.
long resident_kb_of_mapping(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0;
    unsigned long end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      inside = begin <= at && at < end;
      continue;
    }
    long kb = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

// Both processes map every page of the rings when they set the segment up, not on the message
// that first meets a page (a fault of a few microseconds each, once per page of a 4 MiB lap).
TEST(ShmSegment, BothMappingsHaveEveryPageOfTheRingsFromTheStart) {
  int fd = -1;
  std::string why;
  auto segment = Segment::create(shm::kRingBytes, &fd, &why);
  ASSERT_NE(segment, nullptr) << why;
  auto peer = Segment::attach(fd, &why);
  ASSERT_NE(peer, nullptr) << why;
  ::close(fd);
  const long ring_kb = static_cast<long>(2 * shm::kRingBytes / 1024);
  for (const Segment* s : {segment.get(), peer.get()}) {
    EXPECT_GE(resident_kb_of_mapping(s->control(Segment::kDialerToAcceptor)), ring_kb);
  }
}

TEST(ShmSegment, HandmadeSegmentLikeTheOriginalAttaches) {
  // The control case for the refusals below: the hand-made layout is the real one.
  std::string why;
  const int fd = handmade_segment(segment_bytes(kTestRingBytes), kSegmentMagic,
                                  shm::kProtocolVersion, kTestRingBytes);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(attaches(fd, &why)) << why;
}

TEST(ShmSegment, AttachRefusesMalformedSegments) {
  struct Case {
    const char* what;
    size_t bytes;
    uint64_t magic;
    uint32_t version;
    uint64_t ring_bytes;
  };
  const size_t right = segment_bytes(kTestRingBytes);
  const uint32_t v = shm::kProtocolVersion;
  const Case cases[] = {
      {"empty", 0, kSegmentMagic, v, kTestRingBytes},
      {"smaller than its header", 16, kSegmentMagic, v, kTestRingBytes},
      {"header only", sizeof(SegmentHeaderImage), kSegmentMagic, v, kTestRingBytes},
      {"one ring short", right - kTestRingBytes, kSegmentMagic, v, kTestRingBytes},
      {"larger than its rings", right + 4096, kSegmentMagic, v, kTestRingBytes},
      {"wrong magic", right, kSegmentMagic ^ 1, v, kTestRingBytes},
      {"wrong version", right, kSegmentMagic, v + 1, kTestRingBytes},
      {"ring size not a power of two", segment_bytes(6144), kSegmentMagic, v, 6144},
      {"ring size below a page", segment_bytes(2048), kSegmentMagic, v, 2048},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int fd = handmade_segment(c.bytes, c.magic, c.version, c.ring_bytes);
    ASSERT_GE(fd, 0);
    std::string why;
    EXPECT_FALSE(attaches(fd, &why));
    EXPECT_NE(why, "");
  }
}

TEST(ShmSegment, AttachRefusesRingsWhoseCapacityDisagreesWithTheHeader) {
  const int fd = handmade_segment(segment_bytes(kTestRingBytes), kSegmentMagic,
                                  shm::kProtocolVersion, kTestRingBytes);
  ASSERT_GE(fd, 0);
  // The second ring's control block claims twice the space the header gives it.
  const uint64_t lie = 2 * kTestRingBytes;
  const off_t at =
      static_cast<off_t>(sizeof(SegmentHeaderImage) + shm::ring_footprint(kTestRingBytes) +
                         offsetof(RingControl, capacity));
  ASSERT_EQ(::pwrite(fd, &lie, sizeof lie, at), static_cast<ssize_t>(sizeof lie));
  std::string why;
  EXPECT_FALSE(attaches(fd, &why));
  EXPECT_NE(why, "");
}

// =============================================================================================
// Transports, sinks and a hand-made peer

// =============================================================================================
// Attach refusal: another user

TEST(ShmAttach, ProcessOfAnotherUserIsRefused) {
  if (::geteuid() != 0) {
    FAIL() << "this test must run as root (as CI does): it starts a child as user 65534 to "
              "check that the attach handshake refuses another user";
  }
  ShmEndpoint victim;
  ASSERT_NE(victim.transport, nullptr);
  const auto address = shm::address_of(victim.gid());
  ASSERT_TRUE(address.has_value());

  // Everything the child sends is built here: after fork it may only make system calls (the
  // parent has threads, whose locks the child's copy of the allocator may hold).
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const std::string name = shm::socket_name(*address);
  ASSERT_LT(name.size() + 1, sizeof sa.sun_path);
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  const socklen_t sa_len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int memfd = -1;
  std::string why;
  auto segment = Segment::create(shm::kRingBytes, &memfd, &why);
  ASSERT_NE(segment, nullptr) << why;
  const int doorbell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(doorbell, 0);
  shm::Hello hello{shm::kHandshakeMagic, shm::kProtocolVersion, raw_peer_gid().raw,
                   shm::probe_address()};
  iovec iov{&hello, sizeof hello};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  cmsghdr* rights = CMSG_FIRSTHDR(&message);
  rights->cmsg_level = SOL_SOCKET;
  rights->cmsg_type = SCM_RIGHTS;
  rights->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {memfd, doorbell};
  std::memcpy(CMSG_DATA(rights), fds, sizeof fds);
  const timeval answer_limit{5, 0};
  shm::Welcome welcome{};

  // Exit codes of the child.
  enum : int { kClosed = 0, kAnswered = 1, kNoAnswer = 2, kNoSetuid = 3, kNoSocket = 4 };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // SO_PEERCRED records the credentials at connect(): change user first.
    if (::syscall(SYS_setuid, 65534) != 0) ::_exit(kNoSetuid);
    const long fd = ::syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) ::_exit(kNoSocket);
    ::syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_RCVTIMEO, &answer_limit, sizeof answer_limit);
    if (::syscall(SYS_connect, fd, &sa, sa_len) != 0) ::_exit(kNoSocket);
    // The victim may close before the Hello arrives: the send failing is a refusal too.
    ::syscall(SYS_sendmsg, fd, &message, MSG_NOSIGNAL);
    const long n = ::syscall(SYS_recvfrom, fd, &welcome, sizeof welcome, 0, nullptr, nullptr);
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) ::_exit(kClosed);
    ::_exit(n > 0 ? kAnswered : kNoAnswer);
  }
  ::close(memfd);
  ::close(doorbell);
  const int code = reap(child);
  EXPECT_EQ(code, kClosed) << (code == kAnswered   ? "the victim answered another user"
                               : code == kNoAnswer ? "the victim neither answered nor closed"
                               : code == kNoSetuid ? "setuid(65534) failed in the child"
                               : code == kNoSocket ? "the child could not connect"
                                                   : "the child did not exit in time");
  EXPECT_EQ(victim.sink.frame_count(), 0u);
  EXPECT_EQ(victim.sink.down_count(), 0u);  // no link was ever made

  // The same user still attaches and delivers.
  ShmEndpoint friendly;
  ASSERT_NE(friendly.transport, nullptr);
  auto link = friendly.transport->connect(victim.gid());
  ASSERT_NE(link, nullptr);
  ASSERT_TRUE(send_frame(*link, 1));
  EXPECT_TRUE(victim.sink.wait_frames_from(friendly.gid(), 1, kDeliveryLimit));
}

// =============================================================================================
// Hostile records

// A victim transport, a well-behaved peer with a link to it, and hand-made hostile peers.
class ShmVictimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(victim.transport, nullptr);
    ASSERT_NE(friendly.transport, nullptr);
    friendly_link = friendly.transport->connect(victim.gid());
    ASSERT_NE(friendly_link, nullptr);
    ASSERT_TRUE(send_frame(*friendly_link, 1));
    ASSERT_TRUE(victim.sink.wait_frames_from(friendly.gid(), 1, kDeliveryLimit));
  }

  // Attaches a new hand-made peer to the victim under a GID of its own.
  std::unique_ptr<RawDialer> attach_raw(Gid* gid) {
    *gid = raw_peer_gid();
    auto dialer = std::make_unique<RawDialer>();
    std::string why;
    if (!dialer->attach(victim.gid(), *gid, &why)) {
      ADD_FAILURE() << "raw attach: " << why;
      return nullptr;
    }
    return dialer;
  }

  // The victim took the hostile link down once, delivered nothing from it, and the friendly
  // link still delivers.
  void expect_only_the_hostile_link_went_down(RawDialer& dialer, const Gid& hostile) {
    const bool down = victim.sink.wait_downs_of(hostile, 1, kDeliveryLimit);
    for (const Received& r : victim.sink.frames()) {
      if (r.from == hostile) ADD_FAILURE() << "delivered a frame of " << r.payload_size << " bytes";
    }
    ASSERT_TRUE(down) << "no on_link_down";
    // Everything that could report the link a second time: its socket ending, more doorbells,
    // a program thread draining.
    dialer.close_socket();
    dialer.ring_victim();
    victim.transport->progress();
    EXPECT_FALSE(victim.sink.wait_downs_of(hostile, 2, 100ms)) << "reported down twice";
    EXPECT_EQ(victim.sink.frames_from(hostile), 0u);
    const size_t friendly_frames = victim.sink.frames_from(friendly.gid());
    ASSERT_TRUE(send_frame(*friendly_link, 2));
    EXPECT_TRUE(victim.sink.wait_frames_from(friendly.gid(), friendly_frames + 1, kDeliveryLimit));
    EXPECT_EQ(victim.sink.downs_of(friendly.gid()), 0u);
    EXPECT_TRUE(friendly_link->up());
  }

  ShmEndpoint victim;
  ShmEndpoint friendly;
  std::shared_ptr<Link> friendly_link;
};

// Payload a hostile record may point at: real memory of this process, so only the
// validation stands between it and a delivered frame.
uint8_t readable_bytes[4096];

bool wait_read_only_mappings_of_memfd(const std::string& name, size_t n,
                                      std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (read_only_mappings_of_memfd(name) != n) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A socket message (shm_wire.h), with a descriptor when fd >= 0, as a hand-made peer sends it.
bool send_socket_message(int socket_fd, shm::SocketMessageType type, uint32_t object, int fd) {
  const shm::SocketMessage m{type, {}, object};
  return shm::send_message(socket_fd, &m, sizeof m, &fd, fd >= 0 ? 1 : 0);
}

// Hands the victim a memfd of `bytes` bytes filled with `fill` as object `object`.
void share_memfd(RawDialer& d, uint32_t object, size_t bytes, uint8_t fill,
                 const std::string& name = "emurdma-test-hostile") {
  MemfdBuffer shared(name, bytes);
  ASSERT_NE(shared.data(), nullptr);
  std::memset(shared.data(), fill, bytes);
  ASSERT_TRUE(send_socket_message(d.socket_fd(), shm::kShareObject, object, shared.fd()));
}

// As share_memfd, but the object stays with the caller, who may then shrink it (ftruncate its
// fd()) under the victim's mapping. Null on failure.
std::unique_ptr<MemfdBuffer> share_kept_memfd(RawDialer& d, uint32_t object, size_t bytes,
                                              uint8_t fill, const std::string& name) {
  auto shared = std::make_unique<MemfdBuffer>(name, bytes);
  if (shared->data() == nullptr) {
    ADD_FAILURE() << "memfd of " << bytes << " bytes";
    return nullptr;
  }
  std::memset(shared->data(), fill, bytes);
  if (!send_socket_message(d.socket_fd(), shm::kShareObject, object, shared->fd())) {
    ADD_FAILURE() << "share message not sent";
    return nullptr;
  }
  return shared;
}

// What follows the FrameRecord of a by-reference record: its state word, live, then its pieces.
template <class Piece>
std::vector<uint8_t> by_reference_bytes(const std::vector<Piece>& pieces) {
  const shm::ByReference state{shm::kByReferenceLive, 0};
  std::vector<uint8_t> out(sizeof state + pieces.size() * sizeof(Piece));
  std::memcpy(out.data(), &state, sizeof state);
  std::memcpy(out.data() + sizeof state, pieces.data(), pieces.size() * sizeof(Piece));
  return out;
}

std::vector<uint8_t> mapped_bytes(const std::vector<shm::MappedIov>& pieces) {
  return by_reference_bytes(pieces);
}

std::vector<uint8_t> frame_body(uint32_t payload_bytes, uint32_t iov_count,
                                const std::vector<uint8_t>& after = {}) {
  const FrameRecord fr{frame_header(9, payload_bytes), payload_bytes, iov_count};
  std::vector<uint8_t> body(sizeof fr + after.size());
  std::memcpy(body.data(), &fr, sizeof fr);
  std::copy(after.begin(), after.end(), body.begin() + sizeof fr);
  return body;
}

// A ShortFrame body whose header says `length` payload bytes, followed by `after`.
std::vector<uint8_t> short_body(uint32_t length, const std::vector<uint8_t>& after = {}) {
  shm::ShortFrame sf{};
  sf.op = FrameOp::kSend;
  sf.src_qpn = 0x51;
  sf.dst_qpn = 0x52;
  sf.psn = 9;
  sf.length = length;
  std::vector<uint8_t> body(sizeof sf + after.size());
  std::memcpy(body.data(), &sf, sizeof sf);
  std::copy(after.begin(), after.end(), body.begin() + sizeof sf);
  return body;
}

std::vector<uint8_t> iov_bytes(const std::vector<RemoteIov>& pieces) {
  return by_reference_bytes(pieces);
}

// One record whose head says `claimed_size` whatever its body: a lie the producer cannot tell,
// so the head is written by hand at the start of the empty ring.
void put_lying_head(RawDialer& d, uint32_t claimed_size, const std::vector<uint8_t>& body) {
  std::memcpy(d.data() + sizeof(RecordHead), body.data(), body.size());
  const RecordHead head{shm::record_seq(0, d.control()->seq_salt), claimed_size, shm::kFrameInline};
  std::memcpy(d.data() + sizeof head.seq, &head.size, sizeof head - sizeof head.seq);
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(d.data()))
      .store(head.seq, std::memory_order_seq_cst);
}

std::vector<uint8_t> chunk(uint64_t bytes, size_t carried) {
  std::vector<uint8_t> out(sizeof bytes + carried, 0x77);
  std::memcpy(out.data(), &bytes, sizeof bytes);
  return out;
}

struct HostileCase {
  const char* name;
  std::function<void(RawDialer&)> write;
};
void PrintTo(const HostileCase& c, std::ostream* os) {
  *os << c.name;
}

const HostileCase kHostileCases[] = {
    {"SizeBeyondTheEndOfTheRing",
     [](RawDialer& d) {
       put_lying_head(d, static_cast<uint32_t>(shm::kRingBytes + shm::kRecordAlign),
                      frame_body(0, 0));
     }},
    {"SizeSmallerThanAHead", [](RawDialer& d) { put_lying_head(d, 0, frame_body(0, 0)); }},
    {"SizeNotWholeLines", [](RawDialer& d) { put_lying_head(d, 72, frame_body(0, 0)); }},
    {"UnknownKind", [](RawDialer& d) { put(d, 99, frame_body(0, 0)); }},
    {"PaddingBeforeTheEnd",
     [](RawDialer& d) {
       put(d, shm::kPaddingRecord, std::vector<uint8_t>(16));
       put(d, shm::kFrameInline, frame_body(0, 0));
     }},
    {"FrameRecordCutShort",
     [](RawDialer& d) {
       put(d, shm::kFrameInline, {1, 2, 3, 4});
     }},
    {"InlinePayloadOverrunsItsRecord",
     [](RawDialer& d) {
       put(d, shm::kFrameInline, frame_body(1000, 0, std::vector<uint8_t>(16)));
     }},
    {"InlinePayloadBeyondTheInlineLimit",
     [](RawDialer& d) {
       const uint32_t n = shm::kInlineMax + 8;
       put(d, shm::kFrameInline, frame_body(n, 0, std::vector<uint8_t>(n)));
     }},
    {"ShortFramePayloadOverrunsItsRecord",
     [](RawDialer& d) { put(d, shm::kFrameShort, short_body(1000, std::vector<uint8_t>(16))); }},
    {"ShortFramePayloadBeyondTheInlineLimit",
     [](RawDialer& d) {
       const uint32_t n = shm::kInlineMax + 8;
       put(d, shm::kFrameShort, short_body(n, std::vector<uint8_t>(n)));
     }},
    {"ShortFrameInsideAStagedFrame",
     [](RawDialer& d) {
       put(d, shm::kFrameStaged, frame_body(100, 0));
       put(d, shm::kFrameShort, short_body(4, {1, 2, 3, 4}));
     }},
    {"RemoteWithoutPieces", [](RawDialer& d) { put(d, shm::kFrameRemote, frame_body(0, 0)); }},
    {"RemoteWithTooManyPieces",
     [](RawDialer& d) {
       std::vector<RemoteIov> pieces(shm::kMaxRemoteIov + 1,
                                     RemoteIov{reinterpret_cast<uint64_t>(readable_bytes), 16});
       put(d, shm::kFrameRemote,
           frame_body(16 * (shm::kMaxRemoteIov + 1), shm::kMaxRemoteIov + 1, iov_bytes(pieces)));
     }},
    {"RemotePiecesBeyondTheirRecord",
     [](RawDialer& d) {
       const RemoteIov piece{reinterpret_cast<uint64_t>(readable_bytes), 16};
       put(d, shm::kFrameRemote, frame_body(64, 4, iov_bytes({piece})));
     }},
    {"RemotePiecesNotAddingUp",
     [](RawDialer& d) {
       const auto at = reinterpret_cast<uint64_t>(readable_bytes);
       put(d, shm::kFrameRemote, frame_body(300, 2, iov_bytes({{at, 100}, {at + 100, 100}})));
     }},
    {"RemotePieceLengthsWrappingToThePayloadLength",
     [](RawDialer& d) {
       // 2^64 - (2^31 + 1) + 100: the over-long piece and the guard's stand-in value wrap to
       // exactly the announced 100 bytes.
       const uint64_t wrapping = 0 - (shm::kMaxPayload + 1) + 100;
       const auto at = reinterpret_cast<uint64_t>(readable_bytes);
       put(d, shm::kFrameRemote, frame_body(100, 1, iov_bytes({{at, wrapping}})));
     }},
    {"MappedWithoutPieces", [](RawDialer& d) { put(d, shm::kFrameMapped, frame_body(0, 0)); }},
    {"MappedPieceBeyondItsObject",
     [](RawDialer& d) {
       share_memfd(d, 1, 4096, 0x33);
       put(d, shm::kFrameMapped, frame_body(200, 1, mapped_bytes({{0, 200, 4000, 1, 0}})));
     }},
    {"MappedPieceOffsetWrappingIntoItsObject",
     [](RawDialer& d) {
       share_memfd(d, 1, 4096, 0x33);
       put(d, shm::kFrameMapped,
           frame_body(200, 1, mapped_bytes({{0, 200, ~uint64_t{0} - 100, 1, 0}})));
     }},
    {"MappedPiecesNotAddingUp",
     [](RawDialer& d) {
       share_memfd(d, 1, 4096, 0x33);
       put(d, shm::kFrameMapped,
           frame_body(300, 2, mapped_bytes({{0, 100, 0, 1, 0}, {0, 100, 100, 1, 0}})));
     }},
    {"ChunkOutsideAStagedFrame", [](RawDialer& d) { put(d, shm::kChunk, chunk(8, 8)); }},
    {"ChunkBeyondItsStagedFrame",
     [](RawDialer& d) {
       put(d, shm::kFrameStaged, frame_body(8, 0));
       put(d, shm::kChunk, chunk(16, 16));
     }},
    {"ChunkLongerThanItsRecord",
     [](RawDialer& d) {
       put(d, shm::kFrameStaged, frame_body(64, 0));
       put(d, shm::kChunk, chunk(64, 8));
     }},
    {"FrameInsideAStagedFrame",
     [](RawDialer& d) {
       put(d, shm::kFrameStaged, frame_body(100, 0));
       put(d, shm::kFrameInline, frame_body(4, 0, {1, 2, 3, 4}));
     }},
};

class ShmHostileRecordTest : public ShmVictimTest,
                             public ::testing::WithParamInterface<HostileCase> {};

TEST_P(ShmHostileRecordTest, TakesDownOnlyThatLinkAndDeliversNothingFromIt) {
  Gid hostile;
  auto dialer = attach_raw(&hostile);
  ASSERT_NE(dialer, nullptr);
  GetParam().write(*dialer);
  dialer->ring_victim();
  expect_only_the_hostile_link_went_down(*dialer, hostile);
}

INSTANTIATE_TEST_SUITE_P(Records, ShmHostileRecordTest, ::testing::ValuesIn(kHostileCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Well-formed records from the same hand-made peer are delivered: the hostile cases above fail
// for what they break, not for how the test writes records.
TEST_F(ShmVictimTest, HandMadePeerWellFormedRecordsAreDelivered) {
  Gid peer;
  auto dialer = attach_raw(&peer);
  ASSERT_NE(dialer, nullptr);
  for (uint32_t i = 0; i < 40; ++i) readable_bytes[i] = static_cast<uint8_t>(i);
  put(*dialer, shm::kFrameInline, frame_body(4, 0, {9, 8, 7, 6}));
  const auto at = reinterpret_cast<uint64_t>(readable_bytes);
  put(*dialer, shm::kFrameRemote, frame_body(30, 2, iov_bytes({{at, 10}, {at + 20, 20}})));
  put(*dialer, shm::kFrameStaged, frame_body(12, 0));
  std::vector<uint8_t> first = chunk(5, 5), second = chunk(7, 7);
  put(*dialer, shm::kChunk, first);
  put(*dialer, shm::kChunk, second);
  put(*dialer, shm::kFrameShort, short_body(3, {5, 6, 7}));
  dialer->ring_victim();
  ASSERT_TRUE(victim.sink.wait_frames_from(peer, 4, kDeliveryLimit));
  std::vector<Received> from_peer;
  for (Received& r : victim.sink.frames()) {
    if (r.from == peer) from_peer.push_back(r);
  }
  ASSERT_EQ(from_peer.size(), 4u);
  EXPECT_EQ(from_peer[0].payload, (std::vector<uint8_t>{9, 8, 7, 6}));
  std::vector<uint8_t> gathered;
  for (int i = 0; i < 40; ++i) {
    if (i < 10 || i >= 20) gathered.push_back(readable_bytes[i]);
  }
  EXPECT_EQ(from_peer[1].payload, gathered);
  EXPECT_EQ(from_peer[2].payload, std::vector<uint8_t>(12, 0x77));
  EXPECT_EQ(from_peer[3].payload, (std::vector<uint8_t>{5, 6, 7}));
  EXPECT_EQ(from_peer[3].header.psn, 9u);
  EXPECT_EQ(victim.sink.downs_of(peer), 0u);
}

// A payload in an object the peer handed over is copied from the victim's mapping of it (the
// record's address, 0 here, is never read); one naming an object never handed over is read from
// the peer's memory at the record's address, as a kFrameRemote.
TEST_F(ShmVictimTest, MappedRecordsAreReadFromTheObjectOrElseFromThePeersMemory) {
  Gid peer;
  auto dialer = attach_raw(&peer);
  ASSERT_NE(dialer, nullptr);
  share_memfd(*dialer, 7, 8192, 0x5c, "emurdma-test-forget");
  for (uint32_t i = 0; i < 64; ++i) readable_bytes[i] = static_cast<uint8_t>(100 + i);
  const auto at = reinterpret_cast<uint64_t>(readable_bytes);
  put(*dialer, shm::kFrameMapped,
      frame_body(300, 2, mapped_bytes({{0, 100, 8000, 7, 0}, {0, 200, 10, 7, 0}})));
  put(*dialer, shm::kFrameMapped, frame_body(64, 1, mapped_bytes({{at, 64, 0, 8, 0}})));
  dialer->ring_victim();
  ASSERT_TRUE(victim.sink.wait_frames_from(peer, 2, kDeliveryLimit));
  std::vector<Received> from_peer;
  for (Received& r : victim.sink.frames()) {
    if (r.from == peer) from_peer.push_back(r);
  }
  ASSERT_EQ(from_peer.size(), 2u);
  EXPECT_EQ(from_peer[0].payload, std::vector<uint8_t>(300, 0x5c));
  EXPECT_EQ(from_peer[1].payload, std::vector<uint8_t>(readable_bytes, readable_bytes + 64));
  EXPECT_EQ(victim.sink.downs_of(peer), 0u);
  // Forgotten, the object is unmapped.
  EXPECT_EQ(read_only_mappings_of_memfd("emurdma-test-forget"), 1u);
  ASSERT_TRUE(send_socket_message(dialer->socket_fd(), shm::kForgetObject, 7, -1));
  EXPECT_TRUE(wait_read_only_mappings_of_memfd("emurdma-test-forget", 0, kDeliveryLimit));
}

// A peer that shrinks (ftruncate) an object the victim maps, then names bytes past its new end:
// the victim's copy from its mapping meets SIGBUS, which must not kill it (RDMA hardware would
// fail the transfer, not the host). As for an unreadable remote payload, the frame is delivered
// zero-filled and the link goes down, once; the friendly link is untouched.
TEST_F(ShmVictimTest, AnObjectShrunkUnderAMappedPayloadTakesTheLinkDownNotTheProcess) {
  Gid peer;
  auto dialer = attach_raw(&peer);
  ASSERT_NE(dialer, nullptr);
  const std::string name = "emurdma-test-shrunk";
  constexpr uint32_t kObject = 3;
  constexpr uint32_t kPayload = 16 << 10;
  auto shared = share_kept_memfd(*dialer, kObject, 64 << 10, 0x6d, name);
  ASSERT_NE(shared, nullptr);
  const auto record = frame_body(kPayload, 1, mapped_bytes({{0, kPayload, 32 << 10, kObject, 0}}));
  // Read once while whole: the victim has mapped the object before it shrinks.
  put(*dialer, shm::kFrameMapped, record);
  dialer->ring_victim();
  ASSERT_TRUE(victim.sink.wait_frames_from(peer, 1, kDeliveryLimit));
  ASSERT_EQ(read_only_mappings_of_memfd(name), 1u);

  ASSERT_EQ(::ftruncate(shared->fd(), 0), 0);
  put(*dialer, shm::kFrameMapped, record);
  dialer->ring_victim();
  ASSERT_TRUE(victim.sink.wait_downs_of(peer, 1, kDeliveryLimit)) << "no on_link_down";
  std::vector<Received> from_peer;
  for (Received& r : victim.sink.frames()) {
    if (r.from == peer) from_peer.push_back(r);
  }
  ASSERT_EQ(from_peer.size(), 2u);
  EXPECT_EQ(from_peer[0].payload, std::vector<uint8_t>(kPayload, 0x6d));
  EXPECT_EQ(from_peer[1].payload, std::vector<uint8_t>(kPayload, 0));

  // Everything that could report the link a second time.
  dialer->close_socket();
  dialer->ring_victim();
  victim.transport->progress();
  EXPECT_FALSE(victim.sink.wait_downs_of(peer, 2, 100ms)) << "reported down twice";
  const size_t friendly_frames = victim.sink.frames_from(friendly.gid());
  ASSERT_TRUE(send_frame(*friendly_link, 2));
  EXPECT_TRUE(victim.sink.wait_frames_from(friendly.gid(), friendly_frames + 1, kDeliveryLimit));
  EXPECT_EQ(victim.sink.downs_of(friendly.gid()), 0u);
  EXPECT_TRUE(friendly_link->up());
}

// A link the victim takes down is ended for the peer too (docs/wire.md: the survivor learns
// of a dropped link from the socket's end), so the peer's QPs go to error instead of waiting
// for answers that will never come.
TEST_F(ShmVictimTest, HostileLinkIsEndedForThePeerToo) {
  Gid hostile;
  auto dialer = attach_raw(&hostile);
  ASSERT_NE(dialer, nullptr);
  put(*dialer, 99, frame_body(0, 0));
  dialer->ring_victim();
  ASSERT_TRUE(victim.sink.wait_downs_of(hostile, 1, kDeliveryLimit));
  EXPECT_TRUE(sees_end_of_stream(dialer->socket_fd(), 2000ms))
      << "the victim took the link down but left its socket open";
}

// The documented exception to "nothing delivered": a remote payload that cannot be read (here
// an unmapped page) is delivered zero-filled, then the link goes down so nothing built on it
// is acknowledged.
TEST_F(ShmVictimTest, UnreadableRemotePayloadTakesTheLinkDownOnce) {
  Gid hostile;
  auto dialer = attach_raw(&hostile);
  ASSERT_NE(dialer, nullptr);
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  ASSERT_EQ(::munmap(page, 4096), 0);
  put(*dialer, shm::kFrameRemote,
      frame_body(64, 1, iov_bytes({{reinterpret_cast<uint64_t>(page), 64}})));
  dialer->ring_victim();
  ASSERT_TRUE(victim.sink.wait_downs_of(hostile, 1, kDeliveryLimit));
  for (const Received& r : victim.sink.frames()) {
    if (r.from == hostile) {
      EXPECT_EQ(r.payload, std::vector<uint8_t>(64, 0));
    }
  }
  dialer->close_socket();
  EXPECT_FALSE(victim.sink.wait_downs_of(hostile, 2, 100ms));
  ASSERT_TRUE(send_frame(*friendly_link, 2));
  EXPECT_TRUE(victim.sink.wait_frames_from(friendly.gid(), 2, kDeliveryLimit));
}

// A process whose peers come and go (a server over its life) keeps attaching new ones: links
// that went down must not use up the transport's room for links (ShmOptions::max_links), nor
// its descriptors (each link holds a socket and the peer's doorbell). The long mode goes past
// the default room of 4096; the short one (tests/run_length.h) gives the victim a room of 64
// and the process 64 spare descriptors, and goes past those: a link that kept its slot, or a
// descriptor, fails an attach all the same, in a second instead of a minute.
TEST(ShmLinkLifetime, PeersComingAndGoingDoNotExhaustTheTransport) {
  shm::ShmOptions options;
  std::optional<emu_test::SpareDescriptors> spare;
  if (emu_test::short_test_mode()) {
    options.max_links = 64;
    spare.emplace(64);
  }
  const int kPeerLifetimes = static_cast<int>(options.max_links) + 4;
  ShmEndpoint victim(options);
  ASSERT_NE(victim.transport, nullptr);
  for (int i = 0; i < kPeerLifetimes; ++i) {
    const Gid peer = raw_peer_gid();
    RawDialer dialer;
    std::string why;
    ASSERT_TRUE(dialer.attach(victim.gid(), peer, &why)) << "peer " << i << ": " << why;
    dialer.close_socket();  // the peer process ends
    ASSERT_TRUE(victim.sink.wait_downs_of(peer, 1, kDeliveryLimit)) << "peer " << i;
  }
  ShmEndpoint late;
  ASSERT_NE(late.transport, nullptr);
  auto link = late.transport->connect(victim.gid());
  ASSERT_NE(link, nullptr);
  ASSERT_TRUE(send_frame(*link, 1));
  EXPECT_TRUE(victim.sink.wait_frames_from(late.gid(), 1, kDeliveryLimit))
      << "a peer arriving after " << kPeerLifetimes << " others had gone was not attached";
}

// =============================================================================================
// RemotePayload

// The state word of a by-reference record its reader took, for payloads made by hand.
struct TakenRecord {
  uint32_t state = shm::kByReferenceTaken;
  const uint8_t* word() const { return reinterpret_cast<const uint8_t*>(&state); }
};

// A child that has exited and been reaped: its pid names no process (the kernel hands out
// pids in turn, so not again this quickly), and its memory can no longer be read.
void fork_exited_child(pid_t* child) {
  *child = ::fork();
  ASSERT_GE(*child, 0);
  if (*child == 0) ::_exit(0);
  ASSERT_EQ(reap(*child), 0);
}

TEST(ShmRemotePayload, ReadingAProcessThatExitedFailsWithZeros) {
  std::vector<uint8_t> source(256, 0x5c);  // the child has the same bytes at the same address
  pid_t child = 0;
  ASSERT_NO_FATAL_FAILURE(fork_exited_child(&child));
  const RemoteIov piece{reinterpret_cast<uint64_t>(source.data()), source.size()};
  TakenRecord taken;
  shm::RemotePayload payload(child, taken.word(), &piece, 1);
  EXPECT_EQ(payload.size(), source.size());
  std::vector<uint8_t> out(source.size(), 0xee);
  payload.read(out.data(), out.size());
  EXPECT_TRUE(payload.failed());
  EXPECT_EQ(out, std::vector<uint8_t>(source.size(), 0));
  EXPECT_EQ(payload.size(), 0u);
}

// A large write is copied in pieces, one read() each (BulkWrite::copy_piece): after the first
// failure every later read must still consume its bytes (as zeros), or the copy never ends.
// It did not: a receiver whose peer died in the middle of a large write spun for ever.
TEST(ShmRemotePayload, ReadsAfterAFailureGoOnConsumingAsZeros) {
  std::vector<uint8_t> source(3 * 4096, 0x5c);
  pid_t child = 0;
  ASSERT_NO_FATAL_FAILURE(fork_exited_child(&child));
  const RemoteIov piece{reinterpret_cast<uint64_t>(source.data()), source.size()};
  TakenRecord taken;
  shm::RemotePayload payload(child, taken.word(), &piece, 1);
  for (size_t left = source.size(); left > 0; left -= 4096) {
    std::vector<uint8_t> out(4096, 0xee);
    payload.read(out.data(), out.size());
    EXPECT_TRUE(payload.failed());
    EXPECT_EQ(out, std::vector<uint8_t>(4096, 0));
    ASSERT_EQ(payload.size(), left - 4096);
  }
}

TEST(ShmRemotePayload, ReadsOwnMemoryAcrossPiecesExactly) {
  const std::vector<uint8_t> a = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint8_t> b = {};  // an empty piece in the middle
  const std::vector<uint8_t> c = {10, 11, 12};
  std::vector<uint8_t> d(5000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7);
  const RemoteIov pieces[] = {{reinterpret_cast<uint64_t>(a.data()), a.size()},
                              {reinterpret_cast<uint64_t>(b.data()), 0},
                              {reinterpret_cast<uint64_t>(c.data()), c.size()},
                              {reinterpret_cast<uint64_t>(d.data()), d.size()}};
  // Appended byte by byte: GCC 12 at -O3 warns (wrongly) about vector::insert of a's copy.
  std::vector<uint8_t> all;
  for (const std::vector<uint8_t>* piece : {&a, &c, static_cast<const std::vector<uint8_t>*>(&d)}) {
    std::copy(piece->begin(), piece->end(), std::back_inserter(all));
  }

  TakenRecord taken;
  shm::RemotePayload whole(::getpid(), taken.word(), pieces, 4);
  EXPECT_EQ(whole.size(), all.size());
  std::vector<uint8_t> out(all.size());
  whole.read(out.data(), out.size());
  EXPECT_FALSE(whole.failed());
  EXPECT_EQ(out, all);
  EXPECT_EQ(whole.size(), 0u);

  // Reads and skips of sizes that end inside, at and across piece boundaries.
  shm::RemotePayload parts(::getpid(), taken.word(), pieces, 4);
  std::vector<uint8_t> expected, got;
  size_t at = 0;
  const auto read_some = [&](size_t n) {
    std::vector<uint8_t> piece(n, 0xee);
    parts.read(piece.data(), n);
    got.insert(got.end(), piece.begin(), piece.end());
    expected.insert(expected.end(), all.begin() + at, all.begin() + at + n);
    at += n;
  };
  const auto skip_some = [&](size_t n) {
    parts.skip(n);
    at += n;
  };
  read_some(3);     // inside a
  skip_some(5);     // rest of a, past the empty piece, one byte into c
  read_some(4);     // rest of c, one byte of d
  skip_some(1000);  // inside d
  read_some(2);
  skip_some(3000);
  EXPECT_EQ(parts.size(), all.size() - at);
  read_some(all.size() - at);  // to the end
  EXPECT_FALSE(parts.failed());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(parts.size(), 0u);
  parts.skip(10);  // nothing left: no effect
  EXPECT_EQ(parts.size(), 0u);
}

TEST(ShmRemotePayload, UnreadablePieceFailsAfterTheReadableBytes) {
  const std::vector<uint8_t> readable = {1, 2, 3, 4, 5, 6, 7, 8};
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  ASSERT_EQ(::munmap(page, 4096), 0);
  const RemoteIov pieces[] = {{reinterpret_cast<uint64_t>(readable.data()), readable.size()},
                              {reinterpret_cast<uint64_t>(page), 16}};
  TakenRecord taken;
  shm::RemotePayload payload(::getpid(), taken.word(), pieces, 2);
  std::vector<uint8_t> out(24, 0xee);
  payload.read(out.data(), out.size());
  EXPECT_TRUE(payload.failed());
  std::vector<uint8_t> expected(24, 0);  // what could be read, then zeros
  std::copy(readable.begin(), readable.end(), expected.begin());
  EXPECT_EQ(out, expected);
}

// The sink commits what it read (PayloadSource::commit_read) by finishing the record, taken ->
// done; once the sender revoked it, the commit fails and the record stays revoked. Either way
// the record is finished once: the receiver's own finish after the delivery finds the same.
TEST(ShmRemotePayload, CommitFinishesTheRecordAndFailsOnceTheSenderRevokedIt) {
  const std::vector<uint8_t> bytes = {1, 2, 3, 4};
  const RemoteIov piece{reinterpret_cast<uint64_t>(bytes.data()), bytes.size()};
  std::vector<uint8_t> out(bytes.size());

  TakenRecord kept;
  shm::RemotePayload read_whole(::getpid(), kept.word(), &piece, 1);
  read_whole.read(out.data(), out.size());
  EXPECT_TRUE(read_whole.commit_read());
  EXPECT_EQ(kept.state, shm::kByReferenceDone);
  EXPECT_EQ(read_whole.finish(), shm::kByReferenceTaken);

  TakenRecord revoked;
  shm::RemotePayload read_revoked(::getpid(), revoked.word(), &piece, 1);
  read_revoked.read(out.data(), out.size());
  revoked.state = shm::kByReferenceRevoked;  // the sender, while the bytes were read
  EXPECT_FALSE(read_revoked.commit_read());
  EXPECT_EQ(revoked.state, shm::kByReferenceRevoked);
  EXPECT_EQ(read_revoked.finish(), shm::kByReferenceRevoked);
}

// =============================================================================================
// Dropped connections

// A transport that ends in order says goodbye on each link: the peer sees the link down once,
// as a farewell (its QPs then see silence, as on hardware).
TEST(ShmDropConnections, TransportEndingInOrderSaysGoodbye) {
  ShmEndpoint a;
  ASSERT_TRUE(a.transport);
  Gid b_gid;
  {
    ShmEndpoint b;
    ASSERT_TRUE(b.transport);
    b_gid = b.gid();
    auto link = a.transport->connect(b_gid);
    ASSERT_NE(link, nullptr);
    ASSERT_TRUE(send_frame(*link, 1));
    ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 1, kDeliveryLimit));
  }
  ASSERT_TRUE(a.sink.wait_downs_of(b_gid, 1, kDeliveryLimit));
  EXPECT_EQ(a.sink.farewells_of(b_gid), 1u);
}

// Small frames travel in the shorter record (ShortFrame) when the fields it leaves out are zero,
// in the full one otherwise: either way every header field and payload byte arrives as sent.
TEST(ShmFrames, EveryHeaderFieldArrivesWhicheverRecordCarriesTheFrame) {
  ShmEndpoint a, b;
  ASSERT_TRUE(a.transport && b.transport);
  auto link = a.transport->connect(b.gid());
  ASSERT_NE(link, nullptr);
  auto base = [](FrameOp op, uint32_t psn) {
    FrameHeader h{};
    h.op = op;
    h.src_qpn = 0x123456;
    h.dst_qpn = 0x654321;
    h.psn = psn;
    return h;
  };
  std::vector<FrameHeader> sent;
  FrameHeader send_imm = base(FrameOp::kSend, 1);  // short: flags, imm and length only
  send_imm.flags = emu::kFrameImm | emu::kFrameSolicited;
  send_imm.imm = 0xdeadbeef;
  send_imm.length = 8;
  sent.push_back(send_imm);
  FrameHeader rnr = base(FrameOp::kNak, 2);  // short, no payload
  rnr.nak = emu::NakCode::kReceiverNotReady;
  rnr.rnr_timer = 14;
  sent.push_back(rnr);
  FrameHeader write = base(FrameOp::kWrite, 3);  // full: a remote address and key
  write.rkey = 0xabcd;
  write.remote_addr = 0x7f0000001000;
  write.length = 8;
  sent.push_back(write);
  FrameHeader atomic = base(FrameOp::kAtomicRequest, 4);  // full: operands
  atomic.flags = emu::kFrameFetchAdd;
  atomic.rkey = 7;
  atomic.remote_addr = 0x1000;
  atomic.compare_add = 0x1111222233334444;
  atomic.swap = 0x5555666677778888;
  atomic.length = 8;
  sent.push_back(atomic);
  FrameHeader ud = base(FrameOp::kSend, 5);  // full: a Q_Key
  ud.flags = emu::kFrameDatagram;
  ud.qkey = 0x11111111;
  ud.length = 8;
  sent.push_back(ud);

  std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  for (const FrameHeader& h : sent) {
    iovec iov{bytes.data(), h.op == FrameOp::kAtomicRequest || h.length == 0 ? 0 : bytes.size()};
    ASSERT_TRUE(link->send(h, &iov, iov.iov_len == 0 ? 0 : 1));
  }
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), sent.size(), kDeliveryLimit));
  const std::vector<Received> got = b.sink.frames();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    const FrameHeader& want = sent[i];
    const FrameHeader& h = got[i].header;
    EXPECT_EQ(h.op, want.op);
    EXPECT_EQ(h.flags, want.flags);
    EXPECT_EQ(h.nak, want.nak);
    EXPECT_EQ(h.rnr_timer, want.rnr_timer);
    EXPECT_EQ(h.src_qpn, want.src_qpn);
    EXPECT_EQ(h.dst_qpn, want.dst_qpn);
    EXPECT_EQ(h.psn, want.psn);
    EXPECT_EQ(h.imm, want.imm);
    EXPECT_EQ(h.length, want.length);
    EXPECT_EQ(h.rkey, want.rkey);
    EXPECT_EQ(h.qkey, want.qkey);
    EXPECT_EQ(h.remote_addr, want.remote_addr);
    EXPECT_EQ(h.compare_add, want.compare_add);
    EXPECT_EQ(h.swap, want.swap);
    const bool carries = want.op != FrameOp::kAtomicRequest && want.length != 0;
    EXPECT_EQ(got[i].payload, carries ? bytes : std::vector<uint8_t>{});
  }
}

// A large payload in registered memory that the sender maps shared from a memfd is handed over
// as the object: the receiver maps it (read-only) and copies from its mapping, even where it
// does not read the sender's memory in place (single copy off: it still proved at attach that it
// could, docs/security.md, which is what lets it map); when the region is deregistered the receiver
// lets the mapping go, and payloads from that memory then travel another way (here: chunks).
TEST(ShmMappedPayload, ARegisteredSharedObjectIsMappedByThePeerAndLetGoAtDeregistration) {
  transports::shm::ShmOptions cannot_read_in_place;
  cannot_read_in_place.single_copy = false;
  ShmEndpoint a, b(cannot_read_in_place);
  ASSERT_TRUE(a.transport && b.transport);
  const std::string name = "emurdma-test-mapped";
  constexpr size_t kBytes = 4 << 20;
  MemfdBuffer buffer(name, kBytes);
  ASSERT_NE(buffer.data(), nullptr);
  for (size_t i = 0; i < kBytes; ++i) buffer.data()[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  const uint64_t token = a.transport->register_memory(buffer.data() + 4096, kBytes - 4096);
  ASSERT_NE(token, 0u) << "a memfd mapped shared is not taken as shareable";
  auto link = a.transport->connect(b.gid());
  ASSERT_NE(link, nullptr);

  // Two pieces, the first at an odd offset: each arrives from its place in the object.
  FrameHeader h = frame_header(1, 300000 + 20000);
  iovec iov[2] = {{buffer.data() + 4096 + 13, 300000}, {buffer.data() + (2 << 20), 20000}};
  ASSERT_TRUE(link->send(h, iov, 2));
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 1, kDeliveryLimit));
  std::vector<uint8_t> want(buffer.data() + 4096 + 13, buffer.data() + 4096 + 13 + 300000);
  want.insert(want.end(), buffer.data() + (2 << 20), buffer.data() + (2 << 20) + 20000);
  EXPECT_EQ(b.sink.frames()[0].payload, want);
  EXPECT_EQ(read_only_mappings_of_memfd(name), 1u) << "the receiver does not map the object";

  // Memory outside the registered range is not the peer's to map: it travels in chunks.
  iovec first_page{buffer.data(), 4096 * 3};
  ASSERT_TRUE(link->send(frame_header(2, 4096 * 3), &first_page, 1));
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 2, kDeliveryLimit));
  EXPECT_EQ(b.sink.frames()[1].payload,
            std::vector<uint8_t>(buffer.data(), buffer.data() + first_page.iov_len));

  a.transport->unregister_memory(token);
  EXPECT_TRUE(wait_read_only_mappings_of_memfd(name, 0, kDeliveryLimit))
      << "the receiver kept its mapping of an object whose last region is gone";
  ASSERT_TRUE(link->send(frame_header(3, 300000), iov, 1));
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 3, kDeliveryLimit));
  EXPECT_EQ(b.sink.frames()[2].payload,
            std::vector<uint8_t>(buffer.data() + 4096 + 13, buffer.data() + 4096 + 13 + 300000));
  EXPECT_EQ(read_only_mappings_of_memfd(name), 0u);
  EXPECT_EQ(b.sink.downs_of(a.gid()), 0u);
}

// Memory that no peer can map (private, as malloc gives) is not recorded at registration.
TEST(ShmMappedPayload, PrivateMemoryIsNotShareable) {
  ShmEndpoint a;
  ASSERT_TRUE(a.transport);
  std::vector<uint8_t> heap(1 << 20, 1);
  EXPECT_EQ(a.transport->register_memory(heap.data(), heap.size()), 0u);
}

// EMURDMA_SHM_MAP=0 (ShmOptions::map_shared): nothing is handed to peers.
TEST(ShmMappedPayload, TurnedOffNothingIsRecorded) {
  transports::shm::ShmOptions off;
  off.map_shared = false;
  ShmEndpoint a(off);
  ASSERT_TRUE(a.transport);
  MemfdBuffer buffer("emurdma-test-off", 1 << 20);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(a.transport->register_memory(buffer.data(), 1 << 20), 0u);
}

// Pieces past the end of a shrunk object: the bytes before them arrive, the rest of the read is
// zeros, and nothing more is read (the link is going down).
TEST(ShmMappedPayload, APieceOfAShrunkObjectFailsTheReadWithZeros) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  MemfdBuffer object("emurdma-test-shrunk-payload", 2 * page);
  ASSERT_NE(object.data(), nullptr);
  std::memset(object.data(), 0x2a, 2 * page);
  ASSERT_EQ(::ftruncate(object.fd(), static_cast<off_t>(page)), 0);
  const auto base = reinterpret_cast<uint64_t>(object.data());
  const RemoteIov pieces[] = {{base + 100, 50}, {base + page, 64}, {base, 30}};
  TakenRecord taken;
  shm::MappedPayload payload(taken.word(), pieces, 3);
  std::vector<uint8_t> out(100, 0xee);
  payload.read(out.data(), 70);
  EXPECT_TRUE(payload.failed());
  EXPECT_EQ(payload.size(), 144u - 70u);
  std::vector<uint8_t> want(100, 0xee);  // what was not asked for is left alone
  std::fill_n(want.begin(), 50, 0x2a);
  std::fill_n(want.begin() + 50, 20, 0);
  EXPECT_EQ(out, want);
  payload.read(out.data(), 74);  // the third piece is readable, but not read
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 74), std::vector<uint8_t>(74, 0));
  EXPECT_EQ(payload.size(), 0u);
}

// =============================================================================================
// guarded_copy

TEST(GuardedCopy, CopiesLikeMemcpy) {
  std::vector<uint8_t> source(70000);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 31 + (i >> 9));
  for (const size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{4095}, size_t{65536 + 3}}) {
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{61}}) {
      std::vector<uint8_t> dst(len + 2, 0xee);
      ASSERT_TRUE(shm::guarded_copy(dst.data() + 1, source.data() + offset, len));
      std::vector<uint8_t> want(len + 2, 0xee);
      std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(offset), len, want.begin() + 1);
      EXPECT_EQ(dst, want) << len << " bytes from offset " << offset;
    }
  }
}

// The page past the end of a memfd shrunk under its mapping raises SIGBUS when read.
TEST(GuardedCopy, ReturnsFalseWhereTheSourceIsPastItsObjectsEnd) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  MemfdBuffer object("emurdma-test-guarded", 2 * page);
  ASSERT_NE(object.data(), nullptr);
  for (size_t i = 0; i < 2 * page; ++i) object.data()[i] = static_cast<uint8_t>(i * 13);
  const std::vector<uint8_t> first_page(object.data(), object.data() + page);
  void* mapped = ::mmap(nullptr, 2 * page, PROT_READ, MAP_SHARED, object.fd(), 0);
  ASSERT_NE(mapped, MAP_FAILED);
  const auto* source = static_cast<const uint8_t*>(mapped);
  ASSERT_EQ(::ftruncate(object.fd(), static_cast<off_t>(page)), 0);
  std::vector<uint8_t> dst(page);
  // More than once, and from another thread too: a fault the copy survived leaves SIGBUS
  // unblocked and the handler in place (a blocked SIGBUS fault kills at once).
  for (int round = 0; round < 3; ++round) {
    EXPECT_FALSE(shm::guarded_copy(dst.data(), source + page, 64));
    EXPECT_FALSE(shm::guarded_copy(dst.data(), source + page - 16, 32)) << "across the end";
    EXPECT_TRUE(shm::guarded_copy(dst.data(), source, page));
    EXPECT_EQ(dst, first_page);
  }
  bool other_thread_failed = false;
  std::thread([&] {
    other_thread_failed = !shm::guarded_copy(dst.data(), source + page, 64);
  }).join();
  EXPECT_TRUE(other_thread_failed);
  EXPECT_TRUE(shm::guarded_copy(dst.data(), source, page));
  ::munmap(mapped, 2 * page);
}

struct ChildEnd {
  int status = 0;            // as waitpid gives it
  std::string error_output;  // what the child wrote to stderr
};

// Runs `body` in a child process, its stderr kept in a memfd, and waits for it (bounded: an
// overstaying child is killed).
ChildEnd end_of_child(const std::function<void()>& body) {
  ChildEnd end;
  const int captured = ::memfd_create("emurdma-test-child-stderr", MFD_CLOEXEC);
  if (captured < 0) {
    ADD_FAILURE() << "memfd_create: " << std::strerror(errno);
    return end;
  }
  const pid_t child = ::fork();
  if (child < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(captured);
    return end;
  }
  if (child == 0) {
    ::dup2(captured, STDERR_FILENO);
    body();
    ::_exit(0);
  }
  const auto deadline = Clock::now() + kChildLimit;
  while (::waitpid(child, &end.status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "the child overstayed";
      ::kill(child, SIGKILL);
      ::waitpid(child, &end.status, 0);
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  char buffer[4096];
  ssize_t n;
  off_t at = 0;
  while ((n = ::pread(captured, buffer, sizeof buffer, at)) > 0) {
    end.error_output.append(buffer, static_cast<size_t>(n));
    at += n;
  }
  ::close(captured);
  return end;
}

// A child with the handler installed (one guarded copy), then the SIGBUS of `raise_sigbus`,
// which is no guarded copy's: it must end as it would have without the handler. Exit codes
// from 2 up: the child survived it, or could not set it up.
void expect_the_sigbus_ends_the_process(void (*raise_sigbus)(const uint8_t* lost_page)) {
  const ChildEnd end = end_of_child([raise_sigbus] {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const int fd = ::memfd_create("emurdma-test-lost-page", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(2 * page)) != 0) ::_exit(2);
    void* mapped = ::mmap(nullptr, 2 * page, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) ::_exit(3);
    const auto* bytes = static_cast<const uint8_t*>(mapped);
    uint8_t copied[64];
    if (!shm::guarded_copy(copied, bytes + page, sizeof copied)) ::_exit(4);
    if (::ftruncate(fd, static_cast<off_t>(page)) != 0) ::_exit(5);
    raise_sigbus(bytes + page);
    ::_exit(6);  // survived
  });
  // Without a sanitizer SIGBUS kills; ASan and TSan handle it unless told otherwise
  // (handle_sigbus=1): our handler, installed after, passed the signal on to theirs, which
  // reports it and exits with its exit code (ASan 1, TSan 66), never one of the child's own.
  const bool killed_by_sigbus = WIFSIGNALED(end.status) && WTERMSIG(end.status) == SIGBUS;
  const bool reported_by_a_sanitizer =
      end.error_output.find("Sanitizer: BUS") != std::string::npos && WIFEXITED(end.status) &&
      (WEXITSTATUS(end.status) == 1 || WEXITSTATUS(end.status) == 66);
  EXPECT_TRUE(killed_by_sigbus || reported_by_a_sanitizer)
      << (WIFEXITED(end.status) ? "exit code " + std::to_string(WEXITSTATUS(end.status))
                                : "signal " + std::to_string(WTERMSIG(end.status)))
      << "\n"
      << end.error_output;
}

TEST(GuardedCopy, ASigbusOutsideAGuardedCopyStillKillsTheProcess) {
  expect_the_sigbus_ends_the_process([](const uint8_t* lost_page) {
    const volatile uint8_t* touched = lost_page;
    if (*touched == 0) ::_exit(7);
  });
}

TEST(GuardedCopy, ASigbusSentByKillStillKillsTheProcess) {
  expect_the_sigbus_ends_the_process([](const uint8_t*) { ::kill(::getpid(), SIGBUS); });
}

TEST(ShmDropConnections, BothSidesSeeTheLinkDownOnceAndReconnectingDelivers) {
  ShmEndpoint a, b;
  ASSERT_TRUE(a.transport && b.transport);
  auto old_link = a.transport->connect(b.gid());
  ASSERT_NE(old_link, nullptr);
  ASSERT_TRUE(send_frame(*old_link, 1));
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 1, kDeliveryLimit));

  ASSERT_TRUE(transports::shm::shm_drop_connections(*a.transport));
  EXPECT_EQ(a.sink.downs_of(b.gid()), 1u);  // reported before the call returns
  EXPECT_FALSE(old_link->up());
  ASSERT_TRUE(b.sink.wait_downs_of(a.gid(), 1, kDeliveryLimit));
  // Dropped, not closed in order: no goodbye (the engine errors the QPs on it).
  EXPECT_EQ(b.sink.farewells_of(a.gid()), 0u);

  auto fresh = a.transport->connect(b.gid());
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(fresh, old_link);
  EXPECT_TRUE(fresh->up());
  ASSERT_TRUE(send_frame(*fresh, 2, {42}));
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 2, kDeliveryLimit));
  EXPECT_EQ(b.sink.frames().back().payload, std::vector<uint8_t>{42});
  // The other direction takes the fresh link too.
  auto back = b.transport->connect(a.gid());
  ASSERT_NE(back, nullptr);
  ASSERT_TRUE(send_frame(*back, 3));
  EXPECT_TRUE(a.sink.wait_frames_from(b.gid(), 1, kDeliveryLimit));

  EXPECT_EQ(a.sink.downs_of(b.gid()), 1u);
  EXPECT_EQ(b.sink.downs_of(a.gid()), 1u);
}

TEST(ShmDropConnections, RefusesATransportOfAnotherKind) {
  auto tcp_only = transports::make_auto_transport("127.0.0.1", transports::TransportChoice::kTcp);
  ASSERT_NE(tcp_only, nullptr);
  EXPECT_FALSE(transports::shm::shm_drop_connections(*tcp_only));
}

// =============================================================================================
// ACKs held back by a program's poll (shm_link.h, transports/common/held_answers.h)

FrameHeader answer_header(FrameOp op, uint32_t psn) {
  FrameHeader h{};
  h.op = op;
  h.src_qpn = 0x52;
  h.dst_qpn = 0x51;
  h.psn = psn;
  if (op == FrameOp::kNak) h.nak = emu::NakCode::kRemoteAccess;
  return h;
}

// Set while this thread polls a transport as a program's CQ poll does (program_poll).
thread_local bool t_program_polls = false;

// One poll of a program: Transport::progress, during which the engine marks the ACKs it makes
// as ones the transport may hold (Node::delivering_in_progress).
size_t program_poll(Transport& t) {
  t_program_polls = true;
  const size_t delivered = t.progress();
  t_program_polls = false;
  return delivered;
}

// Answers each SEND it is given with an ACK of its PSN, from inside the delivery, as the
// engine's responder does (kFrameMayHold inside a program's poll, unless `never_hold`); and
// remembers which thread delivered what.
class AcknowledgingSink : public RecordingSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    {
      std::lock_guard lock(threads_mutex_);
      delivered_by_.push_back(std::this_thread::get_id());
    }
    // Answered before it is recorded: a test that saw the frame may rely on the ACK's being
    // sent (or held) already.
    if (h.op == FrameOp::kSend) {
      FrameHeader ack = answer_header(FrameOp::kAck, h.psn);
      if (t_program_polls && !never_hold) ack.flags |= emu::kFrameMayHold;
      from.send(ack, nullptr, 0);
    }
    RecordingSink::on_frame(from, h, payload);
  }
  std::atomic<bool> never_hold{false};
  std::thread::id delivered_by(size_t frame) {
    std::lock_guard lock(threads_mutex_);
    return delivered_by_.at(frame);
  }

 private:
  std::mutex threads_mutex_;
  std::vector<std::thread::id> delivered_by_;
};

using AckingEndpoint = ShmEndpointWith<AcknowledgingSink>;

// Polls b's transport as a program's CQ poll does until it has delivered `frames` frames.
bool poll_until_delivered(Transport& t, RecordingSink& sink, size_t frames) {
  const auto deadline = Clock::now() + kDeliveryLimit;
  while (sink.frame_count() < frames) {
    if (Clock::now() > deadline) return false;
    program_poll(t);
  }
  return true;
}

// The program polls, receives, and then does nothing more: the ACKs its poll produced reach the
// sender anyway, each once and in order (the transport's own thread sends them).
TEST(ShmDeferredAcks, AcksOfAPollThatIsNotFollowedByAnythingStillArrive) {
  ShmEndpoint a;
  AckingEndpoint b;
  ASSERT_TRUE(a.transport && b.transport);
  auto link = a.transport->connect(b.gid());
  ASSERT_NE(link, nullptr);
  constexpr uint32_t kSends = 40;  // more than a link defers at once
  for (uint32_t psn = 1; psn <= kSends; ++psn) ASSERT_TRUE(send_frame(*link, psn));
  ASSERT_TRUE(poll_until_delivered(*b.transport, b.sink, kSends));
  ASSERT_TRUE(a.sink.wait_frames_from(b.gid(), kSends, kDeliveryLimit));
  std::this_thread::sleep_for(20ms);  // a duplicate would arrive meanwhile
  const auto acks = a.sink.frames();
  ASSERT_EQ(acks.size(), kSends);
  for (uint32_t i = 0; i < kSends; ++i) {
    EXPECT_EQ(acks[i].header.op, FrameOp::kAck);
    EXPECT_EQ(acks[i].header.psn, i + 1);
  }
}

// send_held (a CQ armed, a QP leaving the connected states) sends the held ACKs before it
// returns: the peer, delivering what has arrived, has them; and an ACK the engine did not mark
// (kFrameMayHold) is never held, even inside a poll: it is there without any send_held. The
// same through the auto transport (shm beside TCP), which every device uses.
TEST(ShmDeferredAcks, SendHeldSendsThemAtOnceAndUnmarkedAcksAreNeverHeld) {
  for (const bool through_auto : {false, true}) {
    for (const bool marked : {true, false}) {
      SCOPED_TRACE(std::string(through_auto ? "auto transport, " : "shm transport, ") +
                   (marked ? "ACKs the transport may hold" : "ACKs it may not hold"));
      AcknowledgingSink b_sink;
      std::unique_ptr<Transport> b_transport =
          through_auto
              ? transports::make_auto_transport("127.0.0.1", transports::TransportChoice::kShm)
              : transports::shm::make_shm_transport({});
      ASSERT_NE(b_transport, nullptr);
      b_sink.never_hold = !marked;
      b_transport->set_sink(&b_sink);
      ShmEndpoint a;
      ASSERT_TRUE(a.transport);
      auto link = a.transport->connect(b_transport->local_gid());
      ASSERT_NE(link, nullptr);
      for (int i = 0; i < 200; ++i) program_poll(*b_transport);  // a busy poller
      constexpr uint32_t kSends = 8;
      for (uint32_t psn = 1; psn <= kSends; ++psn) ASSERT_TRUE(send_frame(*link, psn));
      ASSERT_TRUE(poll_until_delivered(*b_transport, b_sink, kSends));
      if (marked) b_transport->send_held();
      a.transport->finish_deliveries();
      EXPECT_EQ(a.sink.frames_from(b_transport->local_gid()), kSends);
      b_transport->set_sink(nullptr);
    }
  }
}

// Answers keep their order: a NAK sent after a deferred ACK arrives after it; a request may
// pass the deferred ACKs, and every frame arrives once.
TEST(ShmDeferredAcks, DeferredAcksNeverFollowALaterAnswer) {
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ShmEndpoint a;
    AckingEndpoint b;
    ASSERT_TRUE(a.transport && b.transport);
    auto link = a.transport->connect(b.gid());
    ASSERT_NE(link, nullptr);
    ASSERT_TRUE(send_frame(*link, 1));
    ASSERT_TRUE(poll_until_delivered(*b.transport, b.sink, 1));
    auto back = b.transport->connect(a.gid());
    ASSERT_NE(back, nullptr);
    ASSERT_TRUE(send_frame(*back, 7));  // a request of b's own
    ASSERT_TRUE(back->send(answer_header(FrameOp::kNak, 2), nullptr, 0));
    ASSERT_TRUE(a.sink.wait_frames_from(b.gid(), 3, kDeliveryLimit));
    std::this_thread::sleep_for(5ms);  // a duplicate would arrive meanwhile
    const auto got = a.sink.frames();
    ASSERT_EQ(got.size(), 3u);
    std::vector<FrameOp> answers;
    for (const Received& r : got) {
      if (r.header.op != FrameOp::kSend) answers.push_back(r.header.op);
    }
    EXPECT_EQ(answers, (std::vector<FrameOp>{FrameOp::kAck, FrameOp::kNak}));
  }
}

// A poll that delivered a request returns before reading the answers behind it, so that the
// program sees its completion first; the next poll reads them.
TEST(ShmDeferredAcks, APollThatDeliveredARequestLeavesTheAnswersBehindItForTheNext) {
  ShmEndpoint a;
  AckingEndpoint b;
  ASSERT_TRUE(a.transport && b.transport);
  auto link = a.transport->connect(b.gid());
  ASSERT_NE(link, nullptr);
  // b's transport thread stands aside while the program polls; it may still win a race now and
  // then, so the case is tried until this thread delivered the request.
  int decided = 0;
  for (uint32_t round = 0; round < 200 && decided < 5; ++round) {
    for (int i = 0; i < 200; ++i) program_poll(*b.transport);  // a busy poller
    const size_t before = b.sink.frame_count();
    const uint32_t psn = 2 * round + 1;
    ASSERT_TRUE(send_frame(*link, psn));
    ASSERT_TRUE(link->send(answer_header(FrameOp::kAck, psn + 1), nullptr, 0));
    // What this thread's first poll that found anything delivered (the transport's thread may
    // take some or all of it first).
    size_t first_call = 0;
    const auto deadline = Clock::now() + kDeliveryLimit;
    while (first_call == 0 && b.sink.frame_count() < before + 2) {
      ASSERT_LT(Clock::now(), deadline);
      first_call = program_poll(*b.transport);
    }
    ASSERT_TRUE(poll_until_delivered(*b.transport, b.sink, before + 2));
    if (b.sink.delivered_by(before) != std::this_thread::get_id()) continue;
    ++decided;
    EXPECT_EQ(first_call, 1u) << "the answer was read in the poll that delivered the request";
    EXPECT_EQ(b.sink.frames()[before + 1].header.op, FrameOp::kAck);
  }
  EXPECT_GT(decided, 0) << "this thread never delivered the request itself";
}

// Counts each SEND it is given as a completion for the CQ `cq` (nullptr: none), as the
// engine's responder does for the CQ of the receive it consumes; remembers which thread
// delivered what.
class CompletingSink : public RecordingSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    {
      std::lock_guard lock(threads_mutex_);
      delivered_by_.push_back(std::this_thread::get_id());
    }
    RecordingSink::on_frame(from, h, payload);
    if (h.op == FrameOp::kSend && cq != nullptr) emu::note_completion(cq);
  }
  // As the engine's node answers it: the poll this thread runs has what it asked for.
  bool poll_satisfied() const override { return emu::program_poll_satisfied(); }
  // Whether this thread delivered frames [first, first + n).
  bool delivered_here(size_t first, size_t n) {
    std::lock_guard lock(threads_mutex_);
    for (size_t i = first; i < first + n; ++i) {
      if (delivered_by_.at(i) != std::this_thread::get_id()) return false;
    }
    return true;
  }
  std::atomic<const void*> cq{nullptr};

 private:
  std::mutex threads_mutex_;
  std::vector<std::thread::id> delivered_by_;
};

// Holds each delivery until released, noting whether the delivering thread was fenced.
class HoldingSink : public RecordingSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    fenced = emu::deliveries_fenced();
    entered = true;
    const auto limit = Clock::now() + 5s;
    while (!released && Clock::now() < limit) std::this_thread::yield();
    RecordingSink::on_frame(from, h, payload);
  }
  std::atomic<bool> fenced{false};
  std::atomic<bool> entered{false};
  std::atomic<bool> released{false};
};

// Frames delivered from shared memory are fenced (emu/transport.h, FencedDeliveries): the
// transport's finish_deliveries() returns only once a delivery in progress has ended, which
// lets a node free a QP without counting each delivery as a reader of its QP table.
TEST(ShmFencedDeliveries, FinishDeliveriesReturnsOnlyOnceTheDeliveryInProgressEnds) {
  ShmEndpoint a;
  ShmEndpointWith<HoldingSink> b;
  ASSERT_TRUE(a.transport && b.transport);
  auto link = a.transport->connect(b.gid());
  ASSERT_NE(link, nullptr);
  ASSERT_TRUE(send_frame(*link, 1));
  const auto deadline = Clock::now() + kDeliveryLimit;
  // b's transport thread delivers it (nobody polls b), and holds it.
  while (!b.sink.entered && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(b.sink.entered) << "the frame was never delivered";
  EXPECT_TRUE(b.sink.fenced);
  EXPECT_FALSE(emu::deliveries_fenced());  // only while a drain delivers

  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    b.transport->finish_deliveries();
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned) << "finish_deliveries returned while a delivery was in progress";
  b.sink.released = true;
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(b.sink.frame_count(), 1u);
}

// A transport `a` linked to `b`, whose sink counts SENDs as completions and tells which thread
// delivered what: the polls of b's program are watched one by one.
class ShmPolledPair : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(a.transport && b.transport);
    link = a.transport->connect(b.gid());
    ASSERT_NE(link, nullptr);
  }
  ShmEndpoint a;
  ShmEndpointWith<CompletingSink> b;
  std::shared_ptr<Link> link;
};
using ShmPollDemand = ShmPolledPair;
using ShmPollLook = ShmPolledPair;

// A program's poll that has the completions it asked for returns without reading further (the
// next record is most often another cache line from the peer); the next poll reads on. A poll
// that wants more keeps reading.
TEST_F(ShmPollDemand, APollStopsReadingOnceItHasTheCompletionsItAskedFor) {
  const int polled_cq = 0;  // stands for the program's CQ: only its address is compared
  b.sink.cq = &polled_cq;
  // b's transport thread stands aside while the program polls; it may still win a race now and
  // then, so each case is tried until this thread delivered the frames it looks at.
  for (const size_t wanted : {1, 3}) {
    SCOPED_TRACE("the poll wants " + std::to_string(wanted));
    int decided = 0;
    for (uint32_t round = 0; round < 200 && decided < 5; ++round) {
      for (int i = 0; i < 200; ++i) b.transport->progress();  // a busy poller
      const size_t before = b.sink.frame_count();
      for (uint32_t psn = 1; psn <= 3; ++psn) ASSERT_TRUE(send_frame(*link, 3 * round + psn));
      // All three are in the ring before this thread polls.
      size_t first_call = 0;
      const auto deadline = Clock::now() + kDeliveryLimit;
      while (first_call == 0 && b.sink.frame_count() < before + 3) {
        ASSERT_LT(Clock::now(), deadline);
        emu::PollDemandScope demand(&polled_cq, static_cast<int>(wanted));
        first_call = b.transport->progress();
      }
      ASSERT_TRUE(poll_until_delivered(*b.transport, b.sink, before + 3));
      if (!b.sink.delivered_here(before, wanted)) continue;
      ++decided;
      EXPECT_EQ(first_call, wanted);
    }
    EXPECT_GT(decided, 0) << "this thread never delivered the frames itself";
  }
  b.sink.cq = nullptr;
}

// A program's poll looks at the head word where the next record will be before it takes a
// link's drain lock (ShmLink::drain_for_poll). A frame published after a run of empty polls,
// wherever the ring has got to (bulk frames take it round its end, through a padding record),
// is delivered by the very next poll.
TEST_F(ShmPollLook, AFramePublishedAfterEmptyPollsIsDeliveredByTheNextPoll) {
  const std::vector<uint8_t> bulk(transports::shm::kInlineMax, 0x5a);
  const uint32_t rounds =
      static_cast<uint32_t>(transports::shm::kRingBytes / (2 * bulk.size())) + 16;
  uint32_t psn = 1;
  int decided = 0;
  int missed = 0;
  for (uint32_t round = 0; round < rounds; ++round) {
    size_t before = b.sink.frame_count();
    ASSERT_TRUE(send_frame(*link, psn++, bulk));
    ASSERT_TRUE(send_frame(*link, psn++, bulk));
    ASSERT_TRUE(poll_until_delivered(*b.transport, b.sink, before + 2));
    for (uint32_t i = 0; i < 20 + round % 13; ++i) b.transport->progress();  // empty polls
    before = b.sink.frame_count();
    ASSERT_TRUE(send_frame(*link, psn++));
    const size_t first = b.transport->progress();
    ASSERT_TRUE(poll_until_delivered(*b.transport, b.sink, before + 1));
    // b's transport thread stands aside while the program polls; a round it delivered, or
    // whose first poll found it holding the drain lock, says nothing about the look.
    if (!b.sink.delivered_here(before, 1)) continue;
    ++decided;
    if (first != 1) ++missed;
  }
  EXPECT_GT(decided, 0) << "this thread never delivered the frames itself";
  EXPECT_LE(missed * 4, decided) << missed << " of " << decided
                                 << " frames waited for a later poll";
}

// The receiver thread sleeps once its rings are empty (docs/wire.md, "Shared memory"). It
// looks where the last drain left each ring, not at the index handed back to the producer,
// which lags up to an eighth of the ring behind: a record already consumed there must not
// keep it awake. (A thread kept awake spins: the process then uses about a core.)
using ShmReceiverThread = ShmPolledPair;
TEST_F(ShmReceiverThread, SleepsOnceWhatArrivedIsConsumedThoughNotYetHandedBack) {
  for (uint32_t psn = 1; psn <= 4; ++psn) ASSERT_TRUE(send_frame(*link, psn));
  ASSERT_TRUE(b.sink.wait_frames_from(a.gid(), 4, kDeliveryLimit));
  auto cpu_seconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  std::this_thread::sleep_for(100ms);  // the threads' short spin before they sleep
  const double cpu_before = cpu_seconds();
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(500ms);
  const double cpu = cpu_seconds() - cpu_before;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  EXPECT_LT(cpu, 0.25 * wall) << "the transports' threads used " << cpu << " s of CPU in " << wall
                              << " s with nothing to read";
}

}  // namespace
