// What every role of emu_mp_peer is built from: the line bus to the driver (out-of-band
// exchange), the checks that print expected vs seen, the engine objects of one open device on
// the process's node (so EMURDMA_TRANSPORT applies), and bounded waits on completions.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/objects.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/mp/mp_protocol.h"
#include "tests/rc_connect.h"

namespace mp {

// How long a peer waits for anything (a relayed line, a completion, an event) before it gives
// up: long enough never to matter on a loaded machine, short of the driver's own limit.
inline constexpr std::chrono::seconds kWaitLimit{40};

// A setup step that failed: the role cannot go on. main() reports it and exits non-zero.
struct PeerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A line relayed from another peer: "FROM <from> <tag> k=v ...".
struct Message {
  std::string from;
  std::string tag;
  std::map<std::string, std::string> fields;

  bool has(const std::string& key) const { return fields.count(key) != 0; }
  uint64_t num(const std::string& key) const;
  std::string text(const std::string& key) const;
  ibv_gid gid(const std::string& key) const;
};

// Builds the k=v words of an outgoing line.
class Fields {
 public:
  Fields& add(const std::string& key, uint64_t value);
  Fields& add(const std::string& key, const std::string& value);
  Fields& add(const std::string& key, const ibv_gid& gid);
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

// The peer's stdin/stdout: lines to the driver and relayed lines from the other peers.
class Bus {
 public:
  explicit Bus(std::string self) : self_(std::move(self)) {}
  const std::string& self() const { return self_; }

  void send(const std::string& to, const std::string& tag, const Fields& fields = Fields());
  // The next line from `from` with this tag (others are kept for later calls). Throws
  // PeerError if none comes within kWaitLimit or stdin closes.
  Message receive(const std::string& from, const std::string& tag);
  void event(const std::string& name);
  void result(const std::string& key, const std::string& value);
  void note(const std::string& text);  // a transcript line
  // Every peer in `others` has reached the same named point (each tells the others).
  void barrier(const std::string& name, const std::vector<std::string>& others);

 private:
  void emit(const std::string& line);
  bool read_line(std::string* line, std::chrono::steady_clock::time_point deadline);

  std::string self_;
  std::vector<Message> pending_;
  std::string stdin_buffer_;
  bool stdin_closed_ = false;
};

// The peer's own checks: each failure prints a FAIL line; the exit code counts them.
class Checks {
 public:
  explicit Checks(Bus& bus) : bus_(bus) {}
  bool that(bool ok, const std::string& what);
  template <typename Seen, typename Expected>
  bool eq(const Seen& seen, const Expected& expected, const std::string& what) {
    if (seen == expected) return true;
    std::ostringstream s;
    s << what << ": expected " << show(expected) << ", seen " << show(seen);
    return that(false, s.str());
  }
  bool status(ibv_wc_status seen, ibv_wc_status expected, const std::string& what);
  int failures() const { return failures_; }

 private:
  template <typename T>
  static std::string show(const T& v) {
    std::ostringstream s;
    if constexpr (std::is_enum_v<T>) {
      s << static_cast<long long>(v);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      s << static_cast<int>(v);
    } else {
      s << v;
    }
    return s.str();
  }

  Bus& bus_;
  int failures_ = 0;
};

// Where a QP and the memory behind it can be reached: what a verbs program exchanges.
struct RemoteQp {
  uint32_t qpn = 0;
  ibv_gid gid{};
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t len = 0;
};

// The connection every role uses unless it says otherwise: rc_connect.h's, with a local ACK
// timeout of 4.096 us x 2^17 = 0.54 s (7 retries), since several processes share two busy
// cores here; the timeout tests ask for shorter ones.
inline emu_test::ConnectOptions connect_options() {
  emu_test::ConnectOptions o;
  o.timeout = 17;
  o.retry_cnt = 7;
  return o;
}

// One open device: a context on the process's node and the objects a role creates, destroyed
// in dependency order when the device goes.
class Device {
 public:
  Device();
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  emu::Context& ctx() { return *ctx_; }
  emu::Pd* pd() { return pd_; }
  ibv_gid gid() const;

  emu::CompChannel* channel();
  emu::Cq* cq(int cqe, emu::CompChannel* channel = nullptr);
  emu::Mr* reg(void* addr, size_t len, int access);
  void dereg(emu::Mr* mr);
  emu::Srq* srq(uint32_t max_wr);
  emu::Qp* rc_qp(emu::Cq* send_cq, emu::Cq* recv_cq, uint32_t depth, emu::Srq* srq = nullptr);
  emu::Qp* ud_qp(emu::Cq* send_cq, emu::Cq* recv_cq, uint32_t depth);
  emu::Ah* ah(const ibv_gid& gid);
  void destroy_qp(emu::Qp* qp);

  // The exchange line describing qp (and a memory region, if any).
  Fields describe(const emu::Qp* qp, const emu::Mr* mr = nullptr) const;
  static RemoteQp remote_of(const Message& m);
  // RESET -> RTS against the remote QP; throws PeerError naming the refused step.
  void connect(emu::Qp* qp, const RemoteQp& remote,
               const emu_test::ConnectOptions& options = connect_options());

 private:
  std::unique_ptr<emu::Context> ctx_;
  emu::Pd* pd_ = nullptr;
  std::vector<emu::CompChannel*> channels_;
  std::vector<emu::Cq*> cqs_;
  std::vector<emu::Mr*> mrs_;
  std::vector<emu::Srq*> srqs_;
  std::vector<emu::Qp*> qps_;
  std::vector<emu::Ah*> ahs_;
};

// Reaps completions until n have come or kWaitLimit passes; returns what came.
std::vector<ibv_wc> poll_n(emu::Cq* cq, size_t n);
// Whatever the CQ holds right now (and what progress delivers meanwhile).
std::vector<ibv_wc> poll_available(emu::Cq* cq);

// Work requests.
int post_send(emu::Qp* qp, uint64_t wr_id, ibv_wr_opcode op, const void* buf, uint32_t len,
              const emu::Mr* mr, uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t imm_host = 0,
              int flags = IBV_SEND_SIGNALED);
int post_atomic(emu::Qp* qp, uint64_t wr_id, ibv_wr_opcode op, uint64_t* result, const emu::Mr* mr,
                uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap);
template <typename Queue>
int post_recv(Queue* queue, uint64_t wr_id, void* buf, uint32_t len, const emu::Mr* mr) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return queue->post_recv(&wr, &bad);
}

// Checks a successful completion of wr_id with the given opcode.
void expect_success(Checks& check, const ibv_wc& wc, uint64_t wr_id, ibv_wc_opcode opcode,
                    const std::string& what);
// Reaps exactly n completions; a PeerError if they do not all come within kWaitLimit.
std::vector<ibv_wc> reap(emu::Cq* cq, size_t n, const std::string& what);
// A post the role cannot go on without: a PeerError if refused.
void require_posted(int err, const std::string& what);

ibv_qp_state state_of(emu::Qp* qp);
// n bytes that differ position to position and seed to seed.
std::vector<uint8_t> pattern(size_t n, uint32_t seed);
std::string status_name(ibv_wc_status s);

// Decimal list "a,b,c" of values, for RESULT lines.
std::string join(const std::vector<uint64_t>& values);

}  // namespace mp
