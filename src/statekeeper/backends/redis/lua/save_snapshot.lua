-- KEYS: hash, snapshot zset. ARGV: seq, blob, default ttl. Reply: {0|2, head}
-- include: guard.lua
-- include: common.lua
local head = tonumber(redis.call('HGET', KEYS[1], 'h') or '0')
local seq = tonumber(ARGV[1])
if seq < 1 or seq > head then return {2, head} end
redis.call('HSET', KEYS[1], 's:' .. ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
touch(KEYS[1], KEYS[2], ttl_of(KEYS[1], ARGV[3]))
return {0, head}
