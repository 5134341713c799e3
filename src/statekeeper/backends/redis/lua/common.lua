-- Shared Lua helpers: the TTL in ms for an agent (its override, else the default).
local function ttl_of(h, default)
  local t = redis.call('HGET', h, 't')
  if t then return tonumber(t) end
  return tonumber(default)
end
local function touch(h, sz, ttl)
  if ttl and ttl > 0 then
    redis.call('PEXPIRE', h, ttl)
    redis.call('PEXPIRE', sz, ttl)
  end
end
local function fmt(n) return string.format('%d', n) end
