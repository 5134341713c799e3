-- KEYS: hash, snapshot zset. ARGV: bound ('+inf' or seq), default ttl, touch.
-- include: guard.lua
-- include: common.lua
local r = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[1], '-inf', 'LIMIT', 0, 1)
if #r == 0 then return false end
local v = redis.call('HGET', KEYS[1], 's:' .. r[1])
if not v then return false end
if ARGV[3] == '1' then touch(KEYS[1], KEYS[2], ttl_of(KEYS[1], ARGV[2])) end
return {tonumber(r[1]), v}
