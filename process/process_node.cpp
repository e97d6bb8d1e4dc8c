#include "process/process_node.h"

#include <cerrno>
#include <memory>
#include <system_error>

#include "transports/from_environment.h"

namespace process {

namespace {

std::unique_ptr<emu::Transport> transport_or_throw() {
  auto t = transports::transport_from_environment();
  // Only a refused secret gives none (logged with the variable and the reason).
  if (!t) throw std::system_error(EACCES, std::generic_category(), "the job's secret is refused");
  return t;
}

}  // namespace

emu::Node& node() {
  // A throw leaves the node unbuilt: the next call tries again (the environment may be fixed).
  static emu::Node node(transport_or_throw());
  return node;
}

}  // namespace process
