-- A settle's row and the removal of the snapshot it replaces in ONE script
-- (Backend.replace_snapshot), only at the head's identity.
-- KEYS: hash, snapshot zset, index. ARGV: agent, default ttl ms, snapshot seq, snapshot
-- blob, the expected head, the head event's expected checksum ('' for any), the seq of
-- the snapshot to remove ('' for none). Reply: {0, removed 1|0} | {2, head} the head is
-- not the expected one, or its event another record (a stream deleted and written again
-- since the settle looked: nothing written). The removal is left out, the row still
-- stored, when it names the stream's base (field 'b': compacted to it meanwhile, the
-- only record of the state there) or a seq not below the row's. An agent the index lists
-- without a head lost its data (presence.lua): an error reply.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local h, sz = KEYS[1], KEYS[2]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
if head == 0 then presence_check(KEYS[3], ARGV[1], ARGV[2]) end
if head ~= tonumber(ARGV[5]) then return {2, head} end
if ARGV[6] ~= '' then  -- (the head event framed as delete.lua and prune.lua read it)
  local blob = redis.call('HGET', h, 'e:' .. fmt(head))
  if not blob or #blob < 12 then return {2, head} end
  local _, nkind, nsum = struct.unpack('>dHH', blob)
  if string.sub(blob, 13 + nkind, 12 + nkind + nsum) ~= ARGV[6] then return {2, head} end
end
local seq = tonumber(ARGV[3])
if seq < 1 or seq > head then return {2, head} end
redis.call('HSET', h, 's:' .. ARGV[3], ARGV[4])
redis.call('ZADD', sz, seq, ARGV[3])
local removed = 0
if ARGV[7] ~= '' then
  local drop = tonumber(ARGV[7])
  local stored = tonumber(redis.call('HGET', h, 'b') or '0')
  if drop > 0 and drop < seq and drop ~= stored then
    removed = redis.call('HDEL', h, 's:' .. ARGV[7])
    redis.call('ZREM', sz, ARGV[7])
  end
end
touch(h, sz, ttl_of(h, ARGV[2]))
return {0, removed}
