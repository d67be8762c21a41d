--[[
  Finish a claim of periodic_claim: record what was fired and, if the claim
  is still this claimer's (not lapsed and taken over, nor dropped by a new
  definition), put the schedule back at its next due time.

  Input:
    KEYS[1] due     ZSET name -> next due time (ms) or claim deadline
    KEYS[2] claims  HASH name -> "due_ms|token"
    KEYS[3] defs    HASH name -> definition JSON
    KEYS[4] state   HASH name -> JSON (last due, last run, last request id, error)
    ARGV[1] name
    ARGV[2] the claimer's token
    ARGV[3] next due time (ms)
    ARGV[4] state JSON ("" = leave the state alone)

  Output:
    1  rescheduled
    0  the claim was no longer ours (state still recorded)
]]
local name, token = ARGV[1], ARGV[2]
if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], name, ARGV[4]) end
local claim = redis.call('HGET', KEYS[2], name)
if not claim or string.match(claim, '|(.*)$') ~= token then return 0 end
redis.call('HDEL', KEYS[2], name)
if redis.call('HEXISTS', KEYS[3], name) == 1 then
  redis.call('ZADD', KEYS[1], ARGV[3], name)
else
  redis.call('ZREM', KEYS[1], name)
end
return 1
