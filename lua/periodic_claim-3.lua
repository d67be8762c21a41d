--[[
  Claim the periodic requests that are due, atomically, so that each due time
  is handed to one worker however many run this at once. A claimed entry
  stays in `due`, scored by the claim's deadline (now + lease), and the due
  time it stands for is kept in `claims` with the claimer's token. The
  claimer submits the request and calls periodic_done, which puts the entry
  back at its next due time. If the claimer dies in between, the entry comes
  due again at the deadline and the next claimer fires the SAME due time
  (kept in `claims`): its request id is derived from schedule and due time,
  so a repeated fire finds the request made already and makes no second one.

  Input:
    KEYS[1] due     ZSET name -> next due time (ms) or claim deadline
    KEYS[2] claims  HASH name -> "due_ms|token"
    KEYS[3] defs    HASH name -> definition JSON
    ARGV[1] batch: most entries claimed per call
    ARGV[2] lease in ms
    ARGV[3] the claimer's token

  Output:
    {now_ms, name1, due_ms1, definition1, name2, ...}  (now by the server's clock)
]]
--@include _common.lua
local now, batch, lease, token = now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local out = {tostring(now)}
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, batch)
for i = 1, #entries, 2 do
  local name, score = entries[i], entries[i + 1]
  local def = redis.call('HGET', KEYS[3], name)
  if not def then -- removed meanwhile
    redis.call('ZREM', KEYS[1], name)
    redis.call('HDEL', KEYS[2], name)
  else
    local due = score
    local prev = redis.call('HGET', KEYS[2], name)
    if prev then due = string.match(prev, '^(%d+)|') or score end -- a lapsed claim: the same due time again
    redis.call('ZADD', KEYS[1], fmt(now + lease), name)
    redis.call('HSET', KEYS[2], name, due .. '|' .. token)
    out[#out + 1] = name
    out[#out + 1] = due
    out[#out + 1] = def
  end
end
return out
