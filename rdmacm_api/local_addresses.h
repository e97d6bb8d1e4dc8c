// Which addresses are this host's (this netns's), and which source address the kernel would
// route from. FOR NOW here: cm/cm_addresses (is_local_address, source_address_for) replaces
// this file when it lands (issue 23), the callers unchanged.
#pragma once

#include <sys/socket.h>

namespace rdmacm_api {

// Loopback, an address of one of this netns's interfaces, or a wildcard.
bool is_local_address(const sockaddr* addr);
// The source address of the route to `dst` (port 0), as a connected UDP socket learns it;
// a wildcard destination means this host (the kernel resolves it to loopback).
// Returns 0 or the errno of the failed route lookup (ENETUNREACH ...).
int source_address_for(const sockaddr* dst, sockaddr_storage* src);

}  // namespace rdmacm_api
