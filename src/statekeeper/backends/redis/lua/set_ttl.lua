-- KEYS: hash, snapshot zset. ARGV: ttl ms (0 = no expiry).
-- include: guard.lua
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('HSET', KEYS[1], 't', ARGV[1])
else
  redis.call('HDEL', KEYS[1], 't')
end
-- under a legal hold (p) the TTL is recorded, not applied (common.lua)
if ttl > 0 and not redis.call('HGET', KEYS[1], 'p') then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
else
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
end
return 1
