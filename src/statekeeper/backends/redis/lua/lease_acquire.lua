-- KEYS: lease. ARGV: holder, ttl s. Reply: {1|0, holder, token, expiry}
-- include: guard.lua
-- include: now.lua
local now = server_now()
local cur = redis.call('HMGET', KEYS[1], 'o', 'n', 'x')
local token = tonumber(cur[2] or '0')
if cur[1] and cur[1] ~= ARGV[1] and tonumber(cur[3]) > now then
  return {0, cur[1], token, cur[3]}
end
token = token + 1
local x = string.format('%.17g', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'n', token, 'x', x)
return {1, ARGV[1], token, x}
