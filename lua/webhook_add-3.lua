--[[
  Create a webhook delivery, once: a request's finish may be reported more
  than once (the worker's reporter, a cancel, a history refresh), and the
  delivery id names the request and its finish time.

  Input:
    KEYS[1] due        ZSET of deliveries: id -> next attempt (ms)
    KEYS[2] delivery   HASH of this delivery
    KEYS[3] request's  ZSET of the request's delivery ids -> created (ms)
    ARGV[1] delivery id
    ARGV[2] ms to keep the delivery at most (its retries, then its record)
    ARGV[3 ..] fields and values of the delivery (request, url, signer, body)

  Output:
    1  created (due now)
    0  it exists already
]]
--@include _common.lua
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local now = now_ms()
local args = {'state', 'pending', 'attempts', 0, 'created', now, 'next_at', now}
for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(args))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 1
