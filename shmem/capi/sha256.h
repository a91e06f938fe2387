// SPDX-License-Identifier: MIT
// SHA-256 (FIPS 180-4), only to derive a job secret from launch variables exactly
// as the Python side does (hashlib.sha256(...).hexdigest()).
#pragma once

#include <string>

namespace mori::capi {

std::string sha256_hex(const std::string& data);

}  // namespace mori::capi
