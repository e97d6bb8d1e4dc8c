// What tests reach in the transports beyond the Transport interface: faults injected at the
// link (a peer that dies, a connection reset) and looks inside a TCP connection. No product
// code calls these (tests/layers/check_layers.sh lets only transports/ include this header);
// each is defined by its transport.
#pragma once

#include <cstddef>

#include "transports/common/engine_interface.h"

namespace transports {

// For tests: the bytes this process holds for payloads received and not yet delivered (TCP
// receive buffers, shm staged frames: transports/common/receive_memory.h), the most it held
// at once since the last reset, and a reset of that peak to what is held now.
size_t receive_memory_held();
size_t receive_memory_peak();
void reset_receive_memory_peak();

// Closes every shm and TCP connection of t (an auto, shm or tcp transport) as a dying peer
// would: each reports on_link_down. For fault tests. False if t has none of those kinds.
bool drop_connections(Transport& t);

namespace shm {

// Closes every link of a shm transport as a dying peer would; each reports on_link_down
// here and the peers see the end. For fault tests. False if t is not a shm transport.
bool shm_drop_connections(Transport& t);

}  // namespace shm

namespace tcp {

// Closes every connection of a TCP transport as a reset would: each reports on_link_down
// here, and the peers see the connection end. Returns once done. For fault tests and
// operators; must not be called from a FrameSink callback. Returns false if t is not TCP.
bool tcp_drop_connections(Transport& t);

// For tests and diagnostics: the socket descriptor under a TCP link (-1 for another kind of
// link), and the number of connections a TCP transport has open, handshakes included (0 for
// another transport).
int tcp_link_socket(const Link& link);
size_t tcp_connection_count(Transport& t);
// For tests: the connections of a TCP transport whose bulk lane for sending is open.
size_t tcp_bulk_lanes(Transport& t);
// For tests: the largest receive buffer among a TCP transport's connections, in bytes.
size_t tcp_rx_capacity(Transport& t);

}  // namespace tcp

}  // namespace transports
