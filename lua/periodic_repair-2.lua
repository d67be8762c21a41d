--[[
  Put back schedules that have a definition but no entry in `due` (lost with
  a failover, or removed by hand), each only if its definition is still the
  one the caller read, so a schedule removed or changed meanwhile is not
  brought back.

  Input:
    KEYS[1] defs  HASH name -> definition JSON
    KEYS[2] due   ZSET name -> next due time (ms) or claim deadline
    ARGV[1..] triples: name, definition JSON as read, next due time (ms)

  Output:
    number of schedules put back
]]
local n = 0
for i = 1, #ARGV, 3 do
  local name = ARGV[i]
  if redis.call('HGET', KEYS[1], name) == ARGV[i + 1] and not redis.call('ZSCORE', KEYS[2], name) then
    redis.call('ZADD', KEYS[2], ARGV[i + 2], name)
    n = n + 1
  end
end
return n
