-- KEYS: hash. ARGV: timestamp. Reply: the highest seq stamped at or before it.
-- include: guard.lua
-- include: common.lua
local h = KEYS[1]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
local t = tonumber(ARGV[1])
for s = head, 1, -1 do
  local v = redis.call('HGET', h, 'e:' .. fmt(s))
  if v and struct.unpack('>d', v) <= t then return s end
end
return 0
