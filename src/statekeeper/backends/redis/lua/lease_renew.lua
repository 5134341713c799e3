-- KEYS: lease. ARGV: holder, token, ttl s. Reply: {1, holder, token, expiry} or
-- {0, current holder|'', current token}
-- include: guard.lua
-- include: now.lua
local now = server_now()
local cur = redis.call('HMGET', KEYS[1], 'o', 'n')
if (not cur[1]) or cur[1] ~= ARGV[1] or tonumber(cur[2]) ~= tonumber(ARGV[2]) then
  return {0, cur[1] or '', tonumber(cur[2] or '0')}
end
local x = string.format('%.17g', now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'x', x)
return {1, ARGV[1], tonumber(ARGV[2]), x}
