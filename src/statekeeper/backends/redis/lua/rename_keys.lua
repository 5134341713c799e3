-- KEYS: hash. ARGV: pairs of idempotency record fields (k:<old form>, k:<new form>).
-- Reply: how many records were renamed. Each record stored under its old form is
-- stored under its new one instead (its range kept; when the new form is stored
-- already, the old one is only dropped), all in this script: after a crash each
-- record is under one of its forms, never neither (Backend.rename_keys: rekey).
-- include: guard.lua
local done = 0
for i = 1, #ARGV, 2 do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if value then
    done = done + redis.call('HSETNX', KEYS[1], ARGV[i + 1], value)
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return done
