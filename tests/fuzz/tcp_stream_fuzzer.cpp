// libFuzzer target: a TCP connection's receiving side as it runs, TcpLink's reader
// (transports/tcp/tcp_link_reader.cpp: read_locked, parse_locked, make_room_locked, receiving a
// large WRITE in place) and its opening handshake (tcp_link_handshake.cpp), on the accepting
// end of a real TcpLink whose dialer is the fuzzer. The link's socket is an accepted loopback
// TCP connection (the acceptor checks that the dialer's GID names the address it comes from);
// the input is written into the other end, which then closes, and the link's io_context runs
// until the link is down (tcp_link_harness.h, shared with tcp_dialer_fuzzer, the dialing end).
//
// Input: an options byte, then the bytes the peer sends. Options bit 0: the sink takes WRITEs
// of up to 1 MiB in place (FrameSink::direct_target) into a buffer of exactly their length;
// bit 1: the region is deregistered under the transfer (hold_region fails); bit 2: the bytes
// are sent as they are (the fuzzer's bytes are the handshake: a fuzzed HELLO, PROOF...), else
// after a valid dialer's handshake (so that most inputs reach the frames); bit 3: the job has
// a secret (the acceptor's owner holds it; the prologue's HELLO says so and its PROOF is
// computed from the acceptor's HELLO); bits 4-7, when not 0: the bytes go in pieces of that
// many 4 KiB, the reader running between two (a frame then arrives in parts, and large WRITEs
// are received in place). A frame with an odd PSN could take half its payload at most
// (FrameSink::payload_room): a large one is discarded as it arrives.
//
// Invariants: no frame is delivered before the handshake completed, and with a secret none
// ever is to a peer that sent its own bytes (bit 2: it cannot prove the secret); every frame
// delivered carries a payload of exactly the length its header gives (0 for the ops without
// one); the headers and payloads delivered never add up to more bytes than the peer sent; the
// link goes down once (the peer's end of file, or a bad unit) and nothing is delivered after
// it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/tcp_link_harness.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_wire.h"

using namespace tcp_fuzz;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  open_listener();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  const bool prologue = !(options & 4);
  // The prologue's HELLO goes first; with a secret, its PROOF once the acceptor's HELLO came.
  const tw::Hello ours = peer_hello(dialer_gid(), options, 0x33);
  PeerStream stream;
  if (prologue) {
    stream.bytes.resize(tw::kHelloBytes);
    tw::encode_hello(ours, stream.bytes.data());
    if (ours.has_secret) {
      stream.fill_at = stream.bytes.size();
      stream.bytes.resize(stream.bytes.size() + tw::kProofBytes);
    }
  }
  stream.bytes.insert(stream.bytes.end(), data + 1, data + size);

  int fds[2];  // the link's (accepted) end, the fuzzer's (dialing) end
  FUZZ_CHECK(connect_pair(fds));
  Owner owner(options, stream.bytes.size(), /*dialer=*/false);
  stream.fill = [&](const tw::Hello& theirs, uint8_t* at) {
    FUZZ_CHECK(theirs.has_secret);
    transports::tcp::HandshakeTranscript t;
    t.dialer_nonce = ours.nonce;
    t.acceptor_nonce = theirs.nonce;
    t.dialer_gid = ours.gid;
    t.acceptor_gid = theirs.gid;
    FUZZ_CHECK(transports::tcp::same_mac(
        theirs.proof.data(), transports::tcp::acceptor_proof(owner.secret(), t).data()));
    tw::encode_proof(transports::tcp::dialer_proof(owner.secret(), t), at);
  };
  std::vector<uint8_t> answers;  // what the link sent us: its HELLO first
  run_link(owner, options, fds[0], fds[1], acceptor_gid(), nullptr, stream, &answers,
           tw::kHelloBytes);
  return 0;
}
