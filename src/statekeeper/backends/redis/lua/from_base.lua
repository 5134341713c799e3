-- KEYS: hash, snapshot zset, index[, feed counter, feed stream]. ARGV: base seq, base
-- snapshot blob, the number k of kept idempotency keys and k triples (key, first, last:
-- records of appends at or below the base), then an append as append.lua's ARGV (expected = base seq; no fence,
-- no tag check), its events. Creates the agent as prune leaves a stream: the base
-- snapshot, field 'b' = base, the events after it. Reply: {0, first, last} made |
-- {2, head} the agent exists (nothing written). An agent the index lists without a
-- head lost its data (presence.lua, an error reply): it is not made again over it.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: append_write.lua
local h, sz = KEYS[1], KEYS[2]
if redis.call('EXISTS', h) == 1 then
  return {2, tonumber(redis.call('HGET', h, 'h') or '0')}
end
local k = tonumber(ARGV[3])
local a0 = 3 + 3 * k
presence_check(KEYS[3], ARGV[a0 + 1], ARGV[a0 + 4])
local n = #ARGV - a0 - 13
local top = nil
if KEYS[5] then
  top = feed_take(KEYS[4], KEYS[5], KEYS[3], n)
  if not top then return feed_lost(KEYS[4]) end
end
redis.call('DEL', sz) -- (a snapshot index left without its hash holds nothing of ours)
redis.call('HSET', h, 's:' .. ARGV[1], ARGV[2], 'b', ARGV[1])
redis.call('ZADD', sz, tonumber(ARGV[1]), ARGV[1])
for i = 0, k - 1 do
  local at = 4 + 3 * i
  redis.call('HSET', h, 'k:' .. ARGV[at],
    fmt(tonumber(ARGV[at + 1])) .. ':' .. fmt(tonumber(ARGV[at + 2])))
end
local last = write_append(h, sz, KEYS[3], top, KEYS[5], ARGV, a0, n, true)
return {0, tonumber(ARGV[1]) + 1, last}
