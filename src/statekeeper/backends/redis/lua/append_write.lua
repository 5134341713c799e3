-- The parts of an append, shared by append.lua, together.lua and from_base.lua.
-- An append's fields sit in argv[a0 + 1 .. a0 + 13] as append.lua's ARGV 1..13 (agent,
-- expected, key|'', default ttl ms, first ts, last ts, snapshot seq|'0', snapshot
-- blob, head tag|'', fence holder|'', fence token, tag check, expected tag), its n
-- events after them. Needs common.lua (fmt, touch, ttl_of, held_in) and presence.lua.

-- The checks, nothing written: nil when the append may go ahead, else append.lua's
-- reply: {1, first, last} duplicate | {2, head, 0} conflict | {3, token, 0, holder}.
-- A stream with no head that the index idx lists lost its data: an error reply
-- (presence.lua), not a conflict or a stream started over.
local function check_append(h, lease, idx, argv, a0)
  if argv[a0 + 10] ~= '' then
    local cur = redis.call('HMGET', lease, 'o', 'n')
    if (not cur[1]) or cur[1] ~= argv[a0 + 10] or tonumber(cur[2]) ~= tonumber(argv[a0 + 11]) then
      return {3, tonumber(cur[2] or '0'), 0, cur[1] or ''}
    end
  end
  local key = argv[a0 + 3]
  if key ~= '' then
    local v = redis.call('HGET', h, 'k:' .. key)
    if v then
      local a, b = string.match(v, '^(%d+):(%d+)$')
      return {1, tonumber(a), tonumber(b)}
    end
  end
  local head = tonumber(redis.call('HGET', h, 'h') or '0')
  if head == 0 then presence_check(idx, argv[a0 + 1], argv[a0 + 4]) end
  if head ~= tonumber(argv[a0 + 2]) then return {2, head, 0} end
  local check = argv[a0 + 12]
  if check ~= '' and head > 0 then
    local tag = redis.call('HGET', h, 'g')
    if check == '0' then
      if tag then return {2, head, 0} end
    elseif tag ~= argv[a0 + 13] then
      return {2, head, 0}
    end
  end
  return nil
end

-- The feed's next n positions, before anything else is written: INCRBY on its counter
-- fc; the last position taken, or nil (nothing written) when the feed lost its
-- counter and the positions handed out are unknown. A counter that answers n started
-- over: a new feed, or one whose counter was lost (evicted, deleted). Then the stream
-- fs tells: its last id is the last position handed out (every position gets its entry
-- in the script that takes it, and XTRIM keeps the last id), so the counter goes on
-- from there — the same positions as if it had never been lost. Without the stream, a
-- feed that had handed out positions (its proof entry '\0f' in the index idx, added
-- when a feed starts, or a floor) cannot go on: nil. Else a new feed: the proof entry.
-- Costs nothing unless the counter starts over; not checked where presence is not
-- (guard.lua: an evictable copy, a store without the index's proof entry).
local function feed_take(fc, fs, idx, n)
  local top = redis.call('INCRBY', fc, n)
  if top ~= n then return top end
  if redis.call('EXISTS', fs) == 1 then
    local info = redis.call('XINFO', 'STREAM', fs)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then
        local last = tonumber(string.match(info[i + 1], '%-(%d+)$'))
        if last > 0 then return redis.call('INCRBY', fc, last) end
      end
    end
  end
  if not presence_on then return top end  -- (a copy that may be lost: not checked)
  if redis.call('ZSCORE', idx, '\0f')
      or tonumber(redis.call('GET', fs .. ':floor') or '0') > 0 then
    redis.call('DEL', fc)
    return nil
  end
  redis.call('ZADD', idx, 0, '\0f')
  return top
end

-- The error reply of a feed that lost its counter (feed_take answered nil).
local function feed_lost(fc)
  return redis.error_reply('STATEKEEPER_FEED_LOST counter ' .. fc)
end

-- The writes of a checked append: the events, then the head in one HSET with the
-- update stamp, the creation stamp (created: a new stream) and the idempotency key,
-- then the head tag, the snapshot, the index entry, the feed (top: the last position
-- feed_take took for it, fs: its stream; nil without a feed) and the TTL. Returns the
-- last seq.
local function write_append(h, sz, idx, top, fs, argv, a0, n, created)
  local agent, key = argv[a0 + 1], argv[a0 + 3]
  local expected = tonumber(argv[a0 + 2])
  local last = expected + n
  local fields = {}
  for i = 1, n do
    fields[#fields + 1] = 'e:' .. fmt(expected + i)
    fields[#fields + 1] = argv[a0 + 13 + i]
    if #fields >= 1000 then
      redis.call('HSET', h, unpack(fields))
      fields = {}
    end
  end
  if #fields > 0 then redis.call('HSET', h, unpack(fields)) end
  -- the head moves in one command together with the key (and the creation stamp)
  local meta = {'h', fmt(last), 'u', argv[a0 + 6]}
  if created then meta[#meta + 1] = 'c'; meta[#meta + 1] = argv[a0 + 5] end
  if key ~= '' then
    meta[#meta + 1] = 'k:' .. key
    meta[#meta + 1] = fmt(expected + 1) .. ':' .. fmt(last)
  end
  redis.call('HSET', h, unpack(meta))
  if argv[a0 + 9] ~= '' then redis.call('HSET', h, 'g', argv[a0 + 9]) else redis.call('HDEL', h, 'g') end
  if argv[a0 + 7] ~= '0' then
    redis.call('HSET', h, 's:' .. argv[a0 + 7], argv[a0 + 8])
    redis.call('ZADD', sz, tonumber(argv[a0 + 7]), argv[a0 + 7])
  end
  redis.call('ZADD', idx, 0, agent)
  if fs then
    -- the change feed: positions from one counter, in the order scripts run (Redis runs
    -- one at a time: commit order); each entry names the agent, the seq and the agent's
    -- incarnation (its first position), so entries of a deleted agent never match the
    -- events of one re-created under the same id
    local inc = redis.call('HGET', h, 'i')
    if created or not inc then
      inc = fmt(top - n + 1)
      redis.call('HSET', h, 'i', inc)
    end
    for i = 1, n do
      redis.call('XADD', fs, '0-' .. fmt(top - n + i), 'a', agent, 's', fmt(expected + i), 'i', inc)
    end
  end
  if created then
    -- a new stream has no ttl of its own: the own-ttl mark of an agent of this id
    -- that expired goes (presence.lua: its loss would pass for an expiry)
    if expired_marks[idx .. '\n' .. agent] then redis.call('ZREM', idx, '\0t:' .. agent) end
    -- a new stream a legal hold covers never expires (see common.lua): the shard's
    -- holds set is <base>holds beside its index <base>agents, in the same hash slot
    if held_in(string.sub(idx, 1, #idx - 6) .. 'holds', agent) then
      redis.call('HSET', h, 'p', '1')
    end
  end
  touch(h, sz, ttl_of(h, argv[a0 + 4]))
  return last
end
