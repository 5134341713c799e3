-- Several streams' appends and changes (delete, snapshot, prune, lease grant or
-- release, rewrite) in ONE script: every check first, then every write, so all or
-- nothing (Backend.append_together).
-- KEYS: per append hash, snapshot zset, index, lease[, feed counter, feed stream]; then
-- per change hash, snapshot zset, index, lease.
-- ARGV: number of appends, number of changes, feed 1|0, default ttl ms; per append its
-- number of events n, append.lua's 13 fields, its n events; per change agent,
-- delete_at|''|'a' (an absence check: the stream has no events), snapshot seq|'0', snapshot blob, prune_to|'', number of drops, drops,
-- lease 'g' grant|'r' release|'', its holder, token, ttl s, rewrite 1|0 and (1)
-- rewrite_write.lua's fields; then the head event's expected checksum of a delete ('' for
-- any); then the expected head of a snapshot and/or prune ('' for any) and its head
-- event's expected checksum ('' for any): the stream the prune was planned on; then
-- the stream's default ttl ms (the store's, or -1 for the store's own streams: never
-- expired, as every other script has it).
-- Reply: {0} all written | {4, change, head, has base, stored base} a prune refused | {5, change,
-- head} a change's stream is not where it expects | {6, append, append.lua's refusal
-- (status, a, b, holder)}: a duplicate, a conflict or a stale fence | {7|8|9, change,
-- ...} a lease change refused (lease_write.lua) | {10, change, head, seq, base, 'e'|'s'}
-- a rewrite names an event not stored (pruned) or carries a snapshot below the base
-- (rewrite_write.lua's rewrite_unstored). Nothing is written unless the reply
-- is {0}.
-- include: guard.lua
-- include: common.lua
-- include: presence.lua
-- include: now.lua
-- include: append_write.lua
-- include: prune_write.lua
-- include: lease_write.lua
-- include: rewrite_write.lua
local nreq, nchg = tonumber(ARGV[1]), tonumber(ARGV[2])
local kper = ARGV[3] == '1' and 6 or 4
local ttl = ARGV[4]  -- (the changes: each its own, c.own_ttl)
local reqs, changes = {}, {}
local at = 4
for i = 1, nreq do
  local n = tonumber(ARGV[at + 1])
  reqs[i] = {a0 = at + 1, n = n, k = (i - 1) * kper}
  at = at + 14 + n
end
for j = 1, nchg do
  local k = nreq * kper + (j - 1) * 4
  local c = {
    h = KEYS[k + 1], sz = KEYS[k + 2], idx = KEYS[k + 3], lk = KEYS[k + 4],
    agent = ARGV[at + 1], delete_at = ARGV[at + 2], snap = ARGV[at + 3],
    blob = ARGV[at + 4], prune = ARGV[at + 5], drops = {},
  }
  local nd = tonumber(ARGV[at + 6])
  for d = 1, nd do c.drops[d] = ARGV[at + 6 + d] end
  at = at + 6 + nd
  c.lease, c.holder, c.token, c.ttl = ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3]), ARGV[at + 4]
  at = at + 5
  if ARGV[at] == '1' then  -- a rewrite: its fields from at + 1
    c.rewrite = at + 1
    at = at + 7 + 3 * tonumber(ARGV[at + 6]) + 2 * tonumber(ARGV[at + 7])
  end
  at = at + 1
  c.sum = ARGV[at]
  c.at_head, c.at_sum, c.own_ttl = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  at = at + 3
  if c.delete_at == 'a' then c.absent, c.delete_at = true, '' end
  changes[j] = c
end
-- the checks: nothing is written before all passed
for j, c in ipairs(changes) do
  if c.lease ~= '' then
    local refused = lease_refused(c.lk, c.lease, c.holder, c.token)
    if refused then return {refused[1], j, refused[2], refused[3] or '', refused[4] or ''} end
  end
  if c.rewrite then
    local applies, head = rewrite_applies(c.h, ARGV, c.rewrite)
    if not applies then
      if head == 0 then presence_check(c.idx, c.agent, c.own_ttl) end
      return {5, j, head}
    end
    local low, base, what = rewrite_unstored(c.h, ARGV, c.rewrite)
    if low then return {10, j, head, low, base, what} end
  end
  local head = tonumber(redis.call('HGET', c.h, 'h') or '0')
  if c.absent and head ~= 0 then return {5, j, head} end
  if head == 0 and c.delete_at == '' and c.lease == '' and not c.absent then presence_check(c.idx, c.agent, c.own_ttl) end
  if c.prune ~= '' and c.at_head ~= '' then  -- the stream planned on (see prune.lua)
    if tonumber(c.at_head) ~= head then return {5, j, head} end
    if c.at_sum ~= '' then
      local blob = redis.call('HGET', c.h, 'e:' .. fmt(head))
      if not blob or #blob < 12 then return {5, j, head} end
      local _, nkind, nsum = struct.unpack('>dHH', blob)
      if string.sub(blob, 13 + nkind, 12 + nkind + nsum) ~= c.at_sum then return {5, j, head} end
    end
  end
  if c.snap ~= '0' then
    local s = tonumber(c.snap)
    if s < 1 or s > head then return {5, j, head} end
  end
  if c.delete_at ~= '' and tonumber(c.delete_at) ~= head then return {5, j, head} end
  if c.delete_at ~= '' and c.sum ~= '' then  -- the head record's identity (see delete.lua)
    local blob = redis.call('HGET', c.h, 'e:' .. fmt(head))
    if not blob or #blob < 12 then return {5, j, head} end
    local _, nkind, nsum = struct.unpack('>dHH', blob)
    if string.sub(blob, 13 + nkind, 12 + nkind + nsum) ~= c.sum then return {5, j, head} end
  end
  if c.prune ~= '' then
    local base = tonumber(c.prune)
    local has_base = base > 0 and (c.snap == c.prune or redis.call('HEXISTS', c.h, 's:' .. c.prune) == 1)
    local refused = base < 0 or base >= head or (base > 0 and not has_base)
    local stored = tonumber(redis.call('HGET', c.h, 'b') or '0')
    for _, s in ipairs(c.drops) do
      local seq = tonumber(s)
      if base > 0 and seq == base then refused = true end
      if stored > 0 and stored >= base and seq == stored then refused = true end
    end
    if refused then return {4, j, head, has_base and 1 or 0, stored} end
  end
end
for i, r in ipairs(reqs) do
  local refused = check_append(KEYS[r.k + 1], KEYS[r.k + 4], KEYS[r.k + 3], ARGV, r.a0)
  if refused then return {6, i, refused[1], refused[2], refused[3], refused[4] or ''} end
end
-- the writes: first the feed positions (a feed that lost its counter: the ones taken
-- before it are given back, and nothing is written)
if kper == 6 then
  for i, r in ipairs(reqs) do
    r.top = feed_take(KEYS[r.k + 5], KEYS[r.k + 6], KEYS[r.k + 3], r.n)
    if not r.top then
      for j = 1, i - 1 do redis.call('DECRBY', KEYS[reqs[j].k + 5], reqs[j].n) end
      return feed_lost(KEYS[r.k + 5])
    end
  end
end
for _, c in ipairs(changes) do
  if c.lease ~= '' then
    lease_write(c.lk, c.lease, c.holder, c.token, c.ttl)
  elseif c.rewrite then
    rewrite_write(c.h, c.sz, ARGV, c.rewrite)
    touch(c.h, c.sz, ttl_of(c.h, c.own_ttl))
  elseif c.absent then
    -- (an absence check: nothing to write)
  elseif c.delete_at ~= '' then
    redis.call('DEL', c.h, c.sz)
    redis.call('ZREM', c.idx, c.agent, '\0t:' .. c.agent)
  else
    if c.snap ~= '0' then
      redis.call('HSET', c.h, 's:' .. c.snap, c.blob)
      redis.call('ZADD', c.sz, tonumber(c.snap), c.snap)
    end
    if c.prune ~= '' then prune_write(c.h, c.sz, tonumber(c.prune), c.drops) end
    touch(c.h, c.sz, ttl_of(c.h, c.own_ttl))
  end
end
for _, r in ipairs(reqs) do
  local k = r.k
  local fs = nil
  if kper == 6 then fs = KEYS[k + 6] end
  write_append(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], r.top, fs, ARGV, r.a0, r.n, tonumber(ARGV[r.a0 + 2]) == 0)
end
return {0}
