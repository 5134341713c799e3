-- KEYS: hash, snapshot zset, index, lease[, feed counter, feed stream]. ARGV: agent, expected, key|'', default ttl
-- ms, first ts, last ts, snapshot seq|'0', snapshot blob, head tag|'', fence holder|'',
-- fence token, tag check (''|'0' expect no tag|'1' expect ARGV[13]), expected tag,
-- events...
-- Reply: {0, first, last} appended | {1, first, last} duplicate | {2, head, 0} conflict
-- (head seq, or with a tag check the head tag, moved) | {3, current token, 0, current
-- holder|''} the fence is not the current lease.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: append_write.lua
local refused = check_append(KEYS[1], KEYS[4], KEYS[3], ARGV, 0)
if refused then return refused end
local expected = tonumber(ARGV[2])
local n = #ARGV - 13
local top = nil
if KEYS[6] then
  top = feed_take(KEYS[5], KEYS[6], KEYS[3], n)
  if not top then return feed_lost(KEYS[5]) end
end
local last = write_append(KEYS[1], KEYS[2], KEYS[3], top, KEYS[6], ARGV, 0, n, expected == 0)
return {0, expected + 1, last}
