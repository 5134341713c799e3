-- A lease grant or release with the token its audit entry names (together.lua; the
-- checks of base.check_lease_grant and base.check_fence). Needs now.lua.
-- lease_refused(key, kind 'g'|'r', holder, token): nil when it may be made, else
-- {7, holder, expiry} another holder's running lease | {8, stored token} not the next
-- token | {9, holder, token, expiry} not the current lease (released: holder '').
local function lease_refused(key, kind, holder, token)
  local cur = redis.call('HMGET', key, 'o', 'n', 'x')
  local stored = tonumber(cur[2] or '0')
  if kind == 'g' then
    if cur[1] and cur[1] ~= holder and tonumber(cur[3]) > server_now() then
      return {7, cur[1], cur[3]}
    end
    if stored + 1 ~= token then return {8, stored} end
  elseif (not cur[1]) or cur[1] ~= holder or stored ~= token then
    return {9, cur[1] or '', stored, cur[3] or '0'}
  end
  return nil
end
-- lease_write(key, kind, holder, token, ttl s): the checked grant or release.
local function lease_write(key, kind, holder, token, ttl)
  if kind == 'g' then
    local x = string.format('%.17g', server_now() + tonumber(ttl))
    redis.call('HSET', key, 'o', holder, 'n', token, 'x', x)
  else
    redis.call('HDEL', key, 'o')
    redis.call('HSET', key, 'x', '0')
  end
end
