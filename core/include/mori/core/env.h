// SPDX-License-Identifier: MIT
// Typed view of the environment variables in env_defs.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "mori/core/env_defs.h"

namespace mori::env {

// Parses "64", "4K", "2MiB", "1.5G" (binary multiples) into bytes. Throws InvalidArgument.
size_t parse_size(const std::string& text, const char* what = "size");
// "1", "0", "true", "false", "yes", "no", "on", "off" (case-insensitive).
bool parse_bool(const std::string& text, const char* what = "bool");

struct Settings {
#define MORI_ENV_FIELD_size(f) size_t f;
#define MORI_ENV_FIELD_seconds(f) double f;
#define MORI_ENV_FIELD_number(f) double f;
#define MORI_ENV_FIELD_bool(f) bool f;
#define MORI_ENV_FIELD_int(f) int64_t f;
#define MORI_ENV_FIELD_string(f) std::string f;
#define MORI_ENV_X(field, name, type, def, category, alias, desc) MORI_ENV_FIELD_##type(field)
  MORI_ENV_TABLE(MORI_ENV_X)
#undef MORI_ENV_X
};

// Settings read from the environment once; reload() re-reads (tests, init after env changes).
const Settings& get();
void reload();
// The environment's settings now, parsed afresh and not cached (for objects made late in a
// process that honour a change of os.environ, e.g. IO engines).
Settings current();

struct Entry {
  std::string name, type, default_value, category, alias, value, description;
  bool is_set;        // the variable (or its alias) is set and not empty
  bool set_by_alias;  // the value came from the alias
};
// Every row of the table with its current value (for `mori info --env`).
std::vector<Entry> describe();

// One setting parsed by its row's type: size -> size_t, seconds/number -> double, bool, int ->
// int64_t, string. The environment now, not cached (Python's mori.core.env.setting()).
using Value = std::variant<size_t, double, bool, int64_t, std::string>;
Value value(const std::string& name);  // throws InvalidArgument for a name not in the table

}  // namespace mori::env
