-- KEYS: hash, snapshot zset, index. ARGV: seq, blob, default ttl, agent. Reply: {0|2,
-- head} (an agent the index lists without a head lost its data: presence.lua)
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local head = tonumber(redis.call('HGET', KEYS[1], 'h') or '0')
if head == 0 then presence_check(KEYS[3], ARGV[4], ARGV[3]) end
local seq = tonumber(ARGV[1])
if seq < 1 or seq > head then return {2, head} end
redis.call('HSET', KEYS[1], 's:' .. ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
touch(KEYS[1], KEYS[2], ttl_of(KEYS[1], ARGV[3]))
return {0, head}
