-- KEYS: hash, snapshot zset, index. ARGV: agent. Reply: 1 if it existed.
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return existed
