-- KEYS: hash, snapshot zset, index. ARGV: default ttl, touch, agent. Reply: {snapshot or nil, head,
-- events after the snapshot, head tag or nil}: _LATEST, _READ and the head's tag in one
-- script, one consistent read (read_latest and read_state).
-- A snapshot index (zset) lost on its own (evicted, deleted) costs a longer replay,
-- never a wrong answer: without an entry, the base snapshot a prune left (field b,
-- never dropped) is taken, and without a base every event is still there (from 1).
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local h = KEYS[1]
local snap = false
local after = 0
local hb = redis.call('HMGET', h, 'h', 'b')
local r = redis.call('ZREVRANGEBYSCORE', KEYS[2], '+inf', '-inf', 'LIMIT', 0, 1)
if #r == 0 and hb[2] then r = {hb[2]} end
if #r > 0 then
  local v = redis.call('HGET', h, 's:' .. r[1])
  if v then
    snap = {tonumber(r[1]), v}
    after = tonumber(r[1])
  end
end
local head = tonumber(hb[1] or '0')
if head == 0 then presence_check(KEYS[3], ARGV[3], ARGV[1]) end
local out = events_between(h, after + 1, head)
if head > 0 and ARGV[2] == '1' then touch(h, KEYS[2], ttl_of(h, ARGV[1])) end
return {snap, head, out, redis.call('HGET', h, 'g')}
