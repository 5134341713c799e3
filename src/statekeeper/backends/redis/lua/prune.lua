-- KEYS: hash, snapshot zset, index. ARGV: agent, default ttl ms, base seq, the expected
-- head ('' for any), the head event's expected checksum ('' for any: with an expected
-- head only), then the seqs of snapshots to drop. Removes events <= base and snapshots
-- < base (idempotency keys stay); records the base in field 'b'. Reply: {0} done |
-- {1, head, has base, stored base} refused (also a drop naming the stored base 'b' that
-- the prune keeps: the only record of the state there) | {2, head} the head is not the
-- expected one, or its
-- event (framed as delete.lua reads it) another record: a stream deleted and written
-- again up to that seq since the prune was planned. An agent the index lists without
-- a head lost its data (presence.lua): an error reply, not a refusal.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: prune_write.lua
local h, sz = KEYS[1], KEYS[2]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
if head == 0 then presence_check(KEYS[3], ARGV[1], ARGV[2]) end
if ARGV[4] ~= '' then
  if head ~= tonumber(ARGV[4]) then return {2, head} end
  if ARGV[5] ~= '' then
    local blob = redis.call('HGET', h, 'e:' .. string.format('%d', head))
    if not blob or #blob < 12 then return {2, head} end
    local _, nkind, nsum = struct.unpack('>dHH', blob)
    if string.sub(blob, 13 + nkind, 12 + nkind + nsum) ~= ARGV[5] then return {2, head} end
  end
end
local base = tonumber(ARGV[3])
local has_base = base > 0 and redis.call('HEXISTS', h, 's:' .. fmt(base)) == 1
local stored = tonumber(redis.call('HGET', h, 'b') or '0')
if base < 0 or base >= head or (base > 0 and not has_base) then
  return {1, head, has_base and 1 or 0, stored}
end
local drops = {}
for i = 6, #ARGV do
  local s = tonumber(ARGV[i])
  if (base > 0 and s == base) or (stored > 0 and stored >= base and s == stored) then
    return {1, head, has_base and 1 or 0, stored}
  end
  drops[#drops + 1] = ARGV[i]
end
prune_write(h, sz, base, drops)
-- a write: the agent's TTL refreshed, as a rewrite, a snapshot or together.lua's prune
-- refresh it (was: left running — a ttl= store's agent compacted by a plain prune
-- expired as if unwritten since its last append)
touch(h, sz, ttl_of(h, ARGV[2]))
return {0}
