// The connection manager's part of tearing down endpoints and IAs, called by the endpoint and
// IA code (ep/ep.h, cm_teardown.h): connections aborted or broken, the CM thread stopped.
#include "dat_api/cm/cm_teardown.h"

#include "dat_api/cm/cm_connection.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/ep/ep.h"

namespace dat_api {

void cm_on_ep_free(Ep& ep) {
  std::shared_ptr<Connection> connection;
  std::vector<std::shared_ptr<Connection>> ud_connections;
  {
    // Detached under the EP's lock: the CM thread checks the attachment under the same lock
    // before it posts an event, so none comes after this.
    std::lock_guard<std::mutex> guard(ep.mutex);
    connection = std::move(ep.connection);
    ud_connections.swap(ep.ud_connections);
  }
  // The socket closes without a DREQ: a connected peer sees DAT_CONNECTION_EVENT_BROKEN.
  if (connection) connection->service().post([connection] { connection->abort(); });
  // UD exchanges still under way end here (the peer sees its request refused or its
  // answer's socket closed); finished ones have no socket left.
  for (auto& c : ud_connections) c->service().post([c] { c->abort(); });
}

void cm_break_connection(Ep& ep) {
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard<std::mutex> guard(ep.mutex);
    connection = ep.connection;
  }
  if (connection) connection->service().post([connection] { connection->break_locally(); });
}

void cm_on_ia_close(Ia& ia) {
  CmService::close_ia(ia);
}

}  // namespace dat_api
