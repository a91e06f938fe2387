// SPDX-License-Identifier: MIT
// The C API's name for the collective engine's inbox (mori/shmem/collective_engine.h), which
// shmem_init sets up and shmem_finalize forgets.
#pragma once

#include "mori/shmem/collective_engine.h"

namespace mori::capi {

using mori::shmem::coll::Inbox;
using mori::shmem::coll::inbox;

}  // namespace mori::capi
