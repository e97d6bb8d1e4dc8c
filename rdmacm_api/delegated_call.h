// The one-line hand-over of an exported call on a delegated id (delegation.h).
#pragma once

#include <optional>

#include "rdmacm_api/delegation.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/system_rdmacm.h"

namespace rdmacm_api::delegation {

// When `id` is delegated: runs `call(library, system id)`, mirrors the system id into the
// program's and gives librdmacm's result (0, or -1 with errno). nullopt when the id is ours.
template <class Call>
std::optional<int> forward(Id& id, Call&& call) {
  const system_cm::Library* l = of(id);
  if (l == nullptr) return std::nullopt;
  const int returned = call(*l, id.system.id);
  mirror(id);
  return system_cm::result(*l, returned);
}

}  // namespace rdmacm_api::delegation
