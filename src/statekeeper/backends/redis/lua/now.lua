-- Leases: <prefix>l:<agent> hash o = holder (absent when released), n = token,
-- x = expiry (seconds since the epoch on the Redis server's clock, as text).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
