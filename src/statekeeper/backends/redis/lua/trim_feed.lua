-- KEYS: feed stream, feed floor. ARGV: the lowest entry id kept ('0-<through + 1>'),
-- through. Drops the entries below it and raises the floor to through (never lowers
-- it). Reply: the number of entries dropped.
-- include: guard.lua
local dropped = redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
local f = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > f then redis.call('SET', KEYS[2], ARGV[2]) end
return dropped
