-- KEYS: hash, snapshot zset, index[, feed counter, feed stream]. ARGV: base seq, base
-- snapshot blob, then an append as append.lua's ARGV (expected = base seq; no fence,
-- no tag check), its events. Creates the agent as prune leaves a stream: the base
-- snapshot, field 'b' = base, the events after it. Reply: {0, first, last} made |
-- {2, head} the agent exists (nothing written).
-- include: common.lua
-- include: append_write.lua
local h, sz = KEYS[1], KEYS[2]
if redis.call('EXISTS', h) == 1 then
  return {2, tonumber(redis.call('HGET', h, 'h') or '0')}
end
redis.call('DEL', sz) -- (a snapshot index left without its hash holds nothing of ours)
redis.call('HSET', h, 's:' .. ARGV[1], ARGV[2], 'b', ARGV[1])
redis.call('ZADD', sz, tonumber(ARGV[1]), ARGV[1])
local last = write_append(h, sz, KEYS[3], KEYS[4], KEYS[5], ARGV, 2, #ARGV - 15, true)
return {0, tonumber(ARGV[1]) + 1, last}
