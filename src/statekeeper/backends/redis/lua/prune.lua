-- KEYS: hash, snapshot zset. ARGV: base seq, then the seqs of snapshots to drop.
-- Removes events <= base, snapshots < base and idempotency keys whose events are all
-- <= base; records the base in field 'b'. Reply: {0} done | {1, head, has base} refused.
-- include: common.lua
local h, sz = KEYS[1], KEYS[2]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
local base = tonumber(ARGV[1])
local has_base = base > 0 and redis.call('HEXISTS', h, 's:' .. fmt(base)) == 1
if base < 0 or base >= head or (base > 0 and not has_base) then
  return {1, head, has_base and 1 or 0}
end
for i = 2, #ARGV do
  if base > 0 and tonumber(ARGV[i]) == base then return {1, head, 1} end
end
local old = tonumber(redis.call('HGET', h, 'b') or '0')
if base > old then
  local fields = {}
  for s = old + 1, base do
    fields[#fields + 1] = 'e:' .. fmt(s)
    if #fields >= 1000 or s == base then
      redis.call('HDEL', h, unpack(fields))
      fields = {}
    end
  end
  redis.call('HSET', h, 'b', fmt(base))
  local below = redis.call('ZRANGEBYSCORE', sz, '-inf', '(' .. fmt(base))
  for _, s in ipairs(below) do redis.call('HDEL', h, 's:' .. s) end
  redis.call('ZREMRANGEBYSCORE', sz, '-inf', '(' .. fmt(base))
  local cursor = '0'
  repeat
    local r = redis.call('HSCAN', h, cursor, 'MATCH', 'k:*', 'COUNT', 1000)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      local _, last = string.match(r[2][i + 1], '^(%d+):(%d+)$')
      if last and tonumber(last) <= base then redis.call('HDEL', h, r[2][i]) end
    end
  until cursor == '0'
end
for i = 2, #ARGV do
  redis.call('HDEL', h, 's:' .. ARGV[i])
  redis.call('ZREM', sz, ARGV[i])
end
return {0}
