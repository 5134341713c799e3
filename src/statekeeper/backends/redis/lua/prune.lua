-- KEYS: hash, snapshot zset, index. ARGV: agent, default ttl ms, base seq, then the
-- seqs of snapshots to drop. Removes events <= base and snapshots < base (idempotency
-- keys stay); records the base in field 'b'. Reply: {0} done | {1, head, has base}
-- refused. An agent the index lists without a head lost its data (presence.lua): an
-- error reply, not a refusal.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: prune_write.lua
local h, sz = KEYS[1], KEYS[2]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
if head == 0 then presence_check(KEYS[3], ARGV[1], ARGV[2]) end
local base = tonumber(ARGV[3])
local has_base = base > 0 and redis.call('HEXISTS', h, 's:' .. fmt(base)) == 1
if base < 0 or base >= head or (base > 0 and not has_base) then
  return {1, head, has_base and 1 or 0}
end
local drops = {}
for i = 4, #ARGV do
  if base > 0 and tonumber(ARGV[i]) == base then return {1, head, 1} end
  drops[#drops + 1] = ARGV[i]
end
prune_write(h, sz, base, drops)
return {0}
