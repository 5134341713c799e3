-- KEYS: lease. ARGV: token. Reply: 1 raised, 0 already at or above it.
-- A token carried from another store (Backend.carry_lease_tokens): the lease raised
-- to it, nobody holding it (as lease_write.lua releases); a stored token at or above
-- it is left alone (a token never goes back).
-- include: guard.lua
if tonumber(redis.call('HGET', KEYS[1], 'n') or '0') >= tonumber(ARGV[1]) then return 0 end
redis.call('HDEL', KEYS[1], 'o')
redis.call('HSET', KEYS[1], 'n', ARGV[1], 'x', '0')
return 1
