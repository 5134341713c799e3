-- KEYS: hash, snapshot zset, index, receipt. ARGV: agent, expected head ('' for none),
-- receipt token, receipt lifetime in ms, the agent's default ttl (as the other scripts
-- take it), the head event's expected checksum ('' for any: with an expected head only).
-- Reply: 1 if it existed — a lost agent (presence.lua: its hash gone while
-- the whole index lists it and it may not expire) counts, deleting acknowledges the
-- loss — 0 if not; with an expected head that is not the stored one h, -1 - h and
-- nothing deleted (Backend.delete_agent_at); -1 - h too when the head event (e:h,
-- framed >dHH: timestamp, kind and checksum lengths, then kind, checksum, payload) has
-- another checksum: the agent was deleted and written again up to h since. The receipt makes a delete exact when it is sent again
-- after a lost reply: the try that runs stores its token and its answer under the
-- receipt key, and a try that finds its own token there was applied already: its
-- answer is returned and nothing is deleted again (the stream there now, if any, is
-- another writer's).
-- include: guard.lua
local receipt = redis.call('GET', KEYS[4])
if receipt and string.sub(receipt, 1, #ARGV[3]) == ARGV[3] then
  return tonumber(string.sub(receipt, #ARGV[3] + 2))
end
if ARGV[2] ~= '' then
  local head = tonumber(redis.call('HGET', KEYS[1], 'h') or '0')
  if head ~= tonumber(ARGV[2]) then return -1 - head end
  if ARGV[6] ~= '' then
    local blob = redis.call('HGET', KEYS[1], 'e:' .. string.format('%d', head))
    if not blob or #blob < 12 then return -1 - head end
    local _, nkind, nsum = struct.unpack('>dHH', blob)
    if string.sub(blob, 13 + nkind, 12 + nkind + nsum) ~= ARGV[6] then return -1 - head end
  end
end
local existed = redis.call('EXISTS', KEYS[1])
if existed == 0 and presence_on and redis.call('ZSCORE', KEYS[3], '\0')
    and redis.call('ZSCORE', KEYS[3], ARGV[1]) and tonumber(ARGV[5]) <= 0
    and not redis.call('ZSCORE', KEYS[3], '\0t:' .. ARGV[1]) then
  existed = 1  -- lost (evicted, deleted by hand...): this delete acknowledges it
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1], '\0t:' .. ARGV[1])  -- (and its own-ttl mark)
redis.call('SET', KEYS[4], ARGV[3] .. ':' .. existed, 'PX', ARGV[4])
return existed
