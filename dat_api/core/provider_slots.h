// The DAT_PROVIDER table handed to libdat2 (one per IA name, provider.cpp): each room fills
// the slots it implements. provider.cpp fills the core objects' slots and calls these.
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

namespace dat_api {

// not_implemented.cpp: the slots the provider refuses with DAT_NOT_IMPLEMENTED
// (dat_ia_ha_related).
void fill_not_implemented(DAT_PROVIDER* table);
void fill_ep_dto(DAT_PROVIDER* table);   // ep/ep_provider_slots.cpp: EP lifecycle, DTO posts
void fill_cm(DAT_PROVIDER* table);       // cm/cm_provider_slots.cpp: PSP/RSP/CSP/CR, connect
void fill_rmr_cno(DAT_PROVIDER* table);  // core/rmr_cno_provider_slots.cpp: RMRs, CNOs

}  // namespace dat_api
