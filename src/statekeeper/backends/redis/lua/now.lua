-- Leases: <prefix>l:<agent> hash o = holder (absent when released), n = token,
-- x = expiry (seconds since the epoch on the Redis server's clock, as text).
-- server_now(): that clock, read when a script needs it.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
