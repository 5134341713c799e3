-- KEYS: hash, snapshot zset, index[, receipt]. ARGV: agent[, expected head, receipt
-- token, receipt lifetime in ms]. Reply: 1 if it existed, 0 if not; with an expected
-- head that is not the stored one h, -1 - h and nothing deleted
-- (Backend.delete_agent_at). The receipt makes that conditional delete exact when it is
-- sent again after a lost reply: the try that deletes stores its token under the
-- receipt key, and a try that finds its own token there was applied already (1, nothing
-- deleted again: the stream there now, if any, is another writer's).
if ARGV[2] then
  if KEYS[4] and redis.call('GET', KEYS[4]) == ARGV[3] then return 1 end
  local head = tonumber(redis.call('HGET', KEYS[1], 'h') or '0')
  if head ~= tonumber(ARGV[2]) then return -1 - head end
end
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
if KEYS[4] then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[4]) end
return existed
