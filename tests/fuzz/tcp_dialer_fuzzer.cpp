// libFuzzer target: the dialing end of a real TcpLink (tcp_link_handshake.cpp: its HELLO, the
// acceptor's HELLO and proof checked, its PROOF, the WELCOME; then tcp_link_reader.cpp), the
// fuzzer playing the acceptor. The link is handed the dialing end of a loopback TCP
// connection and expects the peer dialed_gid() names; the input is written into the
// accepted end, which then closes, and the link's io_context runs until the link is down
// (tcp_link_harness.h, shared with tcp_stream_fuzzer, the accepting end).
//
// Input: an options byte (tcp_link_harness.h), then the bytes the acceptor sends. Without bit
// 2 they follow a valid acceptor's HELLO (with bit 3, the job's secret and the proof computed
// from the link's HELLO) and WELCOME, so that most inputs reach the frames; with bit 2 the
// fuzzer's bytes are the acceptor's HELLO and WELCOME.
//
// Invariants: no frame is delivered before the WELCOME completed the handshake, and with a
// secret none ever is to an acceptor that sent its own bytes (bit 2: it cannot prove the
// secret); with a secret the link sends its PROOF (and it is the dialer's proof) only after the
// acceptor's proof held, and nothing but its HELLO to an acceptor that did not prove it; every
// frame delivered carries a payload of exactly its header's length; headers and payloads
// delivered never add up to more than was sent; the link goes down once and nothing is
// delivered after it.
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/tcp_link_harness.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_wire.h"

using namespace tcp_fuzz;

namespace {

// The GID the link dialed: fixed (not the listener's port), so that the seeds' HELLOs
// (fuzz_seeds.cpp) name it. The dialer compares GIDs only; it does not see the address.
Gid dialed_gid() {
  return transports::tcp::tcp_gid_of({INADDR_LOOPBACK, 7471});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  open_listener();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  const bool prologue = !(options & 4);
  const bool secret = (options & 8) != 0;
  // The prologue: the acceptor's HELLO (with a secret, its proof over the link's nonce, written
  // once the link's HELLO came), then the WELCOME.
  const tw::Hello ours = peer_hello(dialed_gid(), options, 0x44);
  PeerStream stream;
  if (prologue) {
    stream.bytes.resize(tw::kHelloBytes + tw::kWelcomeBytes);
    tw::encode_hello(ours, stream.bytes.data());
    if (secret) stream.fill_at = 0;
    tw::encode_welcome(stream.bytes.data() + tw::kHelloBytes);
  }
  stream.bytes.insert(stream.bytes.end(), data + 1, data + size);

  int fds[2];  // the fuzzer's (accepted) end, the link's (dialing) end
  // The fuzzer's end sends the first FIN (the link waits for its end of file): a fresh
  // source address each time, or TIME_WAIT exhausts the ports.
  FUZZ_CHECK(connect_pair(fds, next_loopback_source()));
  Owner owner(options, stream.bytes.size(), /*dialer=*/true);
  transports::tcp::HandshakeTranscript transcript;
  stream.fill = [&](const tw::Hello& theirs, uint8_t* at) {
    FUZZ_CHECK(theirs.has_secret && theirs.gid == dialer_gid());
    transcript.dialer_nonce = theirs.nonce;
    transcript.acceptor_nonce = ours.nonce;
    transcript.dialer_gid = theirs.gid;
    transcript.acceptor_gid = ours.gid;
    tw::Hello answer = ours;
    answer.proof = transports::tcp::acceptor_proof(owner.secret(), transcript);
    tw::encode_hello(answer, at);
  };
  // The link's HELLO and, with a secret, its PROOF.
  const size_t keep = tw::kHelloBytes + tw::kProofBytes;
  std::vector<uint8_t> answers;
  const Gid peer = dialed_gid();
  run_link(owner, options, fds[1], fds[0], dialer_gid(), &peer, stream, &answers, keep);

  // The link's HELLO came first, as it is: its GID, and whether it has a secret.
  FUZZ_CHECK(answers.size() >= tw::kHelloBytes);
  tw::Hello link_hello;
  FUZZ_CHECK(tw::decode_hello(answers.data(), &link_hello) == nullptr);
  FUZZ_CHECK(link_hello.gid == dialer_gid() && link_hello.has_secret == secret);
  if (secret && !prologue) {
    // An acceptor that cannot prove the secret gets nothing but the HELLO.
    FUZZ_CHECK(answers.size() == tw::kHelloBytes);
  } else if (secret && owner.handshake_done()) {
    // The PROOF the link sent is the dialer's, over this handshake.
    FUZZ_CHECK(answers.size() == keep);
    Mac proof;
    FUZZ_CHECK(tw::decode_proof(answers.data() + tw::kHelloBytes, &proof) == nullptr);
    const Mac expected = transports::tcp::dialer_proof(owner.secret(), transcript);
    FUZZ_CHECK(transports::tcp::same_mac(proof.data(), expected.data()));
  }
  return 0;
}
