--[[
  Take a due target for sending: its earliest due delivery, now this
  caller's until the returned deadline, which is also the score of the
  target (no other sender takes it meanwhile: one delivery at a time per
  target) and of the delivery in the target's queue (the claim's fence:
  webhook_sent checks it). A sender that dies leaves the target and the
  delivery to be taken again after the deadline.

  Input:
    KEYS[1] targets    ZSET target id -> when it may be taken next (ms)
    KEYS[2] slow       ZSET the same, for targets whose last attempt timed out
    KEYS[3] target     HASH name, claim, timeouts, until
    KEYS[4] queue      ZSET the target's deliveries -> next attempt, or claim deadline (ms)
    ARGV[1] target id
    ARGV[2] lease in ms (how long the claim lasts)

  Output:
    {deadline, delivery id}
    {}  the target is not due (taken by another sender, or nothing of it is due yet)
]]
--@include _common.lua
--@include _webhook.lua
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) > now then return {} end
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then -- its queue moved on (expired, or a claim that ran out was recorded late)
  redis.call('HDEL', KEYS[3], 'claim')
  wh_place(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], now)
  return {}
end
local deadline = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[4], deadline, due[1])
redis.call('HSET', KEYS[3], 'claim', deadline)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], deadline, ARGV[1])
else
  redis.call('ZADD', KEYS[2], deadline, ARGV[1])
end
return {deadline, due[1]}
