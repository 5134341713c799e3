-- KEYS: hash, snapshot zset, index, lease[, feed counter, feed stream]. ARGV: agent, expected, key|'', default ttl
-- ms, first ts, last ts, snapshot seq|'0', snapshot blob, head tag|'', fence holder|'',
-- fence token, tag check (''|'0' expect no tag|'1' expect ARGV[13]), expected tag,
-- events...
-- Reply: {0, first, last} appended | {1, first, last} duplicate | {2, head, 0} conflict
-- (head seq, or with a tag check the head tag, moved) | {3, current token, 0, current
-- holder|''} the fence is not the current lease.
-- include: common.lua
local h, sz, idx = KEYS[1], KEYS[2], KEYS[3]
if ARGV[10] ~= '' then
  local cur = redis.call('HMGET', KEYS[4], 'o', 'n')
  if (not cur[1]) or cur[1] ~= ARGV[10] or tonumber(cur[2]) ~= tonumber(ARGV[11]) then
    return {3, tonumber(cur[2] or '0'), 0, cur[1] or ''}
  end
end
local key = ARGV[3]
if key ~= '' then
  local v = redis.call('HGET', h, 'k:' .. key)
  if v then
    local a, b = string.match(v, '^(%d+):(%d+)$')
    return {1, tonumber(a), tonumber(b)}
  end
end
local head = tonumber(redis.call('HGET', h, 'h') or '0')
local expected = tonumber(ARGV[2])
if head ~= expected then return {2, head, 0} end
if ARGV[12] ~= '' and head > 0 then
  local tag = redis.call('HGET', h, 'g')
  if ARGV[12] == '0' then
    if tag then return {2, head, 0} end
  elseif tag ~= ARGV[13] then
    return {2, head, 0}
  end
end
local n = #ARGV - 13
local last = expected + n
local fields = {}
for i = 1, n do
  fields[#fields + 1] = 'e:' .. fmt(expected + i)
  fields[#fields + 1] = ARGV[13 + i]
  if #fields >= 1000 then
    redis.call('HSET', h, unpack(fields))
    fields = {}
  end
end
if #fields > 0 then redis.call('HSET', h, unpack(fields)) end
-- the head moves in one command together with the key (and the creation stamp)
local meta = {'h', fmt(last), 'u', ARGV[6]}
if expected == 0 then meta[#meta + 1] = 'c'; meta[#meta + 1] = ARGV[5] end
if key ~= '' then
  meta[#meta + 1] = 'k:' .. key
  meta[#meta + 1] = fmt(expected + 1) .. ':' .. fmt(last)
end
redis.call('HSET', h, unpack(meta))
if ARGV[9] ~= '' then redis.call('HSET', h, 'g', ARGV[9]) else redis.call('HDEL', h, 'g') end
if ARGV[7] ~= '0' then
  redis.call('HSET', h, 's:' .. ARGV[7], ARGV[8])
  redis.call('ZADD', sz, tonumber(ARGV[7]), ARGV[7])
end
redis.call('ZADD', idx, 0, ARGV[1])
if KEYS[6] then
  -- the change feed: positions from one counter, in the order scripts run (Redis runs
  -- one at a time: commit order); each entry names the agent, the seq and the agent's
  -- incarnation (its first position), so entries of a deleted agent never match the
  -- events of one re-created under the same id
  local top = redis.call('INCRBY', KEYS[5], n)
  local inc = redis.call('HGET', h, 'i')
  if expected == 0 or not inc then
    inc = fmt(top - n + 1)
    redis.call('HSET', h, 'i', inc)
  end
  for i = 1, n do
    redis.call('XADD', KEYS[6], '0-' .. fmt(top - n + i), 'a', ARGV[1], 's', fmt(expected + i), 'i', inc)
  end
end
touch(h, sz, ttl_of(h, ARGV[4]))
return {0, expected + 1, last}
