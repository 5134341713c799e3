-- KEYS: hash, snapshot zset, index. ARGV: after, to|-1, limit|-1, default ttl ms, touch
-- 0|1, agent. Reply: {head, {blobs of after+1 .. }, after} (after raised to the pruned
-- base 'b'); an agent the index lists without a head lost its data (presence.lua).
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
local h = KEYS[1]
local head = tonumber(redis.call('HGET', h, 'h') or '0')
if head == 0 then presence_check(KEYS[3], ARGV[6], ARGV[4]) end
local after = tonumber(ARGV[1])
local base = tonumber(redis.call('HGET', h, 'b') or '0')
if after < base then after = base end
local hi = head
local to = tonumber(ARGV[2])
if to >= 0 and to < hi then hi = to end
local limit = tonumber(ARGV[3])
if limit >= 0 and after + limit < hi then hi = after + limit end
local out = events_between(h, after + 1, hi)
if head > 0 and ARGV[5] == '1' then touch(h, KEYS[2], ttl_of(h, ARGV[4])) end
return {head, out, after}
