-- KEYS: hash, index. ARGV: timestamp, agent, default ttl. Reply: the highest seq stamped
-- at or before it (an agent the index lists without a head lost its data).
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local h = KEYS[1]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
if head == 0 then presence_check(KEYS[2], ARGV[2], ARGV[3]) end
local t = tonumber(ARGV[1])
for s = head, 1, -1 do
  local v = redis.call('HGET', h, 'e:' .. fmt(s))
  if v and struct.unpack('>d', v) <= t then return s end
end
return 0
