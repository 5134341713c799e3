-- KEYS: lease. ARGV: holder, token. Reply: 1 released, 0 not the current lease.
local cur = redis.call('HMGET', KEYS[1], 'o', 'n')
if (not cur[1]) or cur[1] ~= ARGV[1] or tonumber(cur[2]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HDEL', KEYS[1], 'o')
redis.call('HSET', KEYS[1], 'x', '0')
return 1
