-- KEYS: hash, snapshot zset. ARGV: default ttl ms, then rewrite_write.lua's fields.
-- Reply: {0, head} done | {2, head} conflict.
-- include: guard.lua
-- include: common.lua
-- include: rewrite_write.lua
local h, sz = KEYS[1], KEYS[2]
local applies, head = rewrite_applies(h, ARGV, 2)
if not applies then return {2, head} end
rewrite_write(h, sz, ARGV, 2)
touch(h, sz, ttl_of(h, ARGV[1]))
return {0, head}
