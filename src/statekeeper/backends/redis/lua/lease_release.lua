-- KEYS: lease. ARGV: holder, token, again 1|0. Reply: 1 released, 0 not the current lease.
-- again = 1: this call was sent before and its reply lost; the first try may have
-- released the lease already. A lease nobody holds whose token is still ours was
-- released with our token (a grant by anyone else would have moved the token on), so
-- it answers 1 as the first try did; a newer token is another holder's: 0.
-- include: guard.lua
-- include: now.lua
-- include: lease_write.lua
if lease_refused(KEYS[1], 'r', ARGV[1], tonumber(ARGV[2])) then
  if ARGV[3] == '1' then
    local cur = redis.call('HMGET', KEYS[1], 'o', 'n')
    if (not cur[1]) and tonumber(cur[2] or '0') == tonumber(ARGV[2]) then return 1 end
  end
  return 0
end
lease_write(KEYS[1], 'r')
return 1
