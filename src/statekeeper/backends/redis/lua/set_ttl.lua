-- KEYS: hash, snapshot zset, index. ARGV: ttl ms (0 = no expiry), agent, default ttl
-- ms. Reply: 1 done, 0 the agent is not stored (an agent the index lists without a
-- head lost its data: presence.lua, an error reply). The agent's own-ttl mark in the
-- index ('\0t:<agent>': its expiry is not a loss, see presence.lua) is set with the
-- ttl and taken off with it, in this script.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local mark = '\0t:' .. ARGV[2]
if redis.call('EXISTS', KEYS[1]) == 0 then
  presence_check(KEYS[3], ARGV[2], ARGV[3])
  redis.call('ZREM', KEYS[3], mark)  -- (one left by an agent that expired)
  return 0
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('HSET', KEYS[1], 't', ARGV[1])
  redis.call('ZADD', KEYS[3], 0, mark)
else
  redis.call('HDEL', KEYS[1], 't')
  redis.call('ZREM', KEYS[3], mark)
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
