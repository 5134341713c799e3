-- A rewrite of record bytes (rewrite.lua, together.lua). A[a0 ..]: expected seq, has
-- expected tag 0|1, expected tag, has new tag 0|1, new tag, n events, n snapshots;
-- then per event: seq, checksum, payload; then per snapshot: seq, blob.
-- rewrite_applies(h, A, a0): whether the head is still the expected one, and the head.
local function rewrite_applies(h, A, a0)
  local cur = redis.call('HMGET', h, 'h', 'g')
  local head = tonumber(cur[1] or '0')
  local same_tag = (A[a0 + 1] == '0' and not cur[2]) or (A[a0 + 1] == '1' and cur[2] == A[a0 + 2])
  return head ~= 0 and head == tonumber(A[a0]) and same_tag, head
end
-- rewrite_unstored(h, A, a0): the lowest event seq the rewrite names, the stream's
-- base (field 'b') and 'e' when that event is not stored (pruned: the events run from
-- the base up to the head); else the lowest snapshot seq it carries below the base,
-- the base and 's' (a snapshot the prune removed: never written back); else nil.
local function rewrite_unstored(h, A, a0)
  local low, at = nil, a0 + 7
  for _ = 1, tonumber(A[a0 + 5]) do
    local seq = tonumber(A[at])
    if not low or seq < low then low = seq end
    at = at + 3
  end
  local base = tonumber(redis.call('HGET', h, 'b') or '0')
  if low and low <= base then return low, base, 'e' end
  local snap = nil
  for _ = 1, tonumber(A[a0 + 6]) do
    local seq = tonumber(A[at])
    if seq < base and (not snap or seq < snap) then snap = seq end
    at = at + 2
  end
  if snap then return snap, base, 's' end
  return nil
end
-- rewrite_write(h, sz, A, a0): the checked rewrite; returns the index after its fields.
local function rewrite_write(h, sz, A, a0)
  local at = a0 + 7
  for _ = 1, tonumber(A[a0 + 5]) do
    local field = 'e:' .. A[at]
    local old = redis.call('HGET', h, field)
    -- keep the timestamp and kind, replace checksum and payload
    local _, nkind = struct.unpack('>dHH', old)
    local kind = string.sub(old, 13, 12 + nkind)
    local blob = string.sub(old, 1, 8) .. struct.pack('>HH', nkind, #A[at + 1])
      .. kind .. A[at + 1] .. A[at + 2]
    redis.call('HSET', h, field, blob)
    at = at + 3
  end
  for _ = 1, tonumber(A[a0 + 6]) do
    redis.call('HSET', h, 's:' .. A[at], A[at + 1])
    redis.call('ZADD', sz, tonumber(A[at]), A[at])
    at = at + 2
  end
  if A[a0 + 3] == '1' then redis.call('HSET', h, 'g', A[a0 + 4]) end
  return at
end
