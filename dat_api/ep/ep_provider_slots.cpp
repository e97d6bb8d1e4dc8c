// The DAT_PROVIDER slots of the endpoints and DTOs (core/provider_slots.h).
#include "dat_api/core/provider_slots.h"
#include "dat_api/ep/ep_entry_points.h"

namespace dat_api {

void fill_ep_dto(DAT_PROVIDER* t) {
  t->ep_create_func = api::ep_create;
  t->ep_create_with_srq_func = api::ep_create_with_srq;
  t->ep_free_func = api::ep_free;
  t->ep_query_func = api::ep_query;
  t->ep_get_status_func = api::ep_get_status;
  t->ep_recv_query_func = api::ep_recv_query;
  t->ep_set_watermark_func = api::ep_set_watermark;
  t->ep_modify_func = api::ep_modify;
  t->ep_reset_func = api::ep_reset;
  t->ep_post_send_func = api::ep_post_send;
  t->ep_post_send_with_invalidate_func = api::ep_post_send_with_invalidate;
  t->ep_post_recv_func = api::ep_post_recv;
  t->ep_post_rdma_read_func = api::ep_post_rdma_read;
  t->ep_post_rdma_read_to_rmr_func = api::ep_post_rdma_read_to_rmr;
  t->ep_post_rdma_write_func = api::ep_post_rdma_write;
}

}  // namespace dat_api
