-- KEYS: hash, snapshot zset, index. ARGV: default ttl ms, agent, then
-- rewrite_write.lua's fields. Reply: {0, head} done | {2, head} conflict | {3, head,
-- seq, base, 'e'|'s'} an event named is not stored (pruned) or a snapshot carried is
-- below the base, nothing written (an agent the
-- index lists without a head lost its data: presence.lua, an error reply).
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: rewrite_write.lua
local h, sz = KEYS[1], KEYS[2]
local applies, head = rewrite_applies(h, ARGV, 3)
if not applies then
  if head == 0 then presence_check(KEYS[3], ARGV[2], ARGV[1]) end
  return {2, head}
end
local low, base, what = rewrite_unstored(h, ARGV, 3)
if low then return {3, head, low, base, what} end
rewrite_write(h, sz, ARGV, 3)
touch(h, sz, ttl_of(h, ARGV[1]))
return {0, head}
