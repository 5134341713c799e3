-- An agent's presence (identity.py): the shard's agent index lists every agent stored
-- (an append adds it, a delete takes it off in the same script), and its proof entry
-- ('\0', no agent id starts with it) shows the index itself is whole (Redis evicts,
-- deletes and expires whole keys). So an agent whose hash holds no head but whom the
-- index lists lost its data — its hash evicted (an allkeys-* policy), deleted (DEL) or
-- expired (an EXPIRE outside the store's ttl) — unless it may expire: the store's ttl
-- (ttl > 0) or its own (set_ttl marks it in the index as '\0t:<agent>'). Checked only
-- where a hash holds no head, so it costs a stored agent nothing. Needs guard.lua.
local function hex(s)
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end
-- The own-ttl marks presence_check found (idx .. '\n' .. agent: an agent that expired):
-- an append that creates the agent again takes its mark off (append_write.lua), so
-- its own later loss is not taken for an expiry.
local expired_marks = {}
-- presence_check(idx, agent, ttl): raises (an error reply, nothing written: call it
-- before any write) when the index is not whole, or lists the agent as stored.
local function presence_check(idx, agent, ttl)
  if not presence_on then return end
  if not redis.call('ZSCORE', idx, '\0') then
    error({err = 'STATEKEEPER_STORE_LOST index ' .. idx})
  end
  if redis.call('ZSCORE', idx, agent) and tonumber(ttl) <= 0 then
    if not redis.call('ZSCORE', idx, '\0t:' .. agent) then
      error({err = 'STATEKEEPER_AGENT_LOST ' .. hex(agent) .. ' '})
    end
    expired_marks[idx .. '\n' .. agent] = true
  end
end
