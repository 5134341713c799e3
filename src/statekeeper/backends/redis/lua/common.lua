-- Shared Lua helpers: the TTL in ms for an agent (its override, else the default);
-- the event blobs of a range of seqs. A TTL below 0 (the store's own streams, such as
-- the audit log) takes any expiry away: those streams are never expired. Nor is an
-- agent under a legal hold (field p of its hash, set by hold_sync.lua and, for a new
-- stream a hold already covers, by append_write.lua): its TTL is kept (t) but not
-- applied until the hold is released.
local function ttl_of(h, default)
  local v = redis.call('HMGET', h, 't', 'p')
  if v[2] then return -1 end
  if v[1] then return tonumber(v[1]) end
  return tonumber(default)
end
-- Whether a legal hold in the shard's holds set (KEY holds: agent ids and NAMESPACE/*
-- patterns) covers agent (its namespace: the part before its last '/').
local function held_in(holds, agent)
  if redis.call('SISMEMBER', holds, agent) == 1 then return true end
  local ns = string.match(agent, '^(.*)/[^/]*$')
  return ns ~= nil and ns ~= '' and redis.call('SISMEMBER', holds, ns .. '/*') == 1
end
local function touch(h, sz, ttl)
  if ttl and ttl > 0 then
    redis.call('PEXPIRE', h, ttl)
    redis.call('PEXPIRE', sz, ttl)
  elseif ttl and ttl < 0 then
    redis.call('PERSIST', h)
    redis.call('PERSIST', sz)
  end
end
local function fmt(n) return string.format('%d', n) end
-- The blobs of events lo..hi of hash h (false for a missing one), read with HMGET in
-- batches of 1000 fields (unpack's stack limit).
local function events_between(h, lo, hi)
  local out = {}
  local fields = {}
  for s = lo, hi do
    fields[#fields + 1] = 'e:' .. fmt(s)
    if #fields >= 1000 or s == hi then
      local vals = redis.call('HMGET', h, unpack(fields))
      for i = 1, #fields do out[#out + 1] = vals[i] end
      fields = {}
    end
  end
  return out
end
