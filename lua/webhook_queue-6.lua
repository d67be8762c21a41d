--[[
  Create a webhook delivery, once, in its target's queue (see _webhook.lua):
  a request's finish may be reported more than once (the worker's reporter,
  a cancel, a history refresh), and the delivery id names the request and
  its finish time. Replaces webhook_add (whose single due set older senders
  still drain; webhook_adopt moves what they left into target queues).

  Input:
    KEYS[1] targets    ZSET target id -> when it may be taken next (ms)
    KEYS[2] slow       ZSET the same, for targets whose last attempt timed out
    KEYS[3] target     HASH name, claim, timeouts, until
    KEYS[4] queue      ZSET the target's deliveries -> next attempt (ms)
    KEYS[5] delivery   HASH of this delivery
    KEYS[6] request's  ZSET of the request's delivery ids -> created (ms)
    ARGV[1] delivery id
    ARGV[2] ms to keep the delivery at most (its retries, then its record)
    ARGV[3] target id
    ARGV[4] target name (host:port)
    ARGV[5 ..] fields and values of the delivery (request, url, signer, body)

  Output:
    1  created (due now, or when its target is free)
    0  it exists already
]]
--@include _common.lua
--@include _webhook.lua
if redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
local now = now_ms()
local args = {'state', 'pending', 'attempts', 0, 'created', now, 'next_at', now, 'target', ARGV[3]}
for i = 5, #ARGV do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[5], unpack(args))
redis.call('PEXPIRE', KEYS[5], ARGV[2])
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('HSET', KEYS[3], 'name', ARGV[4])
wh_keep(KEYS[4], ARGV[2])
wh_keep(KEYS[3], ARGV[2])
wh_place(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], now)
redis.call('ZADD', KEYS[6], now, ARGV[1])
wh_keep(KEYS[6], ARGV[2])
return 1
