-- KEYS: hash, snapshot zset. ARGV: expected seq, has expected tag 0|1, expected tag,
-- has new tag 0|1, new tag, default ttl ms, n events, then per event: seq, checksum,
-- payload; then per snapshot: seq, blob. Reply: {0, head} done | {2, head} conflict.
-- include: common.lua
local h, sz = KEYS[1], KEYS[2]
local cur = redis.call('HMGET', h, 'h', 'g')
local head = tonumber(cur[1] or '0')
local same_tag = (ARGV[2] == '0' and not cur[2]) or (ARGV[2] == '1' and cur[2] == ARGV[3])
if head == 0 or head ~= tonumber(ARGV[1]) or not same_tag then return {2, head} end
local n = tonumber(ARGV[7])
local at = 8
for i = 1, n do
  local field = 'e:' .. ARGV[at]
  local old = redis.call('HGET', h, field)
  -- keep the timestamp and kind, replace checksum and payload
  local _, nkind = struct.unpack('>dHH', old)
  local kind = string.sub(old, 13, 12 + nkind)
  local blob = string.sub(old, 1, 8) .. struct.pack('>HH', nkind, #ARGV[at + 1])
    .. kind .. ARGV[at + 1] .. ARGV[at + 2]
  redis.call('HSET', h, field, blob)
  at = at + 3
end
while at <= #ARGV do
  redis.call('HSET', h, 's:' .. ARGV[at], ARGV[at + 1])
  redis.call('ZADD', sz, tonumber(ARGV[at]), ARGV[at])
  at = at + 2
end
if ARGV[4] == '1' then redis.call('HSET', h, 'g', ARGV[5]) end
touch(h, sz, ttl_of(h, ARGV[6]))
return {0, head}
