-- KEYS: hash, snapshot zset, index. ARGV: agent[, expected head]. Reply: 1 if it
-- existed, 0 if not; with an expected head that is not the stored one h, -1 - h and
-- nothing deleted (Backend.delete_agent_at).
if ARGV[2] then
  local head = tonumber(redis.call('HGET', KEYS[1], 'h') or '0')
  if head ~= tonumber(ARGV[2]) then return -1 - head end
end
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return existed
