// The engine's transport interface (emu/transport.h) as the transports name it: every transport
// implements Transport and Link, hands frames to a FrameSink and reads nothing else of the
// engine. The names are brought into namespace transports once, here, so that a transport's
// code reads as its own.
#pragma once

#include "emu/transport.h"

namespace transports {

using emu::deliveries_fenced;
using emu::DirectTarget;
using emu::DiscardedPayload;
using emu::FencedDeliveries;
using emu::FrameHeader;
using emu::FrameOp;
using emu::FrameSink;
using emu::Gid;
using emu::is_answer;
using emu::is_request;
using emu::kFrameAckReq;
using emu::kFrameDatagram;
using emu::kFrameFetchAdd;
using emu::kFrameImm;
using emu::kFrameInlineBytes;
using emu::kFrameInvalidate;
using emu::kFrameMayHold;
using emu::kFrameSolicited;
using emu::kFrameUd;
using emu::Link;
using emu::LocalPayload;
using emu::NakCode;
using emu::PayloadSource;
using emu::Transport;

}  // namespace transports
