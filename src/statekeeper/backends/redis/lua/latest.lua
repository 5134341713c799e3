-- KEYS: hash, snapshot zset, index. ARGV: bound ('+inf' or seq), default ttl, touch,
-- agent. No snapshot: an agent the index lists without a head lost its data. A
-- snapshot index lost on its own (read_latest.lua) falls back to the base snapshot a
-- prune left (field b) when it is at or below the bound.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local r = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[1], '-inf', 'LIMIT', 0, 1)
if #r == 0 then
  local b = redis.call('HGET', KEYS[1], 'b')
  if b and (ARGV[1] == '+inf' or tonumber(b) <= tonumber(ARGV[1])) then r = {b} end
end
local v = #r > 0 and redis.call('HGET', KEYS[1], 's:' .. r[1])
if not v then
  if redis.call('HEXISTS', KEYS[1], 'h') == 0 then presence_check(KEYS[3], ARGV[4], ARGV[2]) end
  return false
end
if ARGV[3] == '1' then touch(KEYS[1], KEYS[2], ttl_of(KEYS[1], ARGV[2])) end
return {tonumber(r[1]), v}
