-- The store's identity check (identity.py), the first thing every script runs. The
-- last ARGV is m, the one before it the presence flag p (1: the shards' agent indexes
-- carry their proof entry, so presence.lua may tell a lost agent from a new one), the m
-- ARGV before it the tokens the backend adopted when it opened the store, the last m
-- KEYS the matching shards' marker keys (in the same order). A marker that is gone, or
-- holds another token, means its shard lost its data since (flushed, its keys deleted
-- or evicted, the server restarted without persistence): the script answers an error
-- naming the marker and writes nothing. All are taken off KEYS and ARGV, so the script
-- below sees only its own. Needs nothing.
local presence_on = false
do
  local m = tonumber(table.remove(ARGV))
  presence_on = table.remove(ARGV) == '1'
  for _ = 1, m do
    local token, key = table.remove(ARGV), table.remove(KEYS)
    local found = redis.call('GET', key)
    if found ~= token then
      return redis.error_reply('STATEKEEPER_STORE_LOST ' .. (found and 'replaced ' or 'gone ') .. key)
    end
  end
end
