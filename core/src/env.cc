// SPDX-License-Identifier: MIT
#include "mori/core/env.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "mori/core/status.h"

namespace mori::env {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

double parse_seconds(const std::string& text, const char* what) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0))
    raise(Status::kInvalidArgument, "%s: expected a positive number of seconds, got '%s'", what, text.c_str());
  return v;
}

double parse_number(const std::string& text, const char* what) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v))
    raise(Status::kInvalidArgument, "%s: expected a number, got '%s'", what, text.c_str());
  return v;
}

int64_t parse_int(const std::string& text, const char* what) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0')
    raise(Status::kInvalidArgument, "%s: expected an integer, got '%s'", what, text.c_str());
  return v;
}

// The variable's text, else its alias's (when it has one); null when neither is set or both
// are empty. The one getenv() of MORI's settings.
const char* raw_value(const char* name, const char* alias) {
  const char* raw = std::getenv(name);
  if (raw && *raw) return raw;
  if (*alias) raw = std::getenv(alias);
  return raw && *raw ? raw : nullptr;
}

Settings load() {
  Settings s;
#define MORI_ENV_PARSE_size(f, name, v) s.f = parse_size(v, name);
#define MORI_ENV_PARSE_seconds(f, name, v) s.f = parse_seconds(v, name);
#define MORI_ENV_PARSE_number(f, name, v) s.f = parse_number(v, name);
#define MORI_ENV_PARSE_bool(f, name, v) s.f = parse_bool(v, name);
#define MORI_ENV_PARSE_int(f, name, v) s.f = parse_int(v, name);
#define MORI_ENV_PARSE_string(f, name, v) s.f = v;
#define MORI_ENV_X(field, name, type, def, category, alias, desc) \
  {                                                               \
    const char* raw = raw_value(name, alias);                     \
    std::string v = raw ? raw : def;                              \
    MORI_ENV_PARSE_##type(field, name, v)                         \
  }
  MORI_ENV_TABLE(MORI_ENV_X)
#undef MORI_ENV_X
  return s;
}

std::mutex g_mutex;
Settings* g_settings = nullptr;

}  // namespace

size_t parse_size(const std::string& text, const char* what) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || v < 0)
    raise(Status::kInvalidArgument, "%s: cannot parse size '%s' (use e.g. 512M, 4GiB)", what, text.c_str());
  std::string suffix = lower(end);
  double mult = 1;
  if (suffix.empty() || suffix == "b")
    mult = 1;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib")
    mult = 1024.0;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib")
    mult = 1024.0 * 1024;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (suffix == "t" || suffix == "tb" || suffix == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    raise(Status::kInvalidArgument, "%s: unknown size suffix '%s' in '%s' (K, M, G, T, KiB, MiB, GiB, TiB)", what, end,
          text.c_str());
  return static_cast<size_t>(std::llround(v * mult));
}

bool parse_bool(const std::string& text, const char* what) {
  std::string t = lower(text);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off" || t.empty()) return false;
  raise(Status::kInvalidArgument, "%s: expected 0/1/true/false, got '%s'", what, text.c_str());
}

const Settings& get() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_settings) g_settings = new Settings(load());
  return *g_settings;
}

Settings current() { return load(); }

void reload() {
  Settings fresh = load();  // parse first: a bad value leaves the old settings in place
  std::lock_guard<std::mutex> lock(g_mutex);
  delete g_settings;
  g_settings = new Settings(std::move(fresh));
}

std::vector<Entry> describe() {
  std::vector<Entry> out;
#define MORI_ENV_X(field, name, type, def, category, alias, desc)                                  \
  {                                                                                                \
    const char* own = std::getenv(name);                                                           \
    const char* raw = raw_value(name, alias);                                                      \
    out.push_back(Entry{name, #type, def, #category, alias, raw ? raw : def, desc, raw != nullptr, \
                        raw != nullptr && !(own && *own)});                                        \
  }
  MORI_ENV_TABLE(MORI_ENV_X)
#undef MORI_ENV_X
  return out;
}

Value value(const std::string& name) {
#define MORI_ENV_VALUE_size(name, v) return parse_size(v, name);
#define MORI_ENV_VALUE_seconds(name, v) return parse_seconds(v, name);
#define MORI_ENV_VALUE_number(name, v) return parse_number(v, name);
#define MORI_ENV_VALUE_bool(name, v) return parse_bool(v, name);
#define MORI_ENV_VALUE_int(name, v) return parse_int(v, name);
#define MORI_ENV_VALUE_string(name, v) return std::string(v);
#define MORI_ENV_X(field, row_name, type, def, category, alias, desc) \
  if (name == row_name) {                                             \
    const char* raw = raw_value(row_name, alias);                     \
    std::string v = raw ? raw : def;                                  \
    MORI_ENV_VALUE_##type(row_name, v)                                \
  }
  MORI_ENV_TABLE(MORI_ENV_X)
#undef MORI_ENV_X
  raise(Status::kInvalidArgument, "name: %s is not in MORI's settings table (core/include/mori/core/env_defs.h)",
        name.c_str());
}

}  // namespace mori::env
