-- Shared Lua helpers: the TTL in ms for an agent (its override, else the default);
-- the event blobs of a range of seqs. A TTL below 0 (the store's own streams, such as
-- the audit log) takes any expiry away: those streams are never expired.
local function ttl_of(h, default)
  local t = redis.call('HGET', h, 't')
  if t then return tonumber(t) end
  return tonumber(default)
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
