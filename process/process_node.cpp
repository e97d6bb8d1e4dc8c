#include "process/process_node.h"

#include "transports/from_environment.h"

namespace process {

emu::Node& node() {
  static emu::Node node(transports::transport_from_environment());
  return node;
}

}  // namespace process
