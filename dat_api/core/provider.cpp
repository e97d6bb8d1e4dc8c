#include "dat_api/core/provider.h"

#include <dat2/dat_registry.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

#include "dat_api/core/entry_points.h"
#include "dat_api/core/log.h"
#include "dat_api/core/provider_slots.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

namespace {

struct Entry {
  IaConfig config;
  DAT_PROVIDER table{};
  char device_name[DAT_NAME_MAX_LENGTH]{};  // the table's device_name points here
  bool used = false;
};

// Enough for every name a dat.conf could give this library; entries are never removed, so a
// pointer to one stays valid for the life of the process.
std::array<Entry, 32> g_entries;
std::mutex g_entries_mutex;

void fill_table(DAT_PROVIDER* t) {
  fill_not_implemented(t);
  fill_ep_dto(t);
  fill_cm(t);
  fill_rmr_cno(t);
  t->ia_open_func = api::ia_open;
  t->ia_query_func = api::ia_query;
  t->ia_close_func = api::ia_close;
  t->set_consumer_context_func = api::set_consumer_context;
  t->get_consumer_context_func = api::get_consumer_context;
  t->get_handle_type_func = api::get_handle_type;
  t->evd_create_func = api::evd_create;
  t->evd_query_func = api::evd_query;
  t->evd_modify_cno_func = api::evd_modify_cno;
  t->evd_enable_func = api::evd_enable;
  t->evd_disable_func = api::evd_disable;
  t->evd_wait_func = api::evd_wait;
  t->evd_resize_func = api::evd_resize;
  t->evd_post_se_func = api::evd_post_se;
  t->evd_dequeue_func = api::evd_dequeue;
  t->evd_free_func = api::evd_free;
  t->evd_set_unwaitable_func = api::evd_set_unwaitable;
  t->evd_clear_unwaitable_func = api::evd_clear_unwaitable;
  t->lmr_create_func = api::lmr_create;
  t->lmr_query_func = api::lmr_query;
  t->lmr_free_func = api::lmr_free;
  t->lmr_sync_rdma_read_func = api::lmr_sync_rdma_read;
  t->lmr_sync_rdma_write_func = api::lmr_sync_rdma_write;
  t->pz_create_func = api::pz_create;
  t->pz_query_func = api::pz_query;
  t->pz_free_func = api::pz_free;
  t->srq_create_func = api::srq_create;
  t->srq_free_func = api::srq_free;
  t->srq_post_recv_func = api::srq_post_recv;
  t->srq_query_func = api::srq_query;
  t->srq_resize_func = api::srq_resize;
  t->srq_set_lw_func = api::srq_set_lw;
  // udat_config.h defines DAT_EXTENSIONS, so the table always has the slot.
  t->handle_extendedop_func = ext_extension_op;
}

// instance_data is "<device> <port> <transport>"; every part is optional. Without a
// transport word the IA name's suffix decides (-shm, -tcp), else the environment is left as is.
void parse_instance_data(IaConfig* c, const char* instance_data) {
  c->device = "emu0";
  c->port = 1;
  c->transport.clear();
  std::istringstream in(instance_data != nullptr ? instance_data : "");
  std::string device, port, transport;
  if (in >> device) c->device = device;
  if (in >> port) c->port = std::atoi(port.c_str()) > 0 ? std::atoi(port.c_str()) : 1;
  if (in >> transport) {
    c->transport = transport;
  } else {
    const std::string& n = c->ia_name;
    auto ends_with = [&n](const char* s) {
      size_t l = std::strlen(s);
      return n.size() >= l && n.compare(n.size() - l, l, s) == 0;
    };
    if (ends_with("-shm")) c->transport = "shm";
    if (ends_with("-tcp")) c->transport = "tcp";
  }
}

Entry* find_entry_locked(const char* ia_name) {
  for (Entry& e : g_entries) {
    if (e.used && e.config.ia_name == ia_name) return &e;
  }
  return nullptr;
}

}  // namespace

const IaConfig* find_ia_config(const char* ia_name) {
  if (ia_name == nullptr) return nullptr;
  std::lock_guard<std::mutex> guard(g_entries_mutex);
  Entry* e = find_entry_locked(ia_name);
  return e != nullptr ? &e->config : nullptr;
}

const DAT_PROVIDER* provider_for(const char* ia_name) {
  const IaConfig* c = find_ia_config(ia_name);
  return c != nullptr ? c->provider : nullptr;
}

}  // namespace dat_api

using dat_api::Entry;

extern "C" {

// Called by the registry with the dat.conf entry's name, version and thread-safety (the key
// under which it will look the provider up) and the entry's ia_params.
__attribute__((visibility("default"))) void dat_provider_init(const DAT_PROVIDER_INFO* info,
                                                              const char* instance_data) {
  if (info == nullptr) return;
  dat_api::init_logging();
  Entry* entry = nullptr;
  {
    std::lock_guard<std::mutex> guard(dat_api::g_entries_mutex);
    entry = dat_api::find_entry_locked(info->ia_name);
    if (entry == nullptr) {
      for (Entry& e : dat_api::g_entries) {
        if (!e.used) {
          entry = &e;
          break;
        }
      }
      if (entry == nullptr) {
        dat_api::log_error("dat_provider_init: too many IA names, {} not registered",
                           info->ia_name);
        return;
      }
      entry->used = true;
      entry->config.ia_name = info->ia_name;
      std::snprintf(entry->device_name, sizeof(entry->device_name), "%s", info->ia_name);
      dat_api::fill_table(&entry->table);
      entry->table.device_name = entry->device_name;
      entry->config.provider = &entry->table;
    }
    entry->config.info = *info;
    dat_api::parse_instance_data(&entry->config, instance_data);
  }
  DAT_RETURN r = dat_registry_add_provider(&entry->table, info);
  // Already registered is fine: the registry calls init again after a fini it did not follow
  // with a removal, and a second dat.conf line of the same name lands here too.
  if (r != DAT_SUCCESS && DAT_GET_TYPE(r) != DAT_PROVIDER_ALREADY_REGISTERED) {
    dat_api::log_error("dat_registry_add_provider({}) failed: 0x{:x}", info->ia_name, r);
  }
  dat_api::log_debug("provider {} registered: device {} port {} transport '{}'", info->ia_name,
                     entry->config.device, entry->config.port, entry->config.transport);
}

__attribute__((visibility("default"))) void dat_provider_fini(const DAT_PROVIDER_INFO* info) {
  if (info == nullptr) return;
  const DAT_PROVIDER* provider = dat_api::provider_for(info->ia_name);
  if (provider != nullptr) dat_registry_remove_provider(provider, info);
}

}  // extern "C"
