// Encoding and decoding of the connection manager's frames (cm_wire.h). All integers are
// big-endian; addresses travel as {family u16, port u16, 16 address bytes}; flags as one byte,
// 0 or 1.
#include "cm/cm_wire.h"

#include <netinet/in.h>

#include <cstring>

namespace cm {

namespace {

constexpr uint8_t kMagic[4] = {'E', 'M', 'C', 'M'};
constexpr size_t kQpInfoSize = 4 + 4 + 16 + 6;
constexpr size_t kAddressSize = 20;
// A REQ's fields before its private data: QP, QP type, port space, service, two addresses.
constexpr size_t kReqFixedSize = kQpInfoSize + 1 + 2 + 8 + 2 * kAddressSize;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(v); }
  void u16(uint16_t v) {
    u8(static_cast<uint8_t>(v >> 8));
    u8(static_cast<uint8_t>(v));
  }
  void u32(uint32_t v) {
    u16(static_cast<uint16_t>(v >> 16));
    u16(static_cast<uint16_t>(v));
  }
  void u64(uint64_t v) {
    u32(static_cast<uint32_t>(v >> 32));
    u32(static_cast<uint32_t>(v));
  }
  void bytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }

 private:
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool ok() const { return ok_; }
  size_t left() const { return n_; }
  uint8_t u8() {
    if (!take(1)) return 0;
    return p_[-1];
  }
  uint16_t u16() {
    uint16_t hi = u8();
    return static_cast<uint16_t>((hi << 8) | u8());
  }
  uint32_t u32() {
    uint32_t hi = u16();
    return (hi << 16) | u16();
  }
  uint64_t u64() {
    uint64_t hi = u32();
    return (hi << 32) | u32();
  }
  void bytes(void* out, size_t n) {
    if (n == 0 || !take(n)) return;  // an empty vector's data() may be null
    std::memcpy(out, p_ - n, n);
  }

 private:
  bool take(size_t n) {
    if (!ok_ || n > n_) {
      ok_ = false;
      return false;
    }
    p_ += n;
    n_ -= n;
    return true;
  }
  const uint8_t* p_;
  size_t n_;
  bool ok_ = true;
};

void write_qp(Writer& w, const QpInfo& qp) {
  w.u32(qp.qpn);
  w.u32(qp.psn);
  w.bytes(qp.gid.raw, sizeof(qp.gid.raw));
  w.u8(qp.responder_resources);
  w.u8(qp.initiator_depth);
  w.u8(qp.retry_count);
  w.u8(qp.rnr_retry_count);
  w.u8(qp.flow_control ? 1 : 0);
  w.u8(qp.srq ? 1 : 0);
}

// A flag is 0 or 1; anything else is malformed (*ok false).
bool read_flag(Reader& r, bool* ok) {
  const uint8_t v = r.u8();
  if (v > 1) *ok = false;
  return v == 1;
}

// Retry counts beyond their 3 bits are malformed (*ok false).
QpInfo read_qp(Reader& r, bool* ok) {
  QpInfo qp;
  qp.qpn = r.u32();
  qp.psn = r.u32();
  r.bytes(qp.gid.raw, sizeof(qp.gid.raw));
  qp.responder_resources = r.u8();
  qp.initiator_depth = r.u8();
  qp.retry_count = r.u8();
  qp.rnr_retry_count = r.u8();
  if (qp.retry_count > kMaxRetryCount || qp.rnr_retry_count > kMaxRetryCount) *ok = false;
  qp.flow_control = read_flag(r, ok);
  qp.srq = read_flag(r, ok);
  return qp;
}

bool known_port_space(uint16_t v) {
  switch (static_cast<PortSpace>(v)) {
    case PortSpace::kIpoib:
    case PortSpace::kTcp:
    case PortSpace::kUdp:
    case PortSpace::kIb:
      return true;
  }
  return false;
}

bool known_qp_type(uint8_t v) {
  switch (static_cast<QpType>(v)) {
    case QpType::kRc:
    case QpType::kUc:
    case QpType::kUd:
      return true;
  }
  return false;
}

void write_address(Writer& w, const sockaddr_storage& a) {
  uint8_t raw[16] = {};
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&a);
    std::memcpy(raw, &sin->sin_addr, 4);
    port = ntohs(sin->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&a);
    std::memcpy(raw, &sin6->sin6_addr, 16);
    port = ntohs(sin6->sin6_port);
  }
  w.u16(a.ss_family);
  w.u16(port);
  w.bytes(raw, sizeof(raw));
}

// An address of another family than IPv4 or IPv6 is malformed (*ok false).
sockaddr_storage read_address(Reader& r, bool* ok) {
  sockaddr_storage a{};
  uint16_t family = r.u16();
  if (family != AF_INET && family != AF_INET6) *ok = false;
  uint16_t port = r.u16();
  uint8_t raw[16] = {};
  r.bytes(raw, sizeof(raw));
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&a);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    std::memcpy(&sin->sin_addr, raw, 4);
  } else if (family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    std::memcpy(&sin6->sin6_addr, raw, 16);
  }
  return a;
}

void write_private_data(Writer& w, const std::vector<uint8_t>& pd) {
  w.u16(static_cast<uint16_t>(pd.size()));
  w.bytes(pd.data(), pd.size());
}

bool read_private_data(Reader& r, std::vector<uint8_t>* pd) {
  uint16_t size = r.u16();
  if (!r.ok() || size > kMaxPrivateData || size > r.left()) return false;
  pd->resize(size);
  r.bytes(pd->data(), size);
  return r.ok();
}

}  // namespace

std::vector<uint8_t> encode(const Message& m) {
  std::vector<uint8_t> frame;
  frame.reserve(kHeaderSize + kReqFixedSize + 2 + m.private_data.size());
  Writer w(&frame);
  w.bytes(kMagic, sizeof(kMagic));
  w.u8(kVersion);
  w.u8(static_cast<uint8_t>(m.type));
  w.u16(0);
  w.u32(0);  // body length, patched below
  switch (m.type) {
    case Type::kReq:
    case Type::kUdReq:
      write_qp(w, m.qp);
      w.u8(static_cast<uint8_t>(m.qp_type));
      w.u16(static_cast<uint16_t>(m.port_space));
      w.u64(m.service);
      write_address(w, m.source);
      write_address(w, m.destination);
      write_private_data(w, m.private_data);
      break;
    case Type::kRep:
      write_qp(w, m.qp);
      write_private_data(w, m.private_data);
      break;
    case Type::kUdRep:
      write_qp(w, m.qp);
      w.u32(m.qkey);
      write_private_data(w, m.private_data);
      break;
    case Type::kRej:
      w.u16(static_cast<uint16_t>(m.reason));
      write_private_data(w, m.private_data);
      break;
    case Type::kDreq:
      if (m.sent_psn) w.u32(*m.sent_psn & kMaxPsn);
      break;
    case Type::kRtu:
    case Type::kDrep:
      break;
    case Type::kAuth:
      w.bytes(m.nonce.data(), m.nonce.size());
      break;
    case Type::kAuthReply:
      w.bytes(m.nonce.data(), m.nonce.size());
      w.bytes(m.proof.data(), m.proof.size());
      break;
    case Type::kAuthProof:
      w.bytes(m.proof.data(), m.proof.size());
      break;
  }
  auto body = static_cast<uint32_t>(frame.size() - kHeaderSize);
  for (int i = 0; i < 4; ++i) frame[8 + i] = static_cast<uint8_t>(body >> (24 - 8 * i));
  return frame;
}

std::optional<uint32_t> parse_header(const uint8_t* header, Type* type) {
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  if (header[4] != kVersion) return std::nullopt;
  uint8_t t = header[5];
  if (t < static_cast<uint8_t>(Type::kReq) || t > static_cast<uint8_t>(Type::kAuthProof)) {
    return std::nullopt;
  }
  *type = static_cast<Type>(t);
  uint32_t length = (uint32_t{header[8]} << 24) | (uint32_t{header[9]} << 16) |
                    (uint32_t{header[10]} << 8) | header[11];
  if (length > kMaxBody) return std::nullopt;
  return length;
}

std::optional<Message> parse_body(Type type, const uint8_t* body, size_t size) {
  Reader r(body, size);
  Message m;
  m.type = type;
  bool ok = true;  // what the reader cannot see: bounds and known values of the fields
  switch (type) {
    case Type::kReq:
    case Type::kUdReq: {
      m.qp = read_qp(r, &ok);
      const uint8_t qp_type = r.u8();
      const uint16_t port_space = r.u16();
      if (!known_qp_type(qp_type) || !known_port_space(port_space)) ok = false;
      m.qp_type = static_cast<QpType>(qp_type);
      m.port_space = static_cast<PortSpace>(port_space);
      m.service = r.u64();
      m.source = read_address(r, &ok);
      m.destination = read_address(r, &ok);
      if (!ok || !read_private_data(r, &m.private_data)) return std::nullopt;
      break;
    }
    case Type::kRep:
      m.qp = read_qp(r, &ok);
      if (!ok || !read_private_data(r, &m.private_data)) return std::nullopt;
      break;
    case Type::kUdRep:
      m.qp = read_qp(r, &ok);
      m.qkey = r.u32();
      if (!ok || !read_private_data(r, &m.private_data)) return std::nullopt;
      break;
    case Type::kRej: {
      const uint16_t reason = r.u16();
      if (reason == 0 || reason > kMaxRejectReason) return std::nullopt;
      m.reason = static_cast<RejectReason>(reason);
      if (!read_private_data(r, &m.private_data)) return std::nullopt;
      break;
    }
    case Type::kDreq:
      // Empty, or the sender's PSN (24 bits).
      if (size != 0) {
        const uint32_t psn = r.u32();
        if (psn > kMaxPsn) return std::nullopt;
        m.sent_psn = psn;
      }
      break;
    case Type::kRtu:
    case Type::kDrep:
      break;
    case Type::kAuth:
      r.bytes(m.nonce.data(), m.nonce.size());
      break;
    case Type::kAuthReply:
      r.bytes(m.nonce.data(), m.nonce.size());
      r.bytes(m.proof.data(), m.proof.size());
      break;
    case Type::kAuthProof:
      r.bytes(m.proof.data(), m.proof.size());
      break;
  }
  // A body is exactly its fields: trailing bytes are a malformed frame, not padding.
  if (!r.ok() || r.left() != 0) return std::nullopt;
  return m;
}

}  // namespace cm
