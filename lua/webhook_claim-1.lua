--[[
  Claim due webhook deliveries for sending. A claimed delivery's score moves
  to the claim's deadline, so no other sender takes it before then; the
  deadline is also the claim's fence (webhook_done checks it). A sender that
  dies leaves its deliveries to be claimed again after the deadline.

  Input:
    KEYS[1] due   ZSET of deliveries: id -> next attempt, or claim deadline (ms)
    ARGV[1] lease in ms (how long a claim lasts)
    ARGV[2] how many deliveries to claim at most

  Output:
    {deadline, id, id, ...}  (just {deadline} when nothing is due)
]]
--@include _common.lua
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local deadline = now + tonumber(ARGV[1])
local out = {deadline}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], deadline, id)
  out[#out + 1] = id
end
return out
