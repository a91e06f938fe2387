# SPDX-License-Identifier: MIT
"""Server-side Lua of the Redis metadata store: each hot path is one EVALSHA.

Key layout (``P`` = a hash-tagged prefix, so a script's keys share one cluster slot):
control ``{ns:ctl}``: ``P:clients`` (node -> record JSON), ``P:hb`` (node -> last heartbeat),
``P:seq`` (node -> acked seq), ``P:caps`` (node -> capacities JSON), external KV and hits.
block shard ``{ns:bN}``: ``P:k:<key>`` hash (``c:<node>:<tier>`` -> size, ``p:<node>:<tier>`` ->
"offset US checksum" of a copy whose owner said where it lies in its arena, ``n`` copies, ``r`` the
copies as the get path returns them, ``a`` last access, ``l`` lease end), ``P:n:<node>`` set of
``<tier>|<key>``, ``P:count`` keys in the shard.
"""

# KEYS[1] = P:clients  ARGV: prefix, node_id, record_json, now, expiry
# -> 0 a live client holds the id, 1 registered, 2 replaced an expired one
REGISTER_CLIENT = r"""
local p, node, rec, now, expiry = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local last = redis.call('HGET', p .. ':hb', node)
if last and now - tonumber(last) <= expiry then return 0 end
redis.call('HSET', p .. ':clients', node, rec)
redis.call('HSET', p .. ':hb', node, ARGV[4])
redis.call('HSET', p .. ':seq', node, 0)
redis.call('HDEL', p .. ':caps', node)
if last then return 2 end
return 1
"""

# KEYS[1] = P:clients  ARGV: prefix, node_id, now, caps_json ('' keeps), is_full_sync, baseline, seq...
# -> {status (0 unknown, 1 alive), acked_seq, gap (0/1), bundles to apply from the first}
HEARTBEAT_CONTROL = r"""
local p, node, now, caps = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('HEXISTS', p .. ':clients', node) == 0 then return {0, 0, 0, 0, 0} end
redis.call('HSET', p .. ':hb', node, now)
if caps ~= '' then redis.call('HSET', p .. ':caps', node, caps) end
local acked = tonumber(redis.call('HGET', p .. ':seq', node) or '0')
if ARGV[5] == '1' then
  redis.call('HSET', p .. ':seq', node, ARGV[6])
  return {1, tonumber(ARGV[6]), 0, #ARGV - 6, 0}
end
local first, count, gap = -1, 0, 0
for i = 7, #ARGV do
  local seq = tonumber(ARGV[i])
  if seq > acked then
    if seq ~= acked + 1 then gap = 1 break end
    if first < 0 then first = i - 7 end
    acked = seq
    count = count + 1
  end
end
redis.call('HSET', p .. ':seq', node, acked)
if first < 0 then first = 0 end
return {1, acked, gap, count, first}
"""

# The Lua function both event scripts below start with.
_REBUILD_COPIES = r"""
-- Rebuild field r, the key's copies as the get path returns them ("node US tier US size", then
-- "US offset US checksum" when the place is known, joined by RS), from the c:<node>:<tier> and
-- p:<node>:<tier> fields; done on writes so that reads parse nothing.
local function rebuild(k)
  local fields = redis.call('HGETALL', k)
  local places = {}
  for j = 1, #fields, 2 do
    if string.sub(fields[j], 1, 2) == 'p:' then places[string.sub(fields[j], 3)] = fields[j + 1] end
  end
  local copies = {}
  for j = 1, #fields, 2 do
    local f = fields[j]
    if string.sub(f, 1, 2) == 'c:' then
      local rest = string.sub(f, 3)
      local sep = string.find(rest, ':[^:]*$')
      local copy = string.sub(rest, 1, sep - 1) .. '\31' .. string.sub(rest, sep + 1) .. '\31' .. fields[j + 1]
      if places[rest] then copy = copy .. '\31' .. places[rest] end
      copies[#copies + 1] = copy
    end
  end
  redis.call('HSET', k, 'r', table.concat(copies, '\30'))
end
"""

# KEYS[1] = P:count  ARGV: prefix, node_id, now, then (kind, tier, key, size, offset, checksum)...
# (checksum '0': the place is not known) -> {key, size, 1 (first copy) | 0 (last copy gone), ...}
APPLY_EVENTS = (
    _REBUILD_COPIES
    + r"""
local p, node, now = ARGV[1], ARGV[2], ARGV[3]
local nodeset = p .. ':n:' .. node
local out = {}
for i = 4, #ARGV, 6 do
  local kind, tier, key, size = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local k = p .. ':k:' .. key
  local field = 'c:' .. node .. ':' .. tier
  local place = 'p:' .. node .. ':' .. tier
  if kind == 'A' then
    if ARGV[i + 5] ~= '0' then
      redis.call('HSET', k, place, ARGV[i + 4] .. '\31' .. ARGV[i + 5])
    else
      redis.call('HDEL', k, place)
    end
    if redis.call('HSETNX', k, field, size) == 1 then
      redis.call('SADD', nodeset, tier .. '|' .. key)
      if redis.call('HINCRBY', k, 'n', 1) == 1 then
        redis.call('HSET', k, 'a', now)
        redis.call('INCR', KEYS[1])
        out[#out + 1] = key; out[#out + 1] = size; out[#out + 1] = 1
      end
    else
      redis.call('HSET', k, field, size)
    end
    rebuild(k)
  else
    local old = redis.call('HGET', k, field)
    if old then
      redis.call('HDEL', k, field, place)
      redis.call('SREM', nodeset, tier .. '|' .. key)
      if redis.call('HINCRBY', k, 'n', -1) <= 0 then
        redis.call('DEL', k)
        redis.call('DECR', KEYS[1])
        out[#out + 1] = key; out[#out + 1] = old; out[#out + 1] = 0
      else
        rebuild(k)
      end
    end
  end
end
return out
"""
)

# KEYS[1] = P:count  ARGV: prefix, node_id, keep ('1': only drop copies not listed after), listed...
# Drops the node's copies in this shard (all, or those not in the listed "tier|key" members).
# -> {key, size, ...} of keys left with no copy
DROP_NODE = (
    _REBUILD_COPIES
    + r"""
local p, node = ARGV[1], ARGV[2]
local nodeset = p .. ':n:' .. node
local keep = {}
if ARGV[3] == '1' then for i = 4, #ARGV do keep[ARGV[i]] = true end end
local out = {}
for _, m in ipairs(redis.call('SMEMBERS', nodeset)) do
  if not keep[m] then
    local sep = string.find(m, '|', 1, true)
    local tier, key = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
    local k = p .. ':k:' .. key
    local field = 'c:' .. node .. ':' .. tier
    local old = redis.call('HGET', k, field)
    redis.call('SREM', nodeset, m)
    if old then
      redis.call('HDEL', k, field, 'p:' .. node .. ':' .. tier)
      if redis.call('HINCRBY', k, 'n', -1) <= 0 then
        redis.call('DEL', k)
        redis.call('DECR', KEYS[1])
        out[#out + 1] = key; out[#out + 1] = old
      else
        rebuild(k)
      end
    end
  end
end
return out
"""
)

# KEYS[1] = any key of the endpoint's (or cluster slot's) shards
# ARGV: now, lease_until, exclude ('\n'-joined), the keys' full hash names (P:k:<key>) '\n'-joined
# -> one string, a line per key (empty: miss), each copy "node US tier US size" (then "US offset US
#    checksum" when its place is known) joined by RS
#    (one reply item instead of 1 + 3n: the client parses it with str.split)
ROUTE_GET_BATCH = r"""
local now, lease = ARGV[1], tonumber(ARGV[2])
local exclude, has_exclude = {}, false
for n in string.gmatch(ARGV[3], '[^\n]+') do exclude[n] = true; has_exclude = true end
local lines = {}
for k in string.gmatch(ARGV[4], '[^\n]+') do
  local v = redis.call('HMGET', k, 'r', 'l')
  local r = v[1] or ''
  if r ~= '' and has_exclude then
    local kept = {}
    for copy in string.gmatch(r, '[^\30]+') do
      if not exclude[string.match(copy, '^(.-)\31')] then kept[#kept + 1] = copy end
    end
    r = table.concat(kept, '\30')
  end
  lines[#lines + 1] = r
  if r ~= '' then
    if lease > tonumber(v[2] or '0') then
      redis.call('HSET', k, 'a', now, 'l', ARGV[2])
    else
      redis.call('HSET', k, 'a', now)
    end
  end
end
return table.concat(lines, '\n')
"""

# KEYS[1] = P:count  ARGV: prefix, node_id, tier, now -> {key, size, last_access, ...} unleased
EVICTION_CANDIDATES = r"""
local p, node, tier, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local out = {}
local field = 'c:' .. node .. ':' .. tier
for _, m in ipairs(redis.call('SMEMBERS', p .. ':n:' .. node)) do
  local sep = string.find(m, '|', 1, true)
  if string.sub(m, 1, sep - 1) == tier then
    local key = string.sub(m, sep + 1)
    local v = redis.call('HMGET', p .. ':k:' .. key, field, 'a', 'l')
    if v[1] and tonumber(v[3] or '0') <= now then
      out[#out + 1] = key; out[#out + 1] = v[1]; out[#out + 1] = v[2] or '0'
    end
  end
end
return out
"""

# KEYS[1] = P:ext  ARGV: prefix, op, node, tier, hashes...
# op: report | revoke | revoke_tier | revoke_node
EXTERNAL_KV = r"""
local p, op, node, tier = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local function drop(t, h)
  redis.call('SREM', p .. ':xh:' .. h, node .. '|' .. t)
end
if op == 'report' then
  local ns = p .. ':xn:' .. node .. ':' .. tier
  for i = 5, #ARGV do
    redis.call('SADD', ns, ARGV[i])
    redis.call('SADD', p .. ':xh:' .. ARGV[i], node .. '|' .. tier)
  end
  redis.call('SADD', p .. ':xnodes:' .. node, tier)
elseif op == 'revoke' then
  local ns = p .. ':xn:' .. node .. ':' .. tier
  for i = 5, #ARGV do
    if redis.call('SREM', ns, ARGV[i]) == 1 then drop(tier, ARGV[i]) end
  end
else
  local tiers = {tier}
  if op == 'revoke_node' then tiers = redis.call('SMEMBERS', p .. ':xnodes:' .. node) end
  for _, t in ipairs(tiers) do
    local ns = p .. ':xn:' .. node .. ':' .. t
    for _, h in ipairs(redis.call('SMEMBERS', ns)) do drop(t, h) end
    redis.call('DEL', ns)
    redis.call('SREM', p .. ':xnodes:' .. node, t)
  end
end
return 1
"""

# KEYS[1] = P:ext  ARGV: prefix, hashes... -> {hash, "node|tier", ...} for each holder
EXTERNAL_KV_MATCH = r"""
local p = ARGV[1]
local out = {}
for i = 2, #ARGV do
  for _, m in ipairs(redis.call('SMEMBERS', p .. ':xh:' .. ARGV[i])) do
    out[#out + 1] = ARGV[i]; out[#out + 1] = m
  end
end
return out
"""

# KEYS[1] = P:ext  ARGV: prefix, now, hashes...
COUNT_HITS = r"""
local p, now = ARGV[1], ARGV[2]
for i = 3, #ARGV do
  redis.call('HINCRBY', p .. ':hits', ARGV[i], 1)
  redis.call('ZADD', p .. ':hits_ts', now, ARGV[i])
end
return 1
"""

# KEYS[1] = P:ext  ARGV: prefix, cutoff -> hashes dropped
DROP_STALE_HITS = r"""
local p = ARGV[1]
local stale = redis.call('ZRANGEBYSCORE', p .. ':hits_ts', '-inf', '(' .. ARGV[2])
for _, h in ipairs(stale) do
  redis.call('HDEL', p .. ':hits', h)
  redis.call('ZREM', p .. ':hits_ts', h)
end
return #stale
"""
