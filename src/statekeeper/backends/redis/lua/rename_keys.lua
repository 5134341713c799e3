-- KEYS: hash[, a guard's hash, snapshot zset, index]. ARGV: the guard's kind: '' none,
-- 'a' (an absence check: its stream has no events) or 'r' (a check of its head:
-- rewrite_write.lua's 7 fields from ARGV[4], no records; its new tag stored); its
-- agent; its stream's default ttl ms; then pairs of idempotency record fields
-- (k:<old form>, k:<new form>) from ARGV[4] (none) or ARGV[11] ('r') or ARGV[4] ('a').
-- Reply: how many records were renamed | {5, head}: the guard's stream is not where
-- it expects (nothing renamed). Each record stored under its old form is stored under
-- its new one instead (its range kept; when the new form is stored already, the old
-- one is only dropped), all in this script: after a crash each record is under one of
-- its forms, never neither (Backend.rename_keys: rekey; the guard: a tiered store's
-- check of the agent's cold marker in the same step).
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: rewrite_write.lua
local kind, first = ARGV[1], 4
if kind == 'a' then
  local head = tonumber(redis.call('HGET', KEYS[2], 'h') or '0')
  if head ~= 0 then return {5, head} end
elseif kind == 'r' then
  local applies, head = rewrite_applies(KEYS[2], ARGV, 4)
  if not applies then
    if head == 0 then presence_check(KEYS[4], ARGV[2], ARGV[3]) end
    return {5, head}
  end
  first = 11
end
local done = 0
for i = first, #ARGV, 2 do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if value then
    done = done + redis.call('HSETNX', KEYS[1], ARGV[i + 1], value)
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
if kind == 'r' then
  rewrite_write(KEYS[2], KEYS[3], ARGV, 4)
  touch(KEYS[2], KEYS[3], ttl_of(KEYS[2], ARGV[3]))
end
return done
