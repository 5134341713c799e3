-- The writes of a checked prune (prune.lua, together.lua): events <= base, snapshots
-- < base removed (idempotency keys stay: a retry still finds its append), the base recorded
-- in field 'b'; then the snapshots at the seqs in drops (a table) removed. Needs
-- common.lua (fmt).
local function prune_write(h, sz, base, drops)
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
  end
  for _, s in ipairs(drops) do
    redis.call('HDEL', h, 's:' .. s)
    redis.call('ZREM', sz, s)
  end
end
