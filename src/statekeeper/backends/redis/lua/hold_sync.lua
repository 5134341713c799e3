-- KEYS: hash, snapshot zset, the shard's holds set. ARGV: agent, default ttl ms.
-- An agent's keys made to follow the legal holds in the set: covered, its hash is
-- marked held (p) and its keys never expire; not covered (a hold released), the mark
-- goes and its TTL (its own, else the default) applies again from now. Reply: 0 when
-- the agent is not stored, else 1.
-- include: guard.lua
-- include: common.lua
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if held_in(KEYS[3], ARGV[1]) then
  redis.call('HSET', KEYS[1], 'p', '1')
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
elseif redis.call('HDEL', KEYS[1], 'p') == 1 then
  touch(KEYS[1], KEYS[2], ttl_of(KEYS[1], ARGV[2]))
end
return 1
