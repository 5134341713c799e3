-- KEYS: hash, snapshot zset, index[, feed counter, feed stream[, feed floor]]. With the
-- floor key (append_from_base(raise_floor=True)) the feed's floor is raised through the
-- first event's position in this script too: no reader sees the events without it. ARGV: base seq, base
-- snapshot blob, the number k of kept idempotency keys and k triples (key, first, last:
-- records of appends at or below the base), then an append as append.lua's ARGV (expected = base seq; no fence,
-- no tag check), its events. Creates the agent as prune leaves a stream: the base
-- snapshot, field 'b' = base, the events after it. Reply: {0, first, last} made |
-- {2, head} the agent exists (nothing written). An agent the index lists without a
-- head lost its data (presence.lua, an error reply): it is not made again over it.
-- The last ARGV is the guard flag g (append_from_base(guard=...)): with '1', the 7 ARGV
-- before it are rewrite_write.lua's fields of a rewrite of no records and the last 2
-- KEYS the guarded stream's hash and snapshot zset: the agent is made only while that
-- stream's head is the expected one (its new head tag, if any, stored and its TTL
-- refreshed), else {3, expected, head} and nothing written. All are taken off KEYS
-- and ARGV first.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: append_write.lua
-- include: rewrite_write.lua
local gh, gsz, G = nil, nil, nil
if table.remove(ARGV) == '1' then
  G = {}
  for i = 7, 1, -1 do G[i] = table.remove(ARGV) end
  gsz, gh = table.remove(KEYS), table.remove(KEYS)
  local applies, ghead = rewrite_applies(gh, G, 1)
  if not applies then return {3, tonumber(G[1]), ghead} end
end
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
if G and G[4] == '1' then -- (a write of the guarded stream: its TTL refreshed, as rewrite.lua's)
  rewrite_write(gh, gsz, G, 1)
  touch(gh, gsz, ttl_of(gh, ARGV[a0 + 4]))
end
local last = write_append(h, sz, KEYS[3], top, KEYS[5], ARGV, a0, n, true)
if KEYS[6] and top then
  local first = top - n + 1
  redis.call('XTRIM', KEYS[5], 'MINID', '0-' .. fmt(first + 1))
  if first > tonumber(redis.call('GET', KEYS[6]) or '0') then
    redis.call('SET', KEYS[6], fmt(first))
  end
end
return {0, tonumber(ARGV[1]) + 1, last}
