// The connection manager's authentication (docs/wire.md, "CM handshake"): with a job secret,
// every CM stream opens with a mutual HMAC-SHA-256 challenge-response before any CM message is
// acted on:
//
//   active                                   passive
//   AUTH(nonce_a)                       ->
//                                       <-   AUTH_REPLY(nonce_p, proof_p)
//   AUTH_PROOF(proof_a), then the REQ   ->
//
// proof_p = HMAC(secret, "emurdma-dat-cm passive\0" | nonce_a | nonce_p) and proof_a the same
// under "emurdma-dat-cm active\0" (the labels keep the name they had when the DAT face alone
// spoke this protocol): each side proves the secret over a nonce the other just drew
// (getrandom, fresh per stream), under its own role label, so a proof reflected back is never
// the one expected. The passive side reads nothing but the AUTH_PROOF until it checks; the
// active side sends nothing but its proof until the passive side's proof checks.
//
// The bounds of the passive side, with or without a secret: a stream must bring its first
// message (after its proof) within kFirstMessageTimeout, and at most kMaxUnauthenticated
// accepted streams of one listener's owner may be waiting to do so; beyond, the listener stops
// accepting (the kernel's backlog holds the rest: a legitimate burst, such as dtestcm's 1000
// connects, only waits) until one of them is done. Every refusal or pause is a log line, at
// most one a second (the rest are counted into the next one).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "base/job_secret.h"
#include "cm/cm_wire.h"

namespace cm {

inline constexpr auto kFirstMessageTimeout = std::chrono::seconds(5);
inline constexpr int kMaxUnauthenticated = 64;

// The proofs (constant-time comparison: base::same_mac).
Proof passive_proof(const base::JobSecret& secret, const Nonce& active, const Nonce& passive);
Proof active_proof(const base::JobSecret& secret, const Nonce& active, const Nonce& passive);

// A refused or failed connection's log line (warn), at most one a second process-wide; the
// lines held back meanwhile are counted in the next one.
void log_refusal(const std::string& line);

}  // namespace cm
