-- KEYS: lease. ARGV: holder, token. Reply: 1 released, 0 not the current lease.
-- include: now.lua
-- include: lease_write.lua
if lease_refused(KEYS[1], 'r', ARGV[1], tonumber(ARGV[2])) then return 0 end
lease_write(KEYS[1], 'r')
return 1
